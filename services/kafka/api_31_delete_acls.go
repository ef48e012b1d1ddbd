package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// DeleteAcls (31), v0–3: deletes the bindings each filter matches, with
// the controller's DeleteAcls through the gateway, and answers them.
//
//   - Served on every listener.
//   - ACL: alter on the cluster, else CLUSTER_AUTHORIZATION_FAILED on
//     every filter.
//   - Filters match as DescribeAcls' (api_29). A filter the controller's
//     exact-match filter can express (every one but MATCH with a name)
//     is one DeleteAcls, atomic; MATCH with a name lists its matches and
//     deletes each, as Kafka's authorizer deletes a filter's matches one
//     by one.
//   - Where Strata differs: one filter deletes at most 1000 bindings
//     (the controller's MaxAclsPerDelete); more is INVALID_REQUEST for
//     that filter, nothing deleted, with a message to narrow it.
func (b *Bridge) deleteAclsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.DeleteACLs, MinVersion: 0, MaxVersion: 3, Handle: handler(b.deleteAcls)}
}

func (b *Bridge) deleteAcls(ctx context.Context, version int16, req *kmsg.DeleteACLsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDeleteACLsResponse()
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	for i := range resp.Results {
		resp.Results[i] = kmsg.NewDeleteACLsResponseResult()
	}
	if err := b.authorizeCluster(ctx, acl.Alter); err != nil {
		code, msg := kafkaCode(err, adminPlane), message(err)
		for i := range resp.Results {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, msg
		}
		return resp, nil
	}
	for i, rf := range req.Filters {
		f := kafkaFilter{
			resourceType: rf.ResourceType, name: rf.ResourceName, pattern: rf.ResourcePatternType,
			principal: rf.Principal, host: rf.Host, operation: rf.Operation, permission: rf.PermissionType,
		}
		if version == 0 {
			f.pattern = kmsg.ACLResourcePatternTypeLiteral
		}
		r := &resp.Results[i]
		if msg := f.check(); msg != "" {
			r.ErrorCode, r.ErrorMessage = kerr.InvalidRequest.Code, &msg
			continue
		}
		deleted, err := b.deleteMatching(ctx, f)
		if err != nil {
			r.ErrorCode, r.ErrorMessage = kafkaCode(err, adminPlane), message(err)
		}
		for _, sb := range deleted {
			k, err := toKafka(sb)
			if err != nil {
				continue
			}
			m := kmsg.NewDeleteACLsResponseResultMatchingACL()
			m.ResourceType, m.ResourceName, m.ResourcePatternType = k.resourceType, k.name, k.pattern
			m.Principal, m.Host, m.Operation, m.PermissionType = k.principal, k.host, k.operation, k.permission
			r.MatchingACLs = append(r.MatchingACLs, m)
		}
	}
	return resp, nil
}

// deleteMatching deletes the bindings f matches and returns them; on an
// error, those deleted before it.
func (b *Bridge) deleteMatching(ctx context.Context, f kafkaFilter) ([]*commonv1.AclBinding, error) {
	sf, exact, ok := f.strata()
	if !ok {
		return nil, nil
	}
	if exact {
		out, err := b.cfg.Gateway.DeleteAcls(ctx, connect.NewRequest(&gatewayv1.DeleteAclsRequest{Filter: sf}))
		if err != nil {
			return nil, err
		}
		return out.Msg.GetDeleted(), nil
	}
	matched, err := b.matchingAcls(ctx, f)
	if err != nil {
		return nil, err
	}
	var deleted []*commonv1.AclBinding
	for _, k := range matched {
		sb, why := fromKafka(k)
		if why != "" {
			continue // a stored binding always maps back
		}
		one := &controllerv1.AclFilter{
			Principal: sb.GetPrincipal(), Permission: sb.GetPermission(), Operation: sb.GetOperation(),
			ResourceType: sb.GetResourceType(), ResourceName: sb.GetResourceName(), PatternType: sb.GetPatternType(),
		}
		out, err := b.cfg.Gateway.DeleteAcls(ctx, connect.NewRequest(&gatewayv1.DeleteAclsRequest{Filter: one}))
		if err != nil {
			return deleted, err
		}
		deleted = append(deleted, out.Msg.GetDeleted()...)
	}
	return deleted, nil
}
