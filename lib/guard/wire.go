package guard

import (
	"fmt"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/acl"
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
