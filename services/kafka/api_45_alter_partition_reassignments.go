package kafka

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// AlterPartitionReassignments (45), v0–1 (KIP-455; v1 KIP-860): starts or
// cancels partition moves, the controller's AlterPartitionReassignments
// through the gateway (docs/design/rebalance.md). Kafka's model is
// Strata's: during a move the replicas are the target followed by the
// replicas being removed, with the adding and removing ones listed, the
// first target replica leads once the targets are in sync, and null
// replicas cancel.
//
//   - Served on every listener (admin clients send it to the controller
//     Metadata names or to any broker).
//   - ACL: alter on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the
//     top and on every partition (AlterPartitionReassignmentsRequest.getErrorResponse).
//   - Errors per partition: UNKNOWN_TOPIC_OR_PARTITION; an empty replica
//     list, a negative or repeated node, a node that is not registered
//     (Strata also: not alive, drained) and a cancel that cannot go back
//     to the previous replicas INVALID_REPLICA_ASSIGNMENT; cancelling
//     with no move running NO_REASSIGNMENT_IN_PROGRESS; with v1's
//     allow_replication_factor_change false, a replica count other than
//     the partition's INVALID_REPLICATION_FACTOR.
//   - Where Strata differs: a new target for a partition whose move runs
//     is REASSIGNMENT_IN_PROGRESS (Kafka replaces the running move: cancel
//     it first here), and fewer replicas than the topic's
//     min.insync.replicas is INVALID_REPLICATION_FACTOR (Kafka allows it).
func (b *Bridge) alterPartitionReassignmentsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.AlterPartitionAssignments, MinVersion: 0, MaxVersion: 1, Handle: handler(b.alterPartitionReassignments)}
}

func (b *Bridge) alterPartitionReassignments(ctx context.Context, version int16, req *kmsg.AlterPartitionAssignmentsRequest) (kmsg.Response, error) {
	ctx, cancel := withTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	allowRF := version < 1 || req.AllowReplicationFactorChange
	if err := b.authorizeCluster(ctx, acl.Alter); err != nil {
		return alterReassignmentsRefused(req, allowRF, kafkaCode(err, adminPlane), message(err)), nil
	}
	var current map[string]map[int32]*commonv1.PartitionMetadata
	if !allowRF {
		var names []string
		for _, t := range req.Topics {
			names = append(names, t.Topic)
		}
		current = b.partitionStates(ctx, names)
	}
	// Each partition is answered here (code, msg) or by the controller
	// (sent: its index in the call).
	type answer struct {
		code int16
		msg  *string
		sent int
	}
	answers := make([][]answer, len(req.Topics))
	sreq := &gatewayv1.AlterPartitionReassignmentsRequest{}
	for i, t := range req.Topics {
		for _, p := range t.Partitions {
			a := answer{sent: -1}
			switch {
			case p.Replicas != nil && len(p.Replicas) == 0:
				// Strata reads an empty list as a cancel; Kafka's
				// validateManualPartitionAssignment refuses it.
				msg := "The manual partition assignment includes an empty replica list."
				a.code, a.msg = kerr.InvalidReplicaAssignment.Code, &msg
			case !allowRF && p.Replicas != nil && current[t.Topic][p.Partition] != nil &&
				len(originalReplicas(current[t.Topic][p.Partition])) != len(p.Replicas):
				msg := fmt.Sprintf("The replication factor is changed from %d to %d", len(originalReplicas(current[t.Topic][p.Partition])), len(p.Replicas))
				a.code, a.msg = kerr.InvalidReplicationFactor.Code, &msg
			default:
				a.sent = len(sreq.Reassignments)
				sreq.Reassignments = append(sreq.Reassignments, &controllerv1.PartitionReassignment{Topic: t.Topic, Partition: p.Partition, Replicas: p.Replicas})
			}
			answers[i] = append(answers[i], a)
		}
	}
	var results []*controllerv1.PartitionReassignmentResult
	if len(sreq.Reassignments) > 0 {
		out, err := b.cfg.Gateway.AlterPartitionReassignments(ctx, connect.NewRequest(sreq))
		if err == nil && len(out.Msg.GetResults()) != len(sreq.Reassignments) {
			err = connect.NewError(connect.CodeInternal, fmt.Errorf("%d reassignments answered for %d asked", len(out.Msg.GetResults()), len(sreq.Reassignments)))
		}
		if err != nil {
			return alterReassignmentsRefused(req, allowRF, kafkaCode(err, adminPlane), message(err)), nil
		}
		results = out.Msg.GetResults()
	}
	resp := kmsg.NewPtrAlterPartitionAssignmentsResponse()
	resp.AllowReplicationFactorChange = allowRF
	for i, t := range req.Topics {
		rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			rp.Partition = p.Partition
			a := answers[i][j]
			rp.ErrorCode, rp.ErrorMessage = a.code, a.msg
			if a.sent >= 0 {
				if d := results[a.sent].GetError(); d != nil {
					rp.ErrorCode = reassignmentCode(d, p.Replicas == nil)
					msg := d.GetMessage()
					rp.ErrorMessage = &msg
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// originalReplicas is p's replicas before its running move: the replicas
// without those being added.
func originalReplicas(p *commonv1.PartitionMetadata) []int32 {
	return slices.DeleteFunc(slices.Clone(p.GetReplicas()), func(r int32) bool { return slices.Contains(p.GetAddingReplicas(), r) })
}

// reassignmentCode is the Kafka code of the controller's refusal of one
// partition's move (services/controller/internal/metastore/reassign.go).
func reassignmentCode(d *commonv1.ErrorDetail, cancel bool) int16 {
	switch {
	case d.GetReason() == commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, d.GetCode() == commonv1.Code_CODE_NOT_FOUND:
		return kerr.UnknownTopicOrPartition.Code
	case d.GetReason() == commonv1.Reason_REASON_INVALID_REPLICATION_FACTOR:
		return kerr.InvalidReplicationFactor.Code
	case d.GetCode() == commonv1.Code_CODE_INVALID_ARGUMENT, d.GetReason() == commonv1.Reason_REASON_INELIGIBLE_REPLICA:
		return kerr.InvalidReplicaAssignment.Code
	case d.GetCode() == commonv1.Code_CODE_FAILED_PRECONDITION && d.GetReason() == commonv1.Reason_REASON_UNSPECIFIED:
		// The controller's two refusals without a reason: no move to
		// cancel, or another move running.
		if cancel {
			return kerr.NoReassignmentInProgress.Code
		}
		return kerr.ReassignmentInProgress.Code
	}
	return detailCode(d, adminPlane, nil)
}

// alterReassignmentsRefused answers code at the top and on every
// partition.
func alterReassignmentsRefused(req *kmsg.AlterPartitionAssignmentsRequest, allowRF bool, code int16, msg *string) kmsg.Response {
	resp := kmsg.NewPtrAlterPartitionAssignmentsResponse()
	resp.ErrorCode, resp.ErrorMessage, resp.AllowReplicationFactorChange = code, msg, allowRF
	for _, t := range req.Topics {
		rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.ErrorMessage = p.Partition, code, msg
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
