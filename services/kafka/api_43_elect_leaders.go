package kafka

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// ElectLeaders (43), v0–2: preferred (v0 always) or unclean leader
// elections, from the controller's ElectLeaders through the gateway.
//
//   - Served on every listener: admin clients send it to the controller
//     Metadata names (the lowest storage node) or to any broker.
//   - ACL: alter on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the
//     top (v1+) and on every partition named (Kafka's
//     ElectLeadersRequest.getErrorResponse).
//   - Null topics elect every partition that needs it and answer only
//     those (ReplicationControlManager.electLeaders leaves out
//     ELECTION_NOT_NEEDED); a named partition whose leader is already the
//     one the election would choose is ELECTION_NOT_NEEDED; one whose
//     preferred replica cannot lead PREFERRED_LEADER_NOT_AVAILABLE (an
//     unclean election with no live replica: ELIGIBLE_LEADERS_NOT_AVAILABLE);
//     an unknown one UNKNOWN_TOPIC_OR_PARTITION. An election type other
//     than 0 and 1 is INVALID_REQUEST.
//   - The controller answers a partition it did not need to change as a
//     success with its leader and epoch; the bridge tells the two apart
//     by the leader and epoch Metadata gave just before. When that
//     Metadata was older than the controller's state, or left the topic
//     out (the caller may not describe it), a partition that needed no
//     election reads as elected: either way its leader is the one asked
//     for.
func (b *Bridge) electLeadersAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.ElectLeaders, MinVersion: 0, MaxVersion: 2, Handle: handler(b.electLeaders)}
}

func (b *Bridge) electLeaders(ctx context.Context, version int16, req *kmsg.ElectLeadersRequest) (kmsg.Response, error) {
	ctx, cancel := withTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	if err := b.authorizeCluster(ctx, acl.Alter); err != nil {
		return electLeadersRefused(version, req, kafkaCode(err, adminPlane), message(err))
	}
	typ := controllerv1.ElectionType_ELECTION_TYPE_PREFERRED
	if version >= 1 {
		switch req.ElectionType {
		case 0:
		case 1:
			typ = controllerv1.ElectionType_ELECTION_TYPE_UNCLEAN
		default:
			msg := fmt.Sprintf("Unknown election type %d", req.ElectionType)
			return electLeadersRefused(version, req, kerr.InvalidRequest.Code, &msg)
		}
	}
	all := req.Topics == nil
	var parts []*commonv1.TopicPartitions
	var names []string
	for _, t := range req.Topics {
		// A topic without partitions elects nothing in Kafka; the
		// controller would read it as every partition of the topic.
		if len(t.Partitions) > 0 {
			parts = append(parts, &commonv1.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
			names = append(names, t.Topic)
		}
	}
	resp := kmsg.NewPtrElectLeadersResponse()
	if !all && len(parts) == 0 {
		for _, t := range req.Topics {
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = t.Topic
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	}
	before := b.partitionStates(ctx, names)
	out, err := b.cfg.Gateway.ElectLeaders(ctx, connect.NewRequest(&gatewayv1.ElectLeadersRequest{ElectionType: typ, Partitions: parts}))
	if err != nil {
		return electLeadersRefused(version, req, kafkaCode(err, adminPlane), message(err))
	}
	topics := map[string]int{}
	for _, r := range out.Msg.GetPartitions() {
		rp := kmsg.NewElectLeadersResponseTopicPartition()
		rp.Partition = r.GetPartition()
		if d := r.GetError(); d != nil {
			rp.ErrorCode = detailCode(d, adminPlane, nil)
			if d.GetReason() == commonv1.Reason_REASON_INELIGIBLE_REPLICA {
				rp.ErrorCode = kerr.PreferredLeaderNotAvailable.Code
				if typ == controllerv1.ElectionType_ELECTION_TYPE_UNCLEAN {
					rp.ErrorCode = kerr.EligibleLeadersNotAvailable.Code
				}
			}
			msg := d.GetMessage()
			rp.ErrorMessage = &msg
		} else if p, ok := before[r.GetTopic()][r.GetPartition()]; ok && p.GetLeaderId() == r.GetLeaderId() && p.GetLeaderEpoch() == r.GetLeaderEpoch() {
			if all {
				continue
			}
			rp.ErrorCode = kerr.ElectionNotNeeded.Code
		}
		i, ok := topics[r.GetTopic()]
		if !ok {
			i = len(resp.Topics)
			topics[r.GetTopic()] = i
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = r.GetTopic()
			resp.Topics = append(resp.Topics, rt)
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
	}
	return resp, nil
}

// partitionStates is the partitions of the named topics (nil: every topic) as
// Metadata has them now, or nothing when Metadata fails.
func (b *Bridge) partitionStates(ctx context.Context, names []string) map[string]map[int32]*commonv1.PartitionMetadata {
	out := map[string]map[int32]*commonv1.PartitionMetadata{}
	md, err := b.clusterMetadata(ctx, names)
	if err != nil {
		return out
	}
	for _, t := range md.GetTopics() {
		ps := map[int32]*commonv1.PartitionMetadata{}
		for _, p := range t.GetPartitions() {
			ps[p.GetPartition()] = p
		}
		out[t.GetName()] = ps
	}
	return out
}

// electLeadersRefused answers code at the top (v1+) and on every
// partition named; with neither (v0 for every partition) the connection
// closes.
func electLeadersRefused(version int16, req *kmsg.ElectLeadersRequest, code int16, msg *string) (kmsg.Response, error) {
	resp := kmsg.NewPtrElectLeadersResponse()
	resp.ErrorCode = code
	n := 0
	for _, t := range req.Topics {
		rt := kmsg.NewElectLeadersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewElectLeadersResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.ErrorMessage = p, code, msg
			rt.Partitions = append(rt.Partitions, rp)
			n++
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if version == 0 && n == 0 {
		return nil, errors.New("elect leaders refused, and a v0 answer for every partition has no place for the error")
	}
	return resp, nil
}
