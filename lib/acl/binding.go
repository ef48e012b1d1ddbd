package acl

import (
	"cmp"
	"errors"
	"fmt"
)

// Binding is one ACL: Principal may (Allow) or may not (Deny) do
// Operation to the resources of ResourceType that ResourceName names
// under PatternType. Every field is required; [Binding.Validate] says
// which combinations are allowed. Bindings are comparable values.
type Binding struct {
	// Principal is a user or User:*; never a service.
	Principal Principal
	// Permission is Allow or Deny.
	Permission Permission
	// Operation is one operation, or All.
	Operation Operation
	// ResourceType is Topic, Group, Cluster or TransactionalID.
	ResourceType ResourceType
	// ResourceName is the topic, group or transactional id (or its
	// prefix, or "*" for every one), or ClusterName for the cluster.
	ResourceName string
	// PatternType is Literal or Prefixed; always Literal for the cluster.
	PatternType PatternType
}

// Validate returns nil when b is a binding the Authorizer accepts, else
// one error naming what is wrong:
//   - the principal is a user or User:*, with a valid name (a service
//     may do everything already: a binding for it would mean nothing);
//   - permission, operation, resource and pattern types are valid;
//   - a cluster binding names ClusterName, literally;
//   - a topic, group or transactional id is 1 to MaxResourceNameLen bytes of UTF-8
//     without control characters, and "*" only literally.
func (b Binding) Validate() error {
	switch {
	case b.Principal.IsWildcard():
	case b.Principal.Type == TypeService:
		return fmt.Errorf("acl: binding for %s: service identities may do everything, so no binding names one", b.Principal)
	case b.Principal.Type != TypeUser:
		return fmt.Errorf("acl: binding principal %s is not a user", quoteIfOdd(b.Principal.String()))
	default:
		if err := CheckName(b.Principal.Name); err != nil {
			return fmt.Errorf("acl: binding principal %s: %w", quoteIfOdd(b.Principal.String()), err)
		}
	}
	if !b.Permission.Valid() {
		return fmt.Errorf("acl: binding has invalid %v", b.Permission)
	}
	if !b.Operation.Valid() {
		return fmt.Errorf("acl: binding has invalid %v", b.Operation)
	}
	if !b.PatternType.Valid() {
		return fmt.Errorf("acl: binding has invalid %v", b.PatternType)
	}
	switch b.ResourceType {
	case Cluster:
		if b.ResourceName != ClusterName {
			return fmt.Errorf("acl: the cluster resource is named %s, not %s", ClusterName, displayName(b.ResourceName))
		}
		if b.PatternType != Literal {
			return errors.New("acl: a cluster binding cannot be prefixed")
		}
	case Topic, Group, TransactionalID:
		if err := checkResourceName(b.ResourceName); err != nil {
			return fmt.Errorf("acl: %v binding: %w", b.ResourceType, err)
		}
		if b.ResourceName == AnyResource && b.PatternType == Prefixed {
			return fmt.Errorf("acl: %v binding: the prefix %q would be taken literally; use the literal name %q for every %v", b.ResourceType, AnyResource, AnyResource, b.ResourceType)
		}
	default:
		return fmt.Errorf("acl: binding has invalid %v", b.ResourceType)
	}
	return nil
}

// String returns b as one line, for listings and logs:
// "User:alice allow write topic orders", with " (prefixed)" for a
// prefixed binding.
func (b Binding) String() string {
	s := fmt.Sprintf("%v %v %v %v", b.Principal, b.Permission, b.Operation, Resource{b.ResourceType, b.ResourceName})
	if b.PatternType == Prefixed {
		s += " (prefixed)"
	}
	return s
}

// Resource returns the binding's resource type and name.
func (b Binding) Resource() Resource { return Resource{b.ResourceType, b.ResourceName} }

// Compare orders bindings for listings: by principal, resource type,
// resource name, pattern type, permission, then operation. It returns a
// negative number, zero or a positive number, like cmp.Compare, and is
// zero only for equal bindings.
func Compare(a, b Binding) int {
	return cmp.Or(
		cmp.Compare(a.Principal.Type, b.Principal.Type),
		cmp.Compare(a.Principal.Name, b.Principal.Name),
		cmp.Compare(a.ResourceType, b.ResourceType),
		cmp.Compare(a.ResourceName, b.ResourceName),
		cmp.Compare(a.PatternType, b.PatternType),
		cmp.Compare(a.Permission, b.Permission),
		cmp.Compare(a.Operation, b.Operation),
	)
}
