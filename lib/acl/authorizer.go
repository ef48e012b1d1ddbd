package acl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// Snapshot is an immutable, indexed set of bindings: what an Authorizer
// checks requests against. Build one with NewSnapshot whenever the set
// changes and hand it to [Authorizer.Store]; readers holding the previous
// one are unaffected. Safe for concurrent use. A nil *Snapshot is empty.
type Snapshot struct {
	bindings []Binding                     // sorted by Compare, without duplicates
	index    map[Principal]*principalRules // User:* included
}

// principalRules are one principal's bindings by resource type.
type principalRules struct {
	byType [numResourceTypes]typeRules
}

// typeRules are one principal's bindings on one resource type: literal
// names in a map, "*" and prefixes in short lists scanned in order.
type typeRules struct {
	literal  map[string][]rule
	any      []rule // literal "*"
	prefixed []rule
}

// rule is a binding compiled for matching.
type rule struct {
	binding *Binding // in Snapshot.bindings
	mask    opMask   // requested operations it allows or refuses
}

// NewSnapshot validates bindings and indexes them. Duplicates count once;
// bindings is not retained. The first invalid binding fails the whole set.
func NewSnapshot(bindings []Binding) (*Snapshot, error) {
	s := &Snapshot{bindings: slices.Clone(bindings), index: map[Principal]*principalRules{}}
	for _, b := range s.bindings {
		if err := b.Validate(); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(s.bindings, Compare)
	s.bindings = slices.Compact(s.bindings)
	for i := range s.bindings {
		b := &s.bindings[i]
		pr := s.index[b.Principal]
		if pr == nil {
			pr = &principalRules{}
			s.index[b.Principal] = pr
		}
		tr := &pr.byType[b.ResourceType]
		r := rule{binding: b, mask: b.Operation.grants()}
		if b.Permission == Deny {
			r.mask = b.Operation.refuses()
		}
		switch {
		case b.PatternType == Prefixed:
			tr.prefixed = append(tr.prefixed, r)
		case b.ResourceName == AnyResource:
			tr.any = append(tr.any, r)
		default:
			if tr.literal == nil {
				tr.literal = map[string][]rule{}
			}
			tr.literal[b.ResourceName] = append(tr.literal[b.ResourceName], r)
		}
	}
	return s, nil
}

// Bindings returns the snapshot's bindings, sorted by Compare, without
// duplicates. The caller may modify the returned slice.
func (s *Snapshot) Bindings() []Binding {
	if s == nil {
		return nil
	}
	return slices.Clone(s.bindings)
}

// Len returns the number of distinct bindings.
func (s *Snapshot) Len() int {
	if s == nil {
		return 0
	}
	return len(s.bindings)
}

// match looks for the bindings of p on r that apply to the requested
// operation bit: the first deny found, else the first allow.
func (s *Snapshot) match(p Principal, bit opMask, r Resource) (deny, allow *Binding) {
	if s == nil {
		return nil, nil
	}
	scan := func(rules []rule, prefixed bool) {
		for i := range rules {
			ru := &rules[i]
			if ru.mask&bit == 0 || (prefixed && !strings.HasPrefix(r.Name, ru.binding.ResourceName)) {
				continue
			}
			if ru.binding.Permission == Deny {
				if deny == nil {
					deny = ru.binding
				}
			} else if allow == nil {
				allow = ru.binding
			}
		}
	}
	for _, q := range [2]Principal{p, AnyUser} {
		pr := s.index[q]
		if pr == nil {
			continue
		}
		tr := &pr.byType[r.Type]
		scan(tr.literal[r.Name], false)
		scan(tr.any, false)
		scan(tr.prefixed, true)
		if deny != nil {
			return deny, allow
		}
		if p == AnyUser {
			break // the wildcard's own bindings were the first pass
		}
	}
	return deny, allow
}

// Authorizer decides requests: the rules are in the package
// documentation. It holds a set of super users, fixed at construction,
// and the current Snapshot, replaced atomically by Store. Safe for
// concurrent use; Allowed takes no lock and does not allocate. The zero
// value is not usable: use NewAuthorizer.
type Authorizer struct {
	super map[Principal]bool
	snap  atomic.Pointer[Snapshot]
}

// NewAuthorizer returns an Authorizer for which superUsers may do
// everything, with no bindings yet (so only super users and services are
// allowed anything until the first Store). Super users must be users, not
// User:*.
func NewAuthorizer(superUsers []Principal) (*Authorizer, error) {
	a := &Authorizer{super: make(map[Principal]bool, len(superUsers))}
	for _, p := range superUsers {
		switch {
		case p.IsWildcard():
			return nil, errors.New("acl: User:* cannot be a super user")
		case p.Type != TypeUser:
			return nil, fmt.Errorf("acl: super user %s is not a user", quoteIfOdd(p.String()))
		}
		if err := CheckName(p.Name); err != nil {
			return nil, fmt.Errorf("acl: super user %s: %w", quoteIfOdd(p.String()), err)
		}
		a.super[p] = true
	}
	a.snap.Store(&Snapshot{})
	return a, nil
}

// Store makes s the set of bindings requests are checked against, at
// once for every later call of Allowed. A nil s stores an empty set.
func (a *Authorizer) Store(s *Snapshot) {
	if s == nil {
		s = &Snapshot{}
	}
	a.snap.Store(s)
}

// Set builds a Snapshot of bindings and stores it; on error the current
// one stays.
func (a *Authorizer) Set(bindings []Binding) error {
	s, err := NewSnapshot(bindings)
	if err != nil {
		return err
	}
	a.Store(s)
	return nil
}

// Snapshot returns the bindings in force.
func (a *Authorizer) Snapshot() *Snapshot { return a.snap.Load() }

// IsSuperUser reports whether p is one of the super users.
func (a *Authorizer) IsSuperUser(p Principal) bool { return a.super[p] }

// Allowed decides whether p may do op to the resource of type rt named
// name. op must be a concrete operation (not All): a request does one
// thing. The cost is a map lookup for the literal name plus a scan of
// p's and User:*'s "*" and prefixed bindings on rt.
func (a *Authorizer) Allowed(p Principal, op Operation, rt ResourceType, name string) Decision {
	d := Decision{Principal: p, Operation: op, Resource: Resource{rt, name}}
	switch {
	case p.IsService():
		d.Allowed, d.Reason = true, "service identity"
		return d
	case a.super[p]:
		d.Allowed, d.Reason = true, "super user"
		return d
	case !op.Valid() || op == All:
		d.Reason = "not a concrete operation"
		return d
	case !rt.Valid():
		d.Reason = "invalid resource type"
		return d
	}
	deny, allow := a.snap.Load().match(p, 1<<op, d.Resource)
	switch {
	case deny != nil:
		d.Reason, d.Binding = "denied by ACL", deny
	case allow != nil:
		d.Allowed, d.Reason, d.Binding = true, "allowed by ACL", allow
	default:
		d.Reason = "no ACL allows it"
	}
	return d
}

// Decision is the answer of Authorizer.Allowed: whether the request is
// allowed, what it was, and why (for audit logs; the caller sees only
// Message).
type Decision struct {
	// Allowed is the answer.
	Allowed bool
	// Principal, Operation and Resource are the request.
	Principal Principal
	Operation Operation
	Resource  Resource
	// Reason says why: "service identity", "super user",
	// "allowed by ACL", "denied by ACL", "no ACL allows it", or what was
	// invalid about the request.
	Reason string
	// Binding is the binding that decided, when one did: the deny that
	// refused or an allow that allowed. Nil otherwise. Do not modify it.
	Binding *Binding
}

// Message returns the one line a refused caller sees, "" when allowed:
//
//	permission denied: User:alice may not write topic orders
//
// It names the principal, the operation and the resource, and never which
// binding refused (the caller may not describe the ACLs).
func (d Decision) Message() string {
	if d.Allowed {
		return ""
	}
	return fmt.Sprintf("permission denied: %v may not %v %v", d.Principal, d.Operation, d.Resource)
}

// Err returns nil when the request is allowed, else a *DeniedError
// carrying d, which matches ErrPermissionDenied with errors.Is.
func (d Decision) Err() error {
	if d.Allowed {
		return nil
	}
	return &DeniedError{Decision: d}
}

// ErrPermissionDenied is matched by every *DeniedError.
var ErrPermissionDenied = errors.New("permission denied")

// DeniedError is a refused request. Its Error is Decision.Message; the
// handler edge turns it into a PERMISSION_DENIED answer with that line.
type DeniedError struct {
	Decision Decision
}

func (e *DeniedError) Error() string { return e.Decision.Message() }

// Is reports whether target is ErrPermissionDenied.
func (e *DeniedError) Is(target error) bool { return target == ErrPermissionDenied }
