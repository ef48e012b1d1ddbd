package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) deleteGroupsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.DeleteGroups, MinVersion: 0, MaxVersion: 2, Handle: handler(b.deleteGroups)}
}

func (b *Bridge) deleteGroups(ctx context.Context, version int16, req *kmsg.DeleteGroupsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	for _, id := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = id
		if _, err := b.cfg.Gateway.DeleteGroup(ctx, connect.NewRequest(&gatewayv1.DeleteGroupRequest{GroupId: id})); err != nil {
			rg.ErrorCode = kafkaCode(err, groupPlane)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
