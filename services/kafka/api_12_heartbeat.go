package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) heartbeatAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.Heartbeat, MinVersion: 0, MaxVersion: 4, Handle: handler(b.heartbeat)}
}

func (b *Bridge) heartbeat(ctx context.Context, version int16, req *kmsg.HeartbeatRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrHeartbeatResponse()
	c, err := b.coordinator(ctx, req.Group)
	var out *connect.Response[coordinatorv1.ClassicHeartbeatResponse]
	if err == nil {
		hreq := &coordinatorv1.ClassicHeartbeatRequest{GroupId: req.Group, MemberId: req.MemberID, Generation: req.Generation}
		if req.InstanceID != nil {
			hreq.InstanceId = *req.InstanceID
		}
		out, err = c.ClassicHeartbeat(ctx, connect.NewRequest(hreq))
	}
	if err != nil {
		resp.ErrorCode = classicCode(err)
		return resp, nil
	}
	resp.ErrorCode = int16(out.Msg.GetErrorCode())
	return resp, nil
}
