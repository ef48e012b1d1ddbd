package kafka

import (
	"cmp"
	"context"
	"slices"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// DescribeAcls (29), v0–3: the bindings a filter matches, from the
// controller's DescribeAcls through the gateway, the same bindings
// `strata acl list` shows (kafkaacl.go maps them).
//
//   - Served on every listener.
//   - ACL: describe on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
//   - The filter is Kafka's (AclBindingFilter.matches): nil fields and
//     ANY match everything; pattern type MATCH with a name matches the
//     literal name, the literal "*" and every prefixed binding the name
//     starts with; LITERAL and PREFIXED match that pattern and name
//     exactly; a filter with an UNKNOWN element is INVALID_REQUEST. v0
//     has no pattern type: LITERAL.
//   - Every binding's host is "*". A filter naming another host, or a
//     resource type or operation Strata has none of, matches nothing.
//   - Where Strata differs: Kafka without an authorizer answers
//     SECURITY_DISABLED; Strata always keeps its ACLs (enforced with
//     --require-auth) and answers them.
func (b *Bridge) describeAclsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.DescribeACLs, MinVersion: 0, MaxVersion: 3, Handle: handler(b.describeAcls)}
}

func (b *Bridge) describeAcls(ctx context.Context, version int16, req *kmsg.DescribeACLsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDescribeACLsResponse()
	if err := b.authorizeCluster(ctx, acl.Describe); err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaCode(err, adminPlane), message(err)
		return resp, nil
	}
	f := kafkaFilter{
		resourceType: req.ResourceType, name: req.ResourceName, pattern: req.ResourcePatternType,
		principal: req.Principal, host: req.Host, operation: req.Operation, permission: req.PermissionType,
	}
	if version == 0 {
		f.pattern = kmsg.ACLResourcePatternTypeLiteral
	}
	if msg := f.check(); msg != "" {
		resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, &msg
		return resp, nil
	}
	matched, err := b.matchingAcls(ctx, f)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaCode(err, adminPlane), message(err)
		return resp, nil
	}
	// One resource per pattern, as DescribeAclsResponse.aclsResources
	// groups them, in a stable order.
	slices.SortStableFunc(matched, func(x, y kafkaBinding) int {
		return cmp.Or(cmp.Compare(x.resourceType, y.resourceType), cmp.Compare(x.name, y.name), cmp.Compare(x.pattern, y.pattern))
	})
	for _, k := range matched {
		n := len(resp.Resources)
		if n == 0 || resp.Resources[n-1].ResourceType != k.resourceType || resp.Resources[n-1].ResourceName != k.name || resp.Resources[n-1].ResourcePatternType != k.pattern {
			r := kmsg.NewDescribeACLsResponseResource()
			r.ResourceType, r.ResourceName, r.ResourcePatternType = k.resourceType, k.name, k.pattern
			resp.Resources = append(resp.Resources, r)
			n++
		}
		a := kmsg.NewDescribeACLsResponseResourceACL()
		a.Principal, a.Host, a.Operation, a.PermissionType = k.principal, k.host, k.operation, k.permission
		resp.Resources[n-1].ACLs = append(resp.Resources[n-1].ACLs, a)
	}
	return resp, nil
}

// matchingAcls returns the stored bindings f matches: the controller
// selects by the fields it matches exactly, the rest of Kafka's rule is
// applied here.
func (b *Bridge) matchingAcls(ctx context.Context, f kafkaFilter) ([]kafkaBinding, error) {
	sf, _, ok := f.strata()
	if !ok {
		return nil, nil
	}
	out, err := b.cfg.Gateway.DescribeAcls(ctx, connect.NewRequest(&gatewayv1.DescribeAclsRequest{Filter: sf}))
	if err != nil {
		return nil, err
	}
	var matched []kafkaBinding
	for _, sb := range out.Msg.GetAcls() {
		if k, err := toKafka(sb); err == nil && f.matches(k) {
			matched = append(matched, k)
		}
	}
	return matched, nil
}
