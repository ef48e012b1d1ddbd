package kafka

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/quota"
)

// Authorization on the Kafka listener. The bridge reaches the services as
// its own process (a storage node and a coordinator call with their
// service identity, which the ACLs allow everything), so it checks each
// call itself, in the Kafka connection's principal's name, with the rules
// the Connect handlers of the service answering it apply
// (docs/security.md, "Who needs what"): these wrappers of the Gateway,
// StorageService and CoordinatorService clients refuse what the principal
// may not do before the call, filter what it may not see out of the
// answers, and charge its quotas. On the gateway, whose bridge calls the
// gateway in-process with the principal in the context, the gateway's
// handlers check again, alike.

// denied is a refusal on a resource type, so the Kafka answer is that
// type's authorization error (TOPIC_, GROUP_ or
// CLUSTER_AUTHORIZATION_FAILED).
type denied struct {
	rt  acl.ResourceType
	err error
}

func (d *denied) Error() string { return d.err.Error() }
func (d *denied) Unwrap() error { return d.err }

// deniedCode is the Kafka code of a refusal, and false for other errors.
func deniedCode(err error) (int16, bool) {
	var d *denied
	if !errors.As(err, &d) {
		return 0, false
	}
	switch d.rt {
	case acl.Group:
		return kerr.GroupAuthorizationFailed.Code, true
	case acl.Cluster:
		return kerr.ClusterAuthorizationFailed.Code, true
	}
	return kerr.TopicAuthorizationFailed.Code, true
}

func authorize(ctx context.Context, g *guard.Guard, op acl.Operation, rt acl.ResourceType, name string) error {
	if err := g.Authorize(ctx, op, rt, name); err != nil {
		return &denied{rt: rt, err: err}
	}
	return nil
}

// refusal is the PERMISSION_DENIED detail of a partition-level refusal.
func refusal(ctx context.Context, g *guard.Guard, op acl.Operation, topic string, seen map[string]*commonv1.ErrorDetail) *commonv1.ErrorDetail {
	d, ok := seen[topic]
	if !ok {
		if err := g.Authorize(ctx, op, acl.Topic, topic); err != nil {
			d = apierr.AsDetail(err)
		}
		seen[topic] = d
	}
	return d
}

// guardedGateway checks the gateway calls the bridge makes.
type guardedGateway struct {
	Gateway
	g *guard.Guard
}

func (w guardedGateway) Metadata(ctx context.Context, req *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	if w.g.Enforcing() && len(req.Msg.GetTopics()) > 0 {
		// Named topics the principal may not describe are not asked for
		// (the gateway's own handler, in-process, would refuse the whole
		// request); the bridge answers them TOPIC_AUTHORIZATION_FAILED.
		names := slices.DeleteFunc(slices.Clone(req.Msg.GetTopics()), func(n string) bool {
			return !w.g.Allowed(ctx, acl.Describe, acl.Topic, n)
		})
		if len(names) == 0 {
			names = []string{}
		}
		req = connect.NewRequest(&gatewayv1.MetadataRequest{Topics: names})
	}
	out, err := w.Gateway.Metadata(ctx, req)
	if err != nil || !w.g.Enforcing() {
		return out, err
	}
	// Only the topics the principal may describe exist for it.
	out.Msg.Topics = slices.DeleteFunc(out.Msg.Topics, func(t *commonv1.TopicMetadata) bool {
		return !w.g.Allowed(ctx, acl.Describe, acl.Topic, t.GetName())
	})
	return out, nil
}

func (w guardedGateway) FindCoordinator(ctx context.Context, req *connect.Request[gatewayv1.FindCoordinatorRequest]) (*connect.Response[gatewayv1.FindCoordinatorResponse], error) {
	if err := authorize(ctx, w.g, acl.Describe, acl.Group, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	return w.Gateway.FindCoordinator(ctx, req)
}

func (w guardedGateway) InitProducerId(ctx context.Context, req *connect.Request[gatewayv1.InitProducerIdRequest]) (*connect.Response[gatewayv1.InitProducerIdResponse], error) {
	// Any authenticated principal, as on Connect: the listener admits no
	// other request on an enforcing process.
	return w.Gateway.InitProducerId(ctx, req)
}

func (w guardedGateway) CreateTopic(ctx context.Context, req *connect.Request[gatewayv1.CreateTopicRequest]) (*connect.Response[gatewayv1.CreateTopicResponse], error) {
	if err := w.g.AuthorizeCreateTopic(ctx, req.Msg.GetName()); err != nil {
		return nil, &denied{rt: acl.Topic, err: err}
	}
	return w.Gateway.CreateTopic(ctx, req)
}

func (w guardedGateway) DeleteTopic(ctx context.Context, req *connect.Request[gatewayv1.DeleteTopicRequest]) (*connect.Response[gatewayv1.DeleteTopicResponse], error) {
	if err := authorize(ctx, w.g, acl.Delete, acl.Topic, req.Msg.GetName()); err != nil {
		return nil, err
	}
	return w.Gateway.DeleteTopic(ctx, req)
}

func (w guardedGateway) DescribeTopics(ctx context.Context, req *connect.Request[gatewayv1.DescribeTopicsRequest]) (*connect.Response[gatewayv1.DescribeTopicsResponse], error) {
	for _, n := range req.Msg.GetNames() {
		if err := authorize(ctx, w.g, acl.Describe, acl.Topic, n); err != nil {
			return nil, err
		}
	}
	return w.Gateway.DescribeTopics(ctx, req)
}

func (w guardedGateway) AlterTopicConfig(ctx context.Context, req *connect.Request[gatewayv1.AlterTopicConfigRequest]) (*connect.Response[gatewayv1.AlterTopicConfigResponse], error) {
	if err := authorize(ctx, w.g, acl.Alter, acl.Topic, req.Msg.GetName()); err != nil {
		return nil, err
	}
	return w.Gateway.AlterTopicConfig(ctx, req)
}

func (w guardedGateway) CreatePartitions(ctx context.Context, req *connect.Request[gatewayv1.CreatePartitionsRequest]) (*connect.Response[gatewayv1.CreatePartitionsResponse], error) {
	if err := authorize(ctx, w.g, acl.Alter, acl.Topic, req.Msg.GetTopic()); err != nil {
		return nil, err
	}
	return w.Gateway.CreatePartitions(ctx, req)
}

func (w guardedGateway) ListGroups(ctx context.Context, req *connect.Request[gatewayv1.ListGroupsRequest]) (*connect.Response[gatewayv1.ListGroupsResponse], error) {
	out, err := w.Gateway.ListGroups(ctx, req)
	if err != nil || !w.g.Enforcing() {
		return out, err
	}
	keep := out.Msg.Groups[:0]
	var lags []*gatewayv1.GroupLag
	for i, gr := range out.Msg.Groups {
		if w.g.Allowed(ctx, acl.Describe, acl.Group, gr.GetGroupId()) {
			keep = append(keep, gr)
			if i < len(out.Msg.Lags) {
				lags = append(lags, out.Msg.Lags[i])
			}
		}
	}
	out.Msg.Groups = keep
	if out.Msg.Lags != nil {
		out.Msg.Lags = lags
	}
	return out, nil
}

func (w guardedGateway) DescribeGroup(ctx context.Context, req *connect.Request[gatewayv1.DescribeGroupRequest]) (*connect.Response[gatewayv1.DescribeGroupResponse], error) {
	if err := authorize(ctx, w.g, acl.Describe, acl.Group, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	return w.Gateway.DescribeGroup(ctx, req)
}

func (w guardedGateway) DeleteGroup(ctx context.Context, req *connect.Request[gatewayv1.DeleteGroupRequest]) (*connect.Response[gatewayv1.DeleteGroupResponse], error) {
	if err := authorize(ctx, w.g, acl.Delete, acl.Group, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	return w.Gateway.DeleteGroup(ctx, req)
}

// The partition-move, election and ACL calls need alter on the cluster,
// their listings describe, as the gateway's handlers require.

func (w guardedGateway) ElectLeaders(ctx context.Context, req *connect.Request[gatewayv1.ElectLeadersRequest]) (*connect.Response[gatewayv1.ElectLeadersResponse], error) {
	if err := authorize(ctx, w.g, acl.Alter, acl.Cluster, acl.ClusterName); err != nil {
		return nil, err
	}
	return w.Gateway.ElectLeaders(ctx, req)
}

func (w guardedGateway) AlterPartitionReassignments(ctx context.Context, req *connect.Request[gatewayv1.AlterPartitionReassignmentsRequest]) (*connect.Response[gatewayv1.AlterPartitionReassignmentsResponse], error) {
	if err := authorize(ctx, w.g, acl.Alter, acl.Cluster, acl.ClusterName); err != nil {
		return nil, err
	}
	return w.Gateway.AlterPartitionReassignments(ctx, req)
}

func (w guardedGateway) ListPartitionReassignments(ctx context.Context, req *connect.Request[gatewayv1.ListPartitionReassignmentsRequest]) (*connect.Response[gatewayv1.ListPartitionReassignmentsResponse], error) {
	if err := authorize(ctx, w.g, acl.Describe, acl.Cluster, acl.ClusterName); err != nil {
		return nil, err
	}
	return w.Gateway.ListPartitionReassignments(ctx, req)
}

func (w guardedGateway) CreateAcls(ctx context.Context, req *connect.Request[gatewayv1.CreateAclsRequest]) (*connect.Response[gatewayv1.CreateAclsResponse], error) {
	if err := authorize(ctx, w.g, acl.Alter, acl.Cluster, acl.ClusterName); err != nil {
		return nil, err
	}
	return w.Gateway.CreateAcls(ctx, req)
}

func (w guardedGateway) DescribeAcls(ctx context.Context, req *connect.Request[gatewayv1.DescribeAclsRequest]) (*connect.Response[gatewayv1.DescribeAclsResponse], error) {
	if err := authorize(ctx, w.g, acl.Describe, acl.Cluster, acl.ClusterName); err != nil {
		return nil, err
	}
	return w.Gateway.DescribeAcls(ctx, req)
}

func (w guardedGateway) DeleteAcls(ctx context.Context, req *connect.Request[gatewayv1.DeleteAclsRequest]) (*connect.Response[gatewayv1.DeleteAclsResponse], error) {
	if err := authorize(ctx, w.g, acl.Alter, acl.Cluster, acl.ClusterName); err != nil {
		return nil, err
	}
	return w.Gateway.DeleteAcls(ctx, req)
}

// authorizeCluster checks op on the cluster for the connection's
// principal before an admin request does anything, as Kafka's
// authHelper.authorizeClusterOperation does; the answer to a refusal is
// the request's error response. Without a guard it allows.
func (b *Bridge) authorizeCluster(ctx context.Context, op acl.Operation) error {
	if b.cfg.Guard == nil {
		return nil
	}
	return authorize(ctx, b.cfg.Guard, op, acl.Cluster, acl.ClusterName)
}

// guardedStorage checks and throttles the data path as a storage node's
// handlers do: Produce and ProducePartitions write on the topic, Fetch
// read and ListOffsets describe partition by partition, and the produce
// and fetch quotas of the connection's principal (held back while it owes, charged
// before the call and settled with what it sent or received, surfaced as
// throttle_time_ms).
type guardedStorage struct {
	storagev1connect.StorageServiceClient
	g *guard.Guard
}

func (w guardedStorage) Produce(ctx context.Context, req *connect.Request[storagev1.ProduceRequest]) (*connect.Response[storagev1.ProduceResponse], error) {
	if err := authorize(ctx, w.g, acl.Write, acl.Topic, req.Msg.GetTopic()); err != nil {
		return nil, err
	}
	res, err := w.g.Reserve(ctx, quota.Produce, int64(len(req.Msg.GetRecords())))
	if err != nil {
		return nil, connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	out, err := w.StorageServiceClient.Produce(ctx, req)
	if err != nil {
		w.g.Settle(res, 0)
		return nil, err
	}
	t := throttleMs(w.g.Settle(res, int64(len(req.Msg.GetRecords()))))
	out.Msg.ThrottleTimeMs = max(out.Msg.GetThrottleTimeMs(), t)
	return out, nil
}

// ProducePartitions is Produce for several partitions: a partition of a
// topic the principal may not write is answered PERMISSION_DENIED
// (TOPIC_AUTHORIZATION_FAILED) in its place and never reaches the storage
// node; the others are produced in one call, held back and charged once
// for all their bytes.
func (w guardedStorage) ProducePartitions(ctx context.Context, req *connect.Request[storagev1.ProducePartitionsRequest]) (*connect.Response[storagev1.ProducePartitionsResponse], error) {
	seen := map[string]*commonv1.ErrorDetail{}
	parts := req.Msg.GetPartitions()
	refused := make([]*commonv1.ErrorDetail, len(parts))
	var allowed []*storagev1.ProducePartition
	bytes := 0
	for i, p := range parts {
		if refused[i] = refusal(ctx, w.g, acl.Write, p.GetTopic(), seen); refused[i] == nil {
			allowed = append(allowed, p)
			bytes += len(p.GetRecords())
		}
	}
	var results []*storagev1.ProducePartitionResult
	out := connect.NewResponse(&storagev1.ProducePartitionsResponse{})
	if len(allowed) > 0 {
		res, err := w.g.Reserve(ctx, quota.Produce, int64(bytes))
		if err != nil {
			return nil, connect.NewError(connect.CodeDeadlineExceeded, err)
		}
		// The caller's request keeps every partition: it matches the
		// answers to them by position.
		req.Msg.Partitions = allowed
		defer func() { req.Msg.Partitions = parts }()
		if out, err = w.StorageServiceClient.ProducePartitions(ctx, req); err != nil {
			w.g.Settle(res, 0)
			return nil, err
		}
		if results = out.Msg.GetPartitions(); len(results) != len(allowed) {
			w.g.Settle(res, 0)
			return nil, connect.NewError(connect.CodeInternal, errors.New("produce answered a different number of partitions"))
		}
		t := throttleMs(w.g.Settle(res, int64(bytes)))
		out.Msg.ThrottleTimeMs = max(out.Msg.GetThrottleTimeMs(), t)
	}
	// In request order: the bridge matches answers by position.
	merged := make([]*storagev1.ProducePartitionResult, len(parts))
	j := 0
	for i, p := range parts {
		if refused[i] != nil {
			merged[i] = &storagev1.ProducePartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), BaseOffset: -1, LogAppendTimeMs: -1, Error: refused[i]}
			continue
		}
		merged[i] = results[j]
		j++
	}
	out.Msg.Partitions = merged
	return out, nil
}

func (w guardedStorage) Fetch(ctx context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
	seen := map[string]*commonv1.ErrorDetail{}
	parts := req.Msg.GetPartitions()
	refused := make([]*commonv1.ErrorDetail, len(parts))
	var allowed []*storagev1.FetchPartition
	for i, p := range parts {
		if refused[i] = refusal(ctx, w.g, acl.Read, p.GetTopic(), seen); refused[i] == nil {
			allowed = append(allowed, p)
		}
	}
	maxBytes := int64(req.Msg.GetMaxBytes())
	if maxBytes <= 0 {
		maxBytes = math.MaxInt64
	}
	res, err := w.g.Reserve(ctx, quota.Fetch, w.g.FetchEstimate(ctx, maxBytes))
	if err != nil {
		return nil, connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	var results []*storagev1.FetchPartitionResult
	out := connect.NewResponse(&storagev1.FetchResponse{})
	if len(allowed) > 0 {
		// The caller's request keeps every partition: it matches the
		// answers to them by position.
		req.Msg.Partitions = allowed
		defer func() { req.Msg.Partitions = parts }()
		if out, err = w.StorageServiceClient.Fetch(ctx, req); err != nil {
			w.g.Settle(res, 0)
			return nil, err
		}
		results = out.Msg.GetPartitions()
		if len(results) != len(allowed) {
			w.g.Settle(res, 0)
			return nil, connect.NewError(connect.CodeInternal, errors.New("fetch answered a different number of partitions"))
		}
	}
	merged := make([]*storagev1.FetchPartitionResult, len(parts))
	bytes, j := 0, 0
	for i, p := range parts {
		if refused[i] != nil {
			merged[i] = &storagev1.FetchPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Error: refused[i]}
			continue
		}
		merged[i] = results[j]
		bytes += len(results[j].GetRecords())
		j++
	}
	out.Msg.Partitions = merged
	t := throttleMs(w.g.Settle(res, int64(bytes)))
	out.Msg.ThrottleTimeMs = max(out.Msg.GetThrottleTimeMs(), t)
	return out, nil
}

func (w guardedStorage) ListOffsets(ctx context.Context, req *connect.Request[storagev1.ListOffsetsRequest]) (*connect.Response[storagev1.ListOffsetsResponse], error) {
	return byPartition(ctx, w.g, acl.Describe, req, w.StorageServiceClient.ListOffsets,
		func(m *storagev1.ListOffsetsRequest) *[]*storagev1.ListOffsetsPartition { return &m.Partitions },
		func(m *storagev1.ListOffsetsResponse) *[]*storagev1.ListOffsetsPartitionResult { return &m.Partitions },
		func(p *storagev1.ListOffsetsPartition, d *commonv1.ErrorDetail) *storagev1.ListOffsetsPartitionResult {
			return &storagev1.ListOffsetsPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Error: d}
		})
}

// OffsetForLeaderEpoch needs describe on each partition's topic (Kafka
// also takes CLUSTER_ACTION, which no Kafka principal holds here: Strata
// has no such operation and its followers replicate over Connect); a
// refused partition is answered PERMISSION_DENIED in its place.
func (w guardedStorage) OffsetForLeaderEpoch(ctx context.Context, req *connect.Request[storagev1.OffsetForLeaderEpochRequest]) (*connect.Response[storagev1.OffsetForLeaderEpochResponse], error) {
	return byPartition(ctx, w.g, acl.Describe, req, w.StorageServiceClient.OffsetForLeaderEpoch,
		func(m *storagev1.OffsetForLeaderEpochRequest) *[]*storagev1.OffsetForLeaderEpochPartition {
			return &m.Partitions
		},
		func(m *storagev1.OffsetForLeaderEpochResponse) *[]*storagev1.OffsetForLeaderEpochPartitionResult {
			return &m.Partitions
		},
		func(p *storagev1.OffsetForLeaderEpochPartition, d *commonv1.ErrorDetail) *storagev1.OffsetForLeaderEpochPartitionResult {
			return &storagev1.OffsetForLeaderEpochPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), LeaderEpoch: -1, EndOffset: -1, Error: d}
		})
}

// DeleteRecords needs delete on each partition's topic (Kafka's DELETE
// on the topic); a refused partition is answered PERMISSION_DENIED in its
// place.
func (w guardedStorage) DeleteRecords(ctx context.Context, req *connect.Request[storagev1.DeleteRecordsRequest]) (*connect.Response[storagev1.DeleteRecordsResponse], error) {
	return byPartition(ctx, w.g, acl.Delete, req, w.StorageServiceClient.DeleteRecords,
		func(m *storagev1.DeleteRecordsRequest) *[]*storagev1.DeleteRecordsPartition { return &m.Partitions },
		func(m *storagev1.DeleteRecordsResponse) *[]*storagev1.DeleteRecordsPartitionResult {
			return &m.Partitions
		},
		func(p *storagev1.DeleteRecordsPartition, d *commonv1.ErrorDetail) *storagev1.DeleteRecordsPartitionResult {
			return &storagev1.DeleteRecordsPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), LowWatermark: -1, Error: d}
		})
}

// DescribeProducers needs read on each partition's topic (Kafka's READ on
// the topic); a refused partition is answered PERMISSION_DENIED in its
// place.
func (w guardedStorage) DescribeProducers(ctx context.Context, req *connect.Request[storagev1.DescribeProducersRequest]) (*connect.Response[storagev1.DescribeProducersResponse], error) {
	return byPartition(ctx, w.g, acl.Read, req, w.StorageServiceClient.DescribeProducers,
		func(m *storagev1.DescribeProducersRequest) *[]*commonv1.TopicPartition { return &m.Partitions },
		func(m *storagev1.DescribeProducersResponse) *[]*storagev1.DescribeProducersPartitionResult {
			return &m.Partitions
		},
		func(p *commonv1.TopicPartition, d *commonv1.ErrorDetail) *storagev1.DescribeProducersPartitionResult {
			return &storagev1.DescribeProducersPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Error: d}
		})
}

// byPartition serves a storage call whose request lists partitions (parts
// of its message) and whose answer lists one result per partition
// (results), in order: each partition's topic needs op; the call carries
// only the allowed partitions, and a refused one is answered
// refusedAs(partition, PERMISSION_DENIED detail) in its place. The
// caller's request keeps every partition: it matches the answers to them
// by position.
func byPartition[Req, Resp any, P interface{ GetTopic() string }, R any](ctx context.Context, g *guard.Guard, op acl.Operation,
	req *connect.Request[Req], call func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	parts func(*Req) *[]P, results func(*Resp) *[]R, refusedAs func(P, *commonv1.ErrorDetail) R,
) (*connect.Response[Resp], error) {
	asked := *parts(req.Msg)
	seen := map[string]*commonv1.ErrorDetail{}
	refused := make([]*commonv1.ErrorDetail, len(asked))
	var allowed []P
	for i, p := range asked {
		if refused[i] = refusal(ctx, g, op, p.GetTopic(), seen); refused[i] == nil {
			allowed = append(allowed, p)
		}
	}
	out := connect.NewResponse(new(Resp))
	var got []R
	if len(allowed) > 0 {
		*parts(req.Msg) = allowed
		defer func() { *parts(req.Msg) = asked }()
		var err error
		if out, err = call(ctx, req); err != nil {
			return nil, err
		}
		if got = *results(out.Msg); len(got) != len(allowed) {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("the storage node answered %d partitions of %d", len(got), len(allowed)))
		}
	}
	merged := make([]R, len(asked))
	j := 0
	for i, p := range asked {
		if refused[i] != nil {
			merged[i] = refusedAs(p, refused[i])
			continue
		}
		merged[i] = got[j]
		j++
	}
	*results(out.Msg) = merged
	return out, nil
}

// guardedCoordinator checks the group calls as the coordinator's handlers
// do: a heartbeat or a leave read on the group; a commit read on the
// group and, partition by partition, read on the topic; an offset fetch
// describe on the group and on each topic.
type guardedCoordinator struct {
	coordinatorv1connect.CoordinatorServiceClient
	g *guard.Guard
}

func (w guardedCoordinator) ConsumerGroupHeartbeat(ctx context.Context, req *connect.Request[coordinatorv1.ConsumerGroupHeartbeatRequest]) (*connect.Response[coordinatorv1.ConsumerGroupHeartbeatResponse], error) {
	if err := authorize(ctx, w.g, acl.Read, acl.Group, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	if w.g.Enforcing() && req.Msg.SubscribedTopicNames != nil {
		// Topics the principal may not describe are no part of its
		// subscription, as they are not in its metadata.
		req.Msg.SubscribedTopicNames = slices.DeleteFunc(slices.Clone(req.Msg.SubscribedTopicNames), func(t string) bool {
			return !w.g.Allowed(ctx, acl.Describe, acl.Topic, t)
		})
	}
	return w.CoordinatorServiceClient.ConsumerGroupHeartbeat(ctx, req)
}

func (w guardedCoordinator) LeaveGroup(ctx context.Context, req *connect.Request[coordinatorv1.LeaveGroupRequest]) (*connect.Response[coordinatorv1.LeaveGroupResponse], error) {
	if err := authorize(ctx, w.g, acl.Read, acl.Group, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	return w.CoordinatorServiceClient.LeaveGroup(ctx, req)
}

func (w guardedCoordinator) OffsetCommit(ctx context.Context, req *connect.Request[coordinatorv1.OffsetCommitRequest]) (*connect.Response[coordinatorv1.OffsetCommitResponse], error) {
	if err := authorize(ctx, w.g, acl.Read, acl.Group, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	seen := map[string]*commonv1.ErrorDetail{}
	parts := req.Msg.GetPartitions()
	refused := make([]*commonv1.ErrorDetail, len(parts))
	var allowed []*coordinatorv1.OffsetCommitPartition
	for i, p := range parts {
		if refused[i] = refusal(ctx, w.g, acl.Read, p.GetTopic(), seen); refused[i] == nil {
			allowed = append(allowed, p)
		}
	}
	if len(allowed) == len(parts) {
		return w.CoordinatorServiceClient.OffsetCommit(ctx, req)
	}
	var results []*coordinatorv1.OffsetCommitPartitionResult
	out := connect.NewResponse(&coordinatorv1.OffsetCommitResponse{})
	if len(allowed) > 0 {
		// The caller's request keeps every partition: it matches the
		// answers to them by position.
		req.Msg.Partitions = allowed
		defer func() { req.Msg.Partitions = parts }()
		var err error
		if out, err = w.CoordinatorServiceClient.OffsetCommit(ctx, req); err != nil {
			return nil, err
		}
		if results = out.Msg.GetPartitions(); len(results) != len(allowed) {
			return nil, connect.NewError(connect.CodeInternal, errors.New("offset commit answered a different number of partitions"))
		}
	}
	// In request order: the bridge matches answers by position.
	merged := make([]*coordinatorv1.OffsetCommitPartitionResult, len(parts))
	j := 0
	for i, p := range parts {
		if refused[i] != nil {
			merged[i] = &coordinatorv1.OffsetCommitPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Error: refused[i]}
			continue
		}
		merged[i] = results[j]
		j++
	}
	out.Msg.Partitions = merged
	return out, nil
}

func (w guardedCoordinator) OffsetFetch(ctx context.Context, req *connect.Request[coordinatorv1.OffsetFetchRequest]) (*connect.Response[coordinatorv1.OffsetFetchResponse], error) {
	if err := authorize(ctx, w.g, acl.Describe, acl.Group, req.Msg.GetGroupId()); err != nil {
		return nil, err
	}
	for _, t := range req.Msg.GetTopics() {
		if err := authorize(ctx, w.g, acl.Describe, acl.Topic, t.GetTopic()); err != nil {
			return nil, err
		}
	}
	out, err := w.CoordinatorServiceClient.OffsetFetch(ctx, req)
	if err != nil || !w.g.Enforcing() {
		return out, err
	}
	out.Msg.Offsets = slices.DeleteFunc(out.Msg.Offsets, func(o *coordinatorv1.CommittedOffset) bool {
		return !w.g.Allowed(ctx, acl.Describe, acl.Topic, o.GetTopic())
	})
	return out, nil
}

// throttleMs rounds d up to whole milliseconds, so a client that waits
// what it is told never arrives early, capped at the field's range.
func throttleMs(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return int32(min(ms, math.MaxInt32))
}
