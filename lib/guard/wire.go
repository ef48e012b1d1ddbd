package guard

import (
	"fmt"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/token"
)

// The wire form of ACL bindings (common.proto's AclBinding) and lib/acl's
// Binding number their enums alike (allow 1, deny 2; read 1 to all 7;
// topic 1 to cluster 3; literal 1, prefixed 2), so converting is a cast
// and a check. An unset pattern type is literal.

// BindingFromProto converts and validates a wire binding.
func BindingFromProto(b *commonv1.AclBinding) (acl.Binding, error) {
	p, err := acl.ParsePrincipal(b.GetPrincipal())
	if err != nil {
		return acl.Binding{}, fmt.Errorf("%w: %w", ErrBadBinding, err)
	}
	pt := acl.PatternType(b.GetPatternType())
	if b.GetPatternType() == commonv1.AclPatternType_ACL_PATTERN_TYPE_UNSPECIFIED {
		pt = acl.Literal
	}
	out := acl.Binding{
		Principal:    p,
		Permission:   acl.Permission(b.GetPermission()),
		Operation:    acl.Operation(b.GetOperation()),
		ResourceType: acl.ResourceType(b.GetResourceType()),
		ResourceName: b.GetResourceName(),
		PatternType:  pt,
	}
	if err := out.Validate(); err != nil {
		return acl.Binding{}, fmt.Errorf("%w: %w", ErrBadBinding, err)
	}
	return out, nil
}

// BindingToProto converts a binding to its wire form.
func BindingToProto(b acl.Binding) *commonv1.AclBinding {
	return &commonv1.AclBinding{
		Principal:    b.Principal.String(),
		Permission:   commonv1.AclPermission(b.Permission),
		Operation:    commonv1.AclOperation(b.Operation),
		ResourceType: commonv1.AclResourceType(b.ResourceType),
		ResourceName: b.ResourceName,
		PatternType:  commonv1.AclPatternType(b.PatternType),
	}
}

// SCRAMToProto returns the wire form of a user's SCRAM credentials, set on
// the UserCredential field of each one's mechanism.
func SCRAMToProto(u *commonv1.UserCredential, keys ...token.SCRAMKeys) {
	for _, k := range keys {
		c := &commonv1.ScramCredential{Salt: k.Salt, Iterations: int32(k.Iterations), StoredKey: k.StoredKey, ServerKey: k.ServerKey}
		switch k.Mechanism {
		case token.SCRAMSHA256:
			u.ScramSha256 = c
		case token.SCRAMSHA512:
			u.ScramSha512 = c
		}
	}
}

// SCRAMFromProto returns the SCRAM credentials a wire user carries (none
// for a token issued before SCRAM was offered), each validated.
func SCRAMFromProto(u *commonv1.UserCredential) ([]token.SCRAMKeys, error) {
	var out []token.SCRAMKeys
	for _, c := range []struct {
		m token.SCRAMMechanism
		c *commonv1.ScramCredential
	}{{token.SCRAMSHA256, u.GetScramSha256()}, {token.SCRAMSHA512, u.GetScramSha512()}} {
		if c.c == nil {
			continue
		}
		k := token.SCRAMKeys{Mechanism: c.m, Salt: c.c.GetSalt(), Iterations: int(c.c.GetIterations()),
			StoredKey: c.c.GetStoredKey(), ServerKey: c.c.GetServerKey()}
		if err := k.Validate(); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}
