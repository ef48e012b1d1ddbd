package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// CreateAcls (30), v0–3: adds bindings with the controller's CreateAcls
// through the gateway, as `strata acl create` does; each applies to the
// Kafka listener and the Connect API alike.
//
//   - Served on every listener.
//   - ACL: alter on the cluster, else CLUSTER_AUTHORIZATION_FAILED on
//     every creation.
//   - Each creation is answered on its own. Kafka's refusals, with its
//     messages (INVALID_REQUEST): a pattern type other than LITERAL and
//     PREFIXED, operation ANY, permission ANY, a cluster resource not
//     named kafka-cluster, an empty name, a principal without a type.
//     Strata's, also INVALID_REQUEST with the reason: a resource type
//     other than TOPIC, GROUP and CLUSTER; an operation other than ALL,
//     READ, WRITE, CREATE, DELETE, ALTER and DESCRIBE; a host other than
//     "*"; a principal other than User:name or User:*; a prefixed
//     cluster binding; a prefixed "*". v0 has no pattern type: LITERAL.
//   - The valid ones are created in one call; creating a binding that
//     exists succeeds and changes nothing, as in Kafka.
//   - Where Strata differs: Kafka without an authorizer answers
//     SECURITY_DISABLED; Strata keeps the bindings and enforces them on
//     processes with --require-auth.
func (b *Bridge) createAclsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.CreateACLs, MinVersion: 0, MaxVersion: 3, Handle: handler(b.createAcls)}
}

func (b *Bridge) createAcls(ctx context.Context, version int16, req *kmsg.CreateACLsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrCreateACLsResponse()
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(req.Creations))
	for i := range resp.Results {
		resp.Results[i] = kmsg.NewCreateACLsResponseResult()
	}
	if err := b.authorizeCluster(ctx, acl.Alter); err != nil {
		code, msg := kafkaCode(err, adminPlane), message(err)
		for i := range resp.Results {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, msg
		}
		return resp, nil
	}
	var valid []*commonv1.AclBinding
	var at []int // valid[j] is creation at[j]
	for i, c := range req.Creations {
		k := kafkaBinding{
			resourceType: c.ResourceType, name: c.ResourceName, pattern: c.ResourcePatternType,
			principal: c.Principal, host: c.Host, operation: c.Operation, permission: c.PermissionType,
		}
		if version == 0 {
			k.pattern = kmsg.ACLResourcePatternTypeLiteral
		}
		sb, why := fromKafka(k)
		if why != "" {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.InvalidRequest.Code, &why
			continue
		}
		valid = append(valid, sb)
		at = append(at, i)
	}
	if len(valid) == 0 {
		return resp, nil
	}
	if _, err := b.cfg.Gateway.CreateAcls(ctx, connect.NewRequest(&gatewayv1.CreateAclsRequest{Acls: valid})); err != nil {
		code, msg := kafkaCode(err, adminPlane), message(err)
		for _, i := range at {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, msg
		}
	}
	return resp, nil
}
