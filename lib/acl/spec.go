package acl

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Spec is the command line that names bindings in `strata acl create` and
// `strata acl delete`:
//
//	--principal User:NAME (--allow|--deny) OPS (--topic T|--group G|--cluster|--transactional-id ID) [--prefixed]
//
// Fields hold the flags' values as typed; [Spec.Bindings] checks them.
// The zero value names nothing.
type Spec struct {
	// Principal is --principal: User:NAME or User:*.
	Principal string
	// Allow is --allow's OPS; exactly one of Allow and Deny is set.
	Allow string
	// Deny is --deny's OPS.
	Deny string
	// Topic is --topic: a topic name, a prefix, or "*".
	Topic string
	// Group is --group: a group id, a prefix, or "*".
	Group string
	// Cluster is --cluster: the cluster resource.
	Cluster bool
	// TransactionalID is --transactional-id: a producer's transactional
	// id, a prefix, or "*".
	TransactionalID string
	// Prefixed is --prefixed: Topic, Group or TransactionalID is a prefix.
	Prefixed bool
}

// RegisterFlags defines Spec's flags on fs, with usage text, for a command
// that parses its own flag set.
func (s *Spec) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Principal, "principal", "", "the principal, User:NAME (User:* for every user)")
	fs.StringVar(&s.Allow, "allow", "", "allow these operations: a comma-separated list of read, write, create, delete, alter, describe, all")
	fs.StringVar(&s.Deny, "deny", "", "deny these operations (same list as --allow); a deny beats any allow")
	fs.StringVar(&s.Topic, "topic", "", "the topic (or prefix with --prefixed; * for every topic)")
	fs.StringVar(&s.Group, "group", "", "the consumer group (or prefix with --prefixed; * for every group)")
	fs.BoolVar(&s.Cluster, "cluster", false, "the cluster itself ("+ClusterName+")")
	fs.StringVar(&s.TransactionalID, "transactional-id", "", "a producer's transactional id (or prefix with --prefixed; * for every one): write to run its transactions, describe to see them")
	fs.BoolVar(&s.Prefixed, "prefixed", false, "match every topic, group or transactional id whose name starts with the given one")
}

// ParseSpec reads a Spec from args (the command's arguments after its
// name) with Go's flag syntax (--flag value or --flag=value); positional
// arguments are refused. It checks the flags' syntax only: call
// Bindings for the bindings they name.
func ParseSpec(args []string) (Spec, error) {
	var s Spec
	fs := flag.NewFlagSet("acl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return Spec{}, fmt.Errorf("acl: %w", err)
	}
	if fs.NArg() > 0 {
		return Spec{}, fmt.Errorf("acl: unexpected argument %s", quoteIfOdd(fs.Arg(0)))
	}
	var empty []string
	fs.Visit(func(f *flag.Flag) {
		if f.Value.String() == "" {
			empty = append(empty, f.Name)
		}
	})
	if len(empty) > 0 {
		return Spec{}, fmt.Errorf("acl: --%s is empty", empty[0])
	}
	return s, nil
}

// Args returns s as command-line arguments that ParseSpec reads back,
// in the order of the synopsis; unset fields are left out.
func (s Spec) Args() []string {
	var a []string
	add := func(name, v string) {
		if v != "" {
			a = append(a, "--"+name, v)
		}
	}
	add("principal", s.Principal)
	add("allow", s.Allow)
	add("deny", s.Deny)
	add("topic", s.Topic)
	add("group", s.Group)
	if s.Cluster {
		a = append(a, "--cluster")
	}
	add("transactional-id", s.TransactionalID)
	if s.Prefixed {
		a = append(a, "--prefixed")
	}
	return a
}

// Bindings returns the bindings s names, one per operation in OPS (in the
// order of Operations), or one error saying what is missing or wrong.
func (s Spec) Bindings() ([]Binding, error) {
	if s.Principal == "" {
		return nil, errors.New("acl: --principal is required (User:NAME)")
	}
	p, err := ParsePrincipal(s.Principal)
	if err != nil {
		return nil, err
	}
	var perm Permission
	var opsText string
	switch {
	case s.Allow != "" && s.Deny != "":
		return nil, errors.New("acl: give --allow or --deny, not both")
	case s.Allow != "":
		perm, opsText = Allow, s.Allow
	case s.Deny != "":
		perm, opsText = Deny, s.Deny
	default:
		return nil, errors.New("acl: --allow OPS or --deny OPS is required")
	}
	ops, err := ParseOperations(opsText)
	if err != nil {
		return nil, err
	}
	var res Resource
	n := 0
	if s.Topic != "" {
		res, n = Resource{Topic, s.Topic}, n+1
	}
	if s.Group != "" {
		res, n = Resource{Group, s.Group}, n+1
	}
	if s.Cluster {
		res, n = Resource{Cluster, ClusterName}, n+1
	}
	if s.TransactionalID != "" {
		res, n = Resource{TransactionalID, s.TransactionalID}, n+1
	}
	if n != 1 {
		return nil, errors.New("acl: give exactly one of --topic, --group and --cluster, or --transactional-id")
	}
	pattern := Literal
	if s.Prefixed {
		if res.Type == Cluster {
			return nil, errors.New("acl: --prefixed applies to --topic, --group and --transactional-id, not --cluster")
		}
		pattern = Prefixed
	}
	out := make([]Binding, 0, len(ops))
	for _, op := range ops {
		b := Binding{Principal: p, Permission: perm, Operation: op, ResourceType: res.Type, ResourceName: res.Name, PatternType: pattern}
		if err := b.Validate(); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// Spec returns the command line that names b alone.
func (b Binding) Spec() Spec {
	s := Spec{Principal: b.Principal.String(), Prefixed: b.PatternType == Prefixed}
	if b.Permission == Deny {
		s.Deny = b.Operation.String()
	} else {
		s.Allow = b.Operation.String()
	}
	switch b.ResourceType {
	case Topic:
		s.Topic = b.ResourceName
	case Group:
		s.Group = b.ResourceName
	case Cluster:
		s.Cluster = true
	case TransactionalID:
		s.TransactionalID = b.ResourceName
	}
	return s
}
