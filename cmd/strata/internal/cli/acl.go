package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/guard"
)

// ACLs are Kafka's: a principal is allowed or denied an operation on a
// topic, a group or the cluster, named literally or by prefix; deny wins,
// and nothing is allowed without an allow (docs/design/security.md). The
// command line that names bindings is lib/acl's Spec, shared with its
// parser and tests.

const aclSynopsis = "--principal User:NAME (--allow|--deny) OPS (--topic T|--group G|--cluster|--transactional-id ID) [--prefixed]"

// aclSpecFlags defines acl.Spec's flags on f, with their help.
func aclSpecFlags(f *flagSet, spec *acl.Spec) {
	spec.RegisterFlags(f.fs)
	for _, d := range []struct{ name, meta string }{
		{"principal", "User:NAME"}, {"allow", "OPS"}, {"deny", "OPS"}, {"topic", "T"}, {"group", "G"}, {"cluster", ""}, {"transactional-id", "ID"}, {"prefixed", ""},
	} {
		f.defs = append(f.defs, flagDef{long: d.name, meta: d.meta, usage: f.fs.Lookup(d.name).Usage})
	}
}

// specBindings returns the bindings spec names; a mistake is a usage
// error.
func specBindings(e *Env, spec acl.Spec) ([]acl.Binding, error) {
	bs, err := spec.Bindings()
	if err != nil {
		return nil, usagef("%s (see '%s --help')", strings.TrimPrefix(err.Error(), "acl: "), e.Path)
	}
	return bs, nil
}

// aclJSON is one binding in JSON output.
type aclJSON struct {
	Principal    string `json:"principal"`
	Permission   string `json:"permission"`
	Operation    string `json:"operation"`
	ResourceType string `json:"resource_type"`
	ResourceName string `json:"resource_name"`
	PatternType  string `json:"pattern_type"`
}

// enumName is a wire enum's name without its prefix, in lower case:
// ACL_OPERATION_WRITE is "write".
func enumName(s fmt.Stringer, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), prefix))
}

func toACLJSON(b *commonv1.AclBinding) aclJSON {
	pattern := enumName(b.GetPatternType(), "ACL_PATTERN_TYPE_")
	if b.GetPatternType() == commonv1.AclPatternType_ACL_PATTERN_TYPE_UNSPECIFIED {
		pattern = "literal" // an unset pattern type is literal (lib/guard)
	}
	return aclJSON{
		Principal:    b.GetPrincipal(),
		Permission:   enumName(b.GetPermission(), "ACL_PERMISSION_"),
		Operation:    enumName(b.GetOperation(), "ACL_OPERATION_"),
		ResourceType: acl.ResourceType(b.GetResourceType()).String(), // "transactional-id", as the flag
		ResourceName: b.GetResourceName(),
		PatternType:  pattern,
	}
}

// sortBindings orders wire bindings as lib/acl lists them (by principal,
// resource, pattern, permission, operation); ones it cannot read go last.
func sortBindings(bs []*commonv1.AclBinding) {
	key := func(b *commonv1.AclBinding) (acl.Binding, bool) {
		v, err := guard.BindingFromProto(b)
		return v, err == nil
	}
	slices.SortStableFunc(bs, func(a, b *commonv1.AclBinding) int {
		av, aok := key(a)
		bv, bok := key(b)
		switch {
		case aok && bok:
			return acl.Compare(av, bv)
		case aok:
			return -1
		case bok:
			return 1
		}
		return 0
	})
}

// printBindings prints bindings: JSON under key (or a bare array when key
// is ""), else a table.
func printBindings(e *Env, key string, bs []*commonv1.AclBinding) error {
	sortBindings(bs)
	if e.Output == "json" {
		out := []aclJSON{}
		for _, b := range bs {
			out = append(out, toACLJSON(b))
		}
		if key == "" {
			return writeJSON(e.Stdout, out)
		}
		return writeJSON(e.Stdout, map[string][]aclJSON{key: out})
	}
	var rows [][]string
	for _, b := range bs {
		j := toACLJSON(b)
		rows = append(rows, []string{j.Principal, j.Permission, j.Operation, j.ResourceType, j.ResourceName, j.PatternType})
	}
	table(e.Stdout, []string{"PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE", "NAME", "PATTERN"}, rows)
	return nil
}

func aclCreate(ctx context.Context, e *Env, args []string) error {
	var spec acl.Spec
	f := newFlags(e, "strata acl create "+aclSynopsis,
		"Allow or deny a principal operations on a topic, a group or the cluster. OPS is a\n"+
			"comma-separated list of read, write, create, delete, alter, describe and all; one ACL\n"+
			"is created per operation. A deny beats any allow; nothing is allowed without an allow.\n"+
			"It takes effect on every service within a second.",
		"strata acl create --principal User:alice --allow read,write --topic orders\n"+
			"strata acl create --principal User:alice --allow read --group orders- --prefixed")
	aclSpecFlags(f, &spec)
	if _, err := f.parse(args); err != nil {
		return err
	}
	bs, err := specBindings(e, spec)
	if err != nil {
		return err
	}
	req := &gatewayv1.CreateAclsRequest{}
	for _, b := range bs {
		req.Acls = append(req.Acls, guard.BindingToProto(b))
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if _, err := e.gateway().CreateAcls(ctx, connect.NewRequest(req)); err != nil {
		return err
	}
	if e.Output == "json" {
		return printBindings(e, "created", req.Acls)
	}
	for _, b := range bs {
		fmt.Fprintf(e.Stdout, "created ACL: %s\n", b)
	}
	return nil
}

func aclList(ctx context.Context, e *Env, args []string) error {
	var principal string
	f := newFlags(e, "strata acl list [--principal P]",
		"List ACLs, every one or those of one principal, sorted by principal and resource.\n"+
			"JSON: an array of {\"principal\",\"permission\",\"operation\",\"resource_type\",\"resource_name\",\"pattern_type\"}.",
		"strata acl list --principal User:alice --output json")
	f.String(&principal, "", "principal", "P", "", "only the ACLs of this principal (User:NAME, or User:* for the ones for every user)")
	if _, err := f.parse(args); err != nil {
		return err
	}
	if principal != "" {
		if _, err := acl.ParsePrincipal(principal); err != nil {
			return usagef("--principal: %s", strings.TrimPrefix(err.Error(), "acl: "))
		}
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().DescribeAcls(ctx, connect.NewRequest(&gatewayv1.DescribeAclsRequest{
		Filter: &controllerv1.AclFilter{Principal: principal},
	}))
	if err != nil {
		return err
	}
	return printBindings(e, "", resp.Msg.GetAcls())
}

func aclDelete(ctx context.Context, e *Env, args []string) error {
	var spec acl.Spec
	f := newFlags(e, "strata acl delete "+aclSynopsis,
		"Delete the ACLs named as strata acl create names them, one per operation in OPS.\n"+
			"It takes effect on every service within a second. An ACL that does not exist is\n"+
			"reported and is not an error.",
		"strata acl delete --principal User:alice --allow write --topic orders")
	aclSpecFlags(f, &spec)
	if _, err := f.parse(args); err != nil {
		return err
	}
	bs, err := specBindings(e, spec)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var deleted []*commonv1.AclBinding
	for _, b := range bs {
		w := guard.BindingToProto(b)
		resp, err := e.gateway().DeleteAcls(ctx, connect.NewRequest(&gatewayv1.DeleteAclsRequest{Filter: &controllerv1.AclFilter{
			Principal: w.GetPrincipal(), Permission: w.GetPermission(), Operation: w.GetOperation(),
			ResourceType: w.GetResourceType(), ResourceName: w.GetResourceName(), PatternType: w.GetPatternType(),
		}}))
		if err != nil {
			return err
		}
		deleted = append(deleted, resp.Msg.GetDeleted()...)
	}
	if e.Output == "json" {
		return printBindings(e, "deleted", deleted)
	}
	if len(deleted) == 0 {
		fmt.Fprintln(e.Stdout, "no ACL matched: nothing deleted")
		return nil
	}
	sortBindings(deleted)
	for _, w := range deleted {
		fmt.Fprintf(e.Stdout, "deleted ACL: %s\n", aclLine(w))
	}
	return nil
}

// aclLine is a wire binding as lib/acl prints one: "User:alice allow
// write topic orders", " (prefixed)" for a prefix.
func aclLine(w *commonv1.AclBinding) string {
	if b, err := guard.BindingFromProto(w); err == nil {
		return b.String()
	}
	j := toACLJSON(w)
	s := strings.Join([]string{j.Principal, j.Permission, j.Operation, j.ResourceType, j.ResourceName}, " ")
	if j.PatternType == "prefixed" {
		s += " (prefixed)"
	}
	return s
}
