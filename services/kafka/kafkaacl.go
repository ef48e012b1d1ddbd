package kafka

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/guard"
)

// Kafka's ACLs in Strata's terms, for CreateAcls, DescribeAcls and
// DeleteAcls (api_29, api_30, api_31). lib/acl is Kafka's model without
// hosts and with fewer operations and resource types, so a Kafka binding
// maps one to one where Strata can hold it and is refused where it
// cannot; a Kafka filter maps to a Strata filter plus the part of Kafka's
// matching (AclBindingFilter.matches) the controller's exact-match filter
// does not do, applied here.

// kafkaOps pairs Kafka's operations with Strata's. Kafka's CLUSTER_ACTION,
// DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE and the token
// operations have no counterpart: Strata's describe and alter cover
// configs, and any authenticated principal may get a producer id.
var kafkaOps = map[kmsg.ACLOperation]acl.Operation{
	kmsg.ACLOperationAll: acl.All, kmsg.ACLOperationRead: acl.Read, kmsg.ACLOperationWrite: acl.Write,
	kmsg.ACLOperationCreate: acl.Create, kmsg.ACLOperationDelete: acl.Delete, kmsg.ACLOperationAlter: acl.Alter,
	kmsg.ACLOperationDescribe: acl.Describe,
}

// kafkaResourceTypes pairs Kafka's resource types with Strata's; Strata
// has no delegation token or user resources.
var kafkaResourceTypes = map[kmsg.ACLResourceType]acl.ResourceType{
	kmsg.ACLResourceTypeTopic: acl.Topic, kmsg.ACLResourceTypeGroup: acl.Group, kmsg.ACLResourceTypeCluster: acl.Cluster,
	kmsg.ACLResourceTypeTransactionalId: acl.TransactionalID,
}

// anyHost is the only host a Strata binding has: bindings name no hosts.
const anyHost = "*"

func kafkaOperation(o acl.Operation) kmsg.ACLOperation {
	for k, v := range kafkaOps {
		if v == o {
			return k
		}
	}
	return kmsg.ACLOperationUnknown
}

func kafkaResourceType(t acl.ResourceType) kmsg.ACLResourceType {
	for k, v := range kafkaResourceTypes {
		if v == t {
			return k
		}
	}
	return kmsg.ACLResourceTypeUnknown
}

func kafkaPatternType(p acl.PatternType) kmsg.ACLResourcePatternType {
	if p == acl.Prefixed {
		return kmsg.ACLResourcePatternTypePrefixed
	}
	return kmsg.ACLResourcePatternTypeLiteral
}

func kafkaPermission(p acl.Permission) kmsg.ACLPermissionType {
	if p == acl.Deny {
		return kmsg.ACLPermissionTypeDeny
	}
	return kmsg.ACLPermissionTypeAllow
}

// kafkaBinding is one ACL in Kafka's fields, the ones every ACL API
// carries.
type kafkaBinding struct {
	resourceType kmsg.ACLResourceType
	name         string
	pattern      kmsg.ACLResourcePatternType
	principal    string
	host         string
	operation    kmsg.ACLOperation
	permission   kmsg.ACLPermissionType
}

// toKafka is a stored binding in Kafka's fields, host "*".
func toKafka(b *commonv1.AclBinding) (kafkaBinding, error) {
	ab, err := guard.BindingFromProto(b)
	if err != nil {
		return kafkaBinding{}, err
	}
	return kafkaBinding{
		resourceType: kafkaResourceType(ab.ResourceType), name: ab.ResourceName, pattern: kafkaPatternType(ab.PatternType),
		principal: ab.Principal.String(), host: anyHost, operation: kafkaOperation(ab.Operation), permission: kafkaPermission(ab.Permission),
	}, nil
}

// fromKafka is a Kafka binding to create as Strata's, or Kafka's
// INVALID_REQUEST with the reason Strata cannot hold it. Kafka's own
// refusals come first, with its messages (AclApis.handleCreateAcls,
// AclControlManager.validateNewAcl); then what only Strata refuses.
func fromKafka(k kafkaBinding) (*commonv1.AclBinding, string) {
	switch {
	case k.pattern != kmsg.ACLResourcePatternTypeLiteral && k.pattern != kmsg.ACLResourcePatternTypePrefixed:
		return nil, fmt.Sprintf("Invalid patternType %s", k.pattern)
	case k.operation == kmsg.ACLOperationAny || k.operation == kmsg.ACLOperationUnknown:
		return nil, fmt.Sprintf("Invalid operation %s", k.operation)
	case k.permission != kmsg.ACLPermissionTypeAllow && k.permission != kmsg.ACLPermissionTypeDeny:
		return nil, fmt.Sprintf("Invalid permissionType %s", k.permission)
	case k.resourceType == kmsg.ACLResourceTypeAny || k.resourceType == kmsg.ACLResourceTypeUnknown:
		return nil, fmt.Sprintf("Invalid resourceType %s", k.resourceType)
	case k.resourceType == kmsg.ACLResourceTypeCluster && k.name != acl.ClusterName:
		return nil, "The only valid name for the CLUSTER resource is " + acl.ClusterName
	case k.name == "":
		return nil, "Invalid empty resource name"
	case !strings.Contains(k.principal, ":"):
		return nil, fmt.Sprintf("Could not parse principal from `%s` (no colon is present separating the principal type from the principal name)", k.principal)
	}
	rt, ok := kafkaResourceTypes[k.resourceType]
	if !ok {
		return nil, fmt.Sprintf("Strata's ACLs have no resource type %s (topic, group and cluster only)", k.resourceType)
	}
	op, ok := kafkaOps[k.operation]
	if !ok {
		return nil, fmt.Sprintf("Strata's ACLs have no operation %s (all, read, write, create, delete, alter and describe only)", k.operation)
	}
	if k.host != anyHost {
		return nil, fmt.Sprintf("Strata's ACLs name no hosts: host %q must be %q", k.host, anyHost)
	}
	p, err := acl.ParsePrincipal(k.principal)
	if err != nil {
		return nil, strings.TrimPrefix(err.Error(), "acl: ")
	}
	b := acl.Binding{Principal: p, Permission: acl.Allow, Operation: op, ResourceType: rt, ResourceName: k.name, PatternType: acl.Literal}
	if k.permission == kmsg.ACLPermissionTypeDeny {
		b.Permission = acl.Deny
	}
	if k.pattern == kmsg.ACLResourcePatternTypePrefixed {
		b.PatternType = acl.Prefixed
	}
	if err := b.Validate(); err != nil {
		return nil, strings.TrimPrefix(err.Error(), "acl: ")
	}
	return guard.BindingToProto(b), ""
}

// kafkaFilter is a DescribeAcls or DeleteAcls filter: nil strings and the
// ANY values match everything.
type kafkaFilter struct {
	resourceType kmsg.ACLResourceType
	name         *string
	pattern      kmsg.ACLResourcePatternType
	principal    *string
	host         *string
	operation    kmsg.ACLOperation
	permission   kmsg.ACLPermissionType
}

// check refuses a filter with an UNKNOWN element (Kafka's
// AclBindingFilter.isUnknown, refused as INVALID_REQUEST).
func (f kafkaFilter) check() string {
	switch {
	case f.resourceType == kmsg.ACLResourceTypeUnknown, f.pattern == kmsg.ACLResourcePatternTypeUnknown,
		f.operation == kmsg.ACLOperationUnknown, f.permission == kmsg.ACLPermissionTypeUnknown:
		return "Filter contain UNKNOWN elements"
	}
	return ""
}

// strata returns the controller filter that selects a superset of what f
// matches, and false when f can match no Strata binding at all (a
// resource type, operation or host Strata has none of, a principal that
// is not one, so the controller would refuse it). exact reports that the
// controller's filter selects exactly what f matches, so a DeleteAcls can
// be one call.
func (f kafkaFilter) strata() (sf *controllerv1.AclFilter, exact, ok bool) {
	sf = &controllerv1.AclFilter{}
	if f.resourceType != kmsg.ACLResourceTypeAny {
		rt, known := kafkaResourceTypes[f.resourceType]
		if !known {
			return nil, false, false
		}
		sf.ResourceType = commonv1.AclResourceType(rt)
	}
	if f.operation != kmsg.ACLOperationAny {
		op, known := kafkaOps[f.operation]
		if !known {
			return nil, false, false
		}
		sf.Operation = commonv1.AclOperation(op)
	}
	switch f.permission {
	case kmsg.ACLPermissionTypeAllow:
		sf.Permission = commonv1.AclPermission_ACL_PERMISSION_ALLOW
	case kmsg.ACLPermissionTypeDeny:
		sf.Permission = commonv1.AclPermission_ACL_PERMISSION_DENY
	case kmsg.ACLPermissionTypeAny:
	default:
		return nil, false, false
	}
	if f.host != nil && *f.host != anyHost {
		return nil, false, false
	}
	if f.principal != nil {
		if _, err := acl.ParsePrincipal(*f.principal); err != nil {
			return nil, false, false
		}
		sf.Principal = *f.principal
	}
	exact = true
	switch f.pattern {
	case kmsg.ACLResourcePatternTypeLiteral:
		sf.PatternType = commonv1.AclPatternType_ACL_PATTERN_TYPE_LITERAL
	case kmsg.ACLResourcePatternTypePrefixed:
		sf.PatternType = commonv1.AclPatternType_ACL_PATTERN_TYPE_PREFIXED
	case kmsg.ACLResourcePatternTypeAny:
	case kmsg.ACLResourcePatternTypeMatch:
		// MATCH with a name also selects the literal "*" and every
		// prefix of the name: matched here, not by the controller.
		exact = f.name == nil
	default:
		return nil, false, false
	}
	if f.name != nil && exact {
		if *f.name == "" {
			// The controller reads an empty name as any; Kafka as the
			// empty name, which no binding has.
			return nil, false, false
		}
		sf.ResourceName = *f.name
	}
	return sf, exact, true
}

// matches is Kafka's ResourcePatternFilter.matches on a binding's
// resource pattern; the other fields are the controller's to match.
func (f kafkaFilter) matches(k kafkaBinding) bool {
	if f.name == nil {
		return f.pattern == kmsg.ACLResourcePatternTypeAny || f.pattern == kmsg.ACLResourcePatternTypeMatch || f.pattern == k.pattern
	}
	switch f.pattern {
	case kmsg.ACLResourcePatternTypeAny:
		return *f.name == k.name
	case kmsg.ACLResourcePatternTypeMatch:
		if k.pattern == kmsg.ACLResourcePatternTypePrefixed {
			return strings.HasPrefix(*f.name, k.name)
		}
		return *f.name == k.name || k.name == acl.AnyResource
	}
	return f.pattern == k.pattern && *f.name == k.name
}
