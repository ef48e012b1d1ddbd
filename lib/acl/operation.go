package acl

import (
	"fmt"
	"strings"
)

// Permission is what a binding says: allow or deny. The zero value is
// invalid, so that a binding built without one is refused.
type Permission uint8

const (
	Allow Permission = iota + 1
	Deny
)

var permissionNames = [...]string{Allow: "allow", Deny: "deny"}

// String returns "allow" or "deny", or "Permission(n)" for an invalid one.
func (p Permission) String() string {
	if p.Valid() {
		return permissionNames[p]
	}
	return fmt.Sprintf("Permission(%d)", uint8(p))
}

// Valid reports whether p is Allow or Deny.
func (p Permission) Valid() bool { return p == Allow || p == Deny }

// ParsePermission reads "allow" or "deny", in any case.
func ParsePermission(s string) (Permission, error) {
	for p := Allow; p <= Deny; p++ {
		if strings.EqualFold(s, permissionNames[p]) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("acl: permission %s is not allow or deny", quoteIfOdd(s))
}

// Operation is what a principal does to a resource. The zero value is
// invalid. All, in a binding, stands for every operation; it is not
// something a request does.
type Operation uint8

const (
	Read Operation = iota + 1
	Write
	Create
	Delete
	Alter
	Describe
	All
)

var operationNames = [...]string{
	Read: "read", Write: "write", Create: "create", Delete: "delete",
	Alter: "alter", Describe: "describe", All: "all",
}

// Operations lists every operation, All last, in the order they print.
var Operations = []Operation{Read, Write, Create, Delete, Alter, Describe, All}

// String returns the operation's lower-case name ("read"), or
// "Operation(n)" for an invalid one.
func (o Operation) String() string {
	if o.Valid() {
		return operationNames[o]
	}
	return fmt.Sprintf("Operation(%d)", uint8(o))
}

// Valid reports whether o is one of the operations, All included.
func (o Operation) Valid() bool { return o >= Read && o <= All }

// opMask is a set of concrete operations, one bit each.
type opMask uint8

const allOps opMask = 1<<Read | 1<<Write | 1<<Create | 1<<Delete | 1<<Alter | 1<<Describe

// grants is the set of requested operations an allow of o allows: o
// itself, every operation for All, and describe too for read, write,
// delete and alter (Kafka's implication: who may use a topic may see it).
func (o Operation) grants() opMask {
	switch o {
	case All:
		return allOps
	case Read, Write, Delete, Alter:
		return 1<<o | 1<<Describe
	default:
		return 1 << o
	}
}

// refuses is the set of requested operations a deny of o refuses: o
// itself, or every operation for All. A deny of read does not hide the
// topic (describe), as in Kafka.
func (o Operation) refuses() opMask {
	if o == All {
		return allOps
	}
	return 1 << o
}

// ParseOperation reads one operation name, in any case.
func ParseOperation(s string) (Operation, error) {
	for _, o := range Operations {
		if strings.EqualFold(s, operationNames[o]) {
			return o, nil
		}
	}
	return 0, fmt.Errorf("acl: unknown operation %s (want read, write, create, delete, alter, describe or all)", quoteIfOdd(s))
}

// ParseOperations reads the CLI's OPS: a comma-separated list of
// operation names without spaces ("read,write", "all"). Names are read in
// any case; a name given twice counts once; the result is in the order of
// Operations. An empty list or element is refused.
func ParseOperations(s string) ([]Operation, error) {
	if s == "" {
		return nil, fmt.Errorf("acl: no operations (want a comma-separated list such as read,write)")
	}
	var seen [All + 1]bool
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			return nil, fmt.Errorf("acl: operations %s have an empty element", quoteIfOdd(s))
		}
		o, err := ParseOperation(f)
		if err != nil {
			return nil, err
		}
		seen[o] = true
	}
	var out []Operation
	for _, o := range Operations {
		if seen[o] {
			out = append(out, o)
		}
	}
	return out, nil
}

// FormatOperations writes ops as ParseOperations reads them.
func FormatOperations(ops []Operation) string {
	names := make([]string, len(ops))
	for i, o := range ops {
		names[i] = o.String()
	}
	return strings.Join(names, ",")
}
