package kafka

import (
	"context"
	"slices"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) listGroupsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.ListGroups, MinVersion: 0, MaxVersion: 4, Handle: handler(b.listGroups)}
}

func (b *Bridge) listGroups(ctx context.Context, version int16, req *kmsg.ListGroupsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrListGroupsResponse()
	out, err := b.cfg.Gateway.ListGroups(ctx, connect.NewRequest(&gatewayv1.ListGroupsRequest{}))
	if err != nil {
		resp.ErrorCode = kafkaCode(err, groupPlane)
		return resp, nil
	}
	for _, g := range out.Msg.GetGroups() {
		state := groupState(g.GetState())
		if len(req.StatesFilter) > 0 && !slices.Contains(req.StatesFilter, state) {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState = g.GetGroupId(), "consumer", state
		if pt := g.GetProtocolType(); pt != "" {
			rg.ProtocolType = pt // a classic group's own
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
