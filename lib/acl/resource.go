package acl

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ClusterName is the name of the one resource of type Cluster. Kafka calls
// its cluster resource "kafka-cluster"; Strata uses the same name so that
// bindings list the way Kafka operators expect.
const ClusterName = "kafka-cluster"

// AnyResource is the literal resource name that, in a binding, matches
// every resource of the binding's type (Kafka's --topic '*').
const AnyResource = "*"

// MaxResourceNameLen is the longest resource name a binding may carry, in
// bytes: longer than any topic (249) or sensible group or transactional id.
const MaxResourceNameLen = 1024

// ResourceType is the kind of thing an operation acts on. The zero value
// is invalid.
type ResourceType uint8

const (
	Topic ResourceType = iota + 1
	Group
	Cluster
	// TransactionalID is a producer's transactional id (Kafka's
	// TransactionalId resource): write on it lets a principal initialize
	// that producer, which fences the one before, and run its
	// transactions; describe lets it see the transaction's state.
	TransactionalID
)

// numResourceTypes sizes arrays indexed by ResourceType.
const numResourceTypes = int(TransactionalID) + 1

var resourceTypeNames = [...]string{Topic: "topic", Group: "group", Cluster: "cluster", TransactionalID: "transactional-id"}

// String returns "topic", "group", "cluster" or "transactional-id", or
// "ResourceType(n)".
func (t ResourceType) String() string {
	if t.Valid() {
		return resourceTypeNames[t]
	}
	return fmt.Sprintf("ResourceType(%d)", uint8(t))
}

// Valid reports whether t is Topic, Group, Cluster or TransactionalID.
func (t ResourceType) Valid() bool { return t >= Topic && t <= TransactionalID }

// ParseResourceType reads "topic", "group", "cluster" or
// "transactional-id", in any case.
func ParseResourceType(s string) (ResourceType, error) {
	for t := Topic; t <= TransactionalID; t++ {
		if strings.EqualFold(s, resourceTypeNames[t]) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("acl: resource type %s is not topic, group, cluster or transactional-id", quoteIfOdd(s))
}

// PatternType says how a binding's resource name matches. The zero value
// is invalid.
type PatternType uint8

const (
	// Literal matches the resource of exactly that name, or every
	// resource of the type for the name "*".
	Literal PatternType = iota + 1
	// Prefixed matches every resource whose name starts with the
	// binding's name.
	Prefixed
)

var patternTypeNames = [...]string{Literal: "literal", Prefixed: "prefixed"}

// String returns "literal" or "prefixed", or "PatternType(n)".
func (p PatternType) String() string {
	if p.Valid() {
		return patternTypeNames[p]
	}
	return fmt.Sprintf("PatternType(%d)", uint8(p))
}

// Valid reports whether p is Literal or Prefixed.
func (p PatternType) Valid() bool { return p == Literal || p == Prefixed }

// ParsePatternType reads "literal" or "prefixed", in any case.
func ParsePatternType(s string) (PatternType, error) {
	for p := Literal; p <= Prefixed; p++ {
		if strings.EqualFold(s, patternTypeNames[p]) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("acl: pattern type %s is not literal or prefixed", quoteIfOdd(s))
}

// Resource is one thing a request acts on: a topic, a group, the
// cluster or a transactional id.
type Resource struct {
	Type ResourceType
	Name string
}

// String returns "topic orders", "group billing" or "cluster
// kafka-cluster"; a name with spaces, quotes or control characters is
// Go-quoted so the result stays one line.
func (r Resource) String() string { return r.Type.String() + " " + displayName(r.Name) }

// checkResourceName returns nil when name may appear in a binding: 1 to
// MaxResourceNameLen bytes of UTF-8 without control characters.
func checkResourceName(name string) error {
	if name == "" {
		return fmt.Errorf("empty resource name")
	}
	if len(name) > MaxResourceNameLen {
		return fmt.Errorf("resource name longer than %d bytes", MaxResourceNameLen)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("resource name is not UTF-8")
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return fmt.Errorf("resource name has control characters")
	}
	return nil
}

// displayName returns name as is when it is printable without spaces or
// quotes, else Go-quoted.
func displayName(name string) string {
	if name == "" || !utf8.ValidString(name) || strings.IndexFunc(name, func(r rune) bool {
		return !unicode.IsPrint(r) || unicode.IsSpace(r) || r == '"' || r == '\''
	}) >= 0 {
		return fmt.Sprintf("%q", name)
	}
	return name
}
