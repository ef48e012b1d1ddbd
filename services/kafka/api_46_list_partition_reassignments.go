package kafka

import (
	"context"
	"slices"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// ListPartitionReassignments (46), v0 (KIP-455): the partitions being
// moved, from the controller's ListPartitionReassignments through the
// gateway, each with its replicas (the target, then those being
// removed), adding and removing replicas.
//
//   - Served on every listener.
//   - ACL: describe on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
//   - Null topics list every move; named ones only their named
//     partitions that are moving. An unknown topic or partition, or one
//     not moving, is left out without an error, as
//     ReplicationControlManager.listPartitionReassignments does.
func (b *Bridge) listPartitionReassignmentsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.ListPartitionReassignments, MinVersion: 0, MaxVersion: 0, Handle: handler(b.listPartitionReassignments)}
}

func (b *Bridge) listPartitionReassignments(ctx context.Context, version int16, req *kmsg.ListPartitionReassignmentsRequest) (kmsg.Response, error) {
	ctx, cancel := withTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := kmsg.NewPtrListPartitionReassignmentsResponse()
	if err := b.authorizeCluster(ctx, acl.Describe); err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaCode(err, adminPlane), message(err)
		return resp, nil
	}
	// want is the partitions asked for by topic; nil asks for all.
	var want map[string][]int32
	var names []string
	if req.Topics != nil {
		want = map[string][]int32{}
		for _, t := range req.Topics {
			if len(t.Partitions) > 0 {
				want[t.Topic] = append(want[t.Topic], t.Partitions...)
				names = append(names, t.Topic)
			}
		}
		if len(names) == 0 {
			// The gateway would read no topic as every topic.
			return resp, nil
		}
	}
	out, err := b.cfg.Gateway.ListPartitionReassignments(ctx, connect.NewRequest(&gatewayv1.ListPartitionReassignmentsRequest{Topics: names}))
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaCode(err, adminPlane), message(err)
		return resp, nil
	}
	topics := map[string]int{}
	for _, c := range out.Msg.GetReassignments() {
		p := c.GetPartition()
		if want != nil && !slices.Contains(want[c.GetTopic()], p.GetPartition()) {
			continue
		}
		i, ok := topics[c.GetTopic()]
		if !ok {
			i = len(resp.Topics)
			topics[c.GetTopic()] = i
			rt := kmsg.NewListPartitionReassignmentsResponseTopic()
			rt.Topic = c.GetTopic()
			resp.Topics = append(resp.Topics, rt)
		}
		rp := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
		rp.Partition = p.GetPartition()
		rp.Replicas, rp.AddingReplicas, rp.RemovingReplicas = p.GetReplicas(), p.GetAddingReplicas(), p.GetRemovingReplicas()
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
	}
	return resp, nil
}
