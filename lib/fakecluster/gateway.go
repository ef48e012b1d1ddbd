package fakecluster

import (
	"context"
	"regexp"
	"sort"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/topicconfig"
)

// gateway is the fake GatewayService.
type gateway struct {
	gatewayv1connect.UnimplementedGatewayServiceHandler
	c *Cluster
}

var validName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func (g *gateway) Metadata(ctx context.Context, req *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	c := g.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["Metadata"]++
	if err := c.faultLocked(0, "Metadata", "", -1, false); err != nil {
		return nil, err
	}
	resp := &gatewayv1.MetadataResponse{ClusterId: "fake", Nodes: c.nodesLocked(), MetadataVersion: c.version}
	names := req.Msg.GetTopics()
	if len(names) == 0 {
		names = c.sortedNamesLocked()
	}
	for _, n := range names {
		if t := c.topics[n]; t != nil {
			resp.Topics = append(resp.Topics, t.metadata())
		} else {
			resp.UnknownTopics = append(resp.UnknownTopics, n)
		}
	}
	return connect.NewResponse(resp), nil
}

func (c *Cluster) sortedNamesLocked() []string {
	var names []string
	for n := range c.topics {
		names = append(names, n)
	}
	sortStrings(names)
	return names
}

func (g *gateway) InitProducerId(ctx context.Context, req *connect.Request[gatewayv1.InitProducerIdRequest]) (*connect.Response[gatewayv1.InitProducerIdResponse], error) {
	c := g.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["InitProducerId"]++
	if err := c.faultLocked(0, "InitProducerId", "", -1, false); err != nil {
		return nil, err
	}
	c.nextPID++
	return connect.NewResponse(&gatewayv1.InitProducerIdResponse{ProducerId: c.nextPID}), nil
}

func (g *gateway) FindCoordinator(ctx context.Context, req *connect.Request[gatewayv1.FindCoordinatorRequest]) (*connect.Response[gatewayv1.FindCoordinatorResponse], error) {
	g.c.mu.Lock()
	defer g.c.mu.Unlock()
	if g.c.coord == nil {
		return nil, noCoordinator()
	}
	return connect.NewResponse(&gatewayv1.FindCoordinatorResponse{CoordinatorId: "fake", Address: g.c.coord.URL}), nil
}

func noCoordinator() error {
	return errorf(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "no coordinator answers")
}

func (g *gateway) ListGroups(context.Context, *connect.Request[gatewayv1.ListGroupsRequest]) (*connect.Response[gatewayv1.ListGroupsResponse], error) {
	return nil, noCoordinator()
}

func (g *gateway) DescribeGroup(context.Context, *connect.Request[gatewayv1.DescribeGroupRequest]) (*connect.Response[gatewayv1.DescribeGroupResponse], error) {
	return nil, noCoordinator()
}

func (g *gateway) ResetOffsets(context.Context, *connect.Request[gatewayv1.ResetOffsetsRequest]) (*connect.Response[gatewayv1.ResetOffsetsResponse], error) {
	return nil, noCoordinator()
}

func (g *gateway) CreateTopic(ctx context.Context, req *connect.Request[gatewayv1.CreateTopicRequest]) (*connect.Response[gatewayv1.CreateTopicResponse], error) {
	m := req.Msg
	if !validName.MatchString(m.GetName()) || m.GetName() == "." || m.GetName() == ".." {
		return nil, errorf(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "invalid topic name %q", m.GetName())
	}
	for k := range m.GetConfigs() {
		if !topicconfig.Known(k) {
			return nil, errorf(connect.CodeInvalidArgument, commonv1.Reason_REASON_INVALID_CONFIG, "unknown config key %q", k)
		}
	}
	c := g.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := c.createLocked(m.GetName(), m.GetPartitions(), m.GetReplicationFactor(), m.GetConfigs())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&gatewayv1.CreateTopicResponse{Topic: t.description()}), nil
}

func unknownTopic(name string) error {
	return errorf(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", name)
}

func (g *gateway) DeleteTopic(ctx context.Context, req *connect.Request[gatewayv1.DeleteTopicRequest]) (*connect.Response[gatewayv1.DeleteTopicResponse], error) {
	c := g.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.topics[req.Msg.GetName()]
	if t == nil {
		return nil, unknownTopic(req.Msg.GetName())
	}
	delete(c.topics, t.name)
	c.bumpLocked()
	return connect.NewResponse(&gatewayv1.DeleteTopicResponse{TopicId: t.id}), nil
}

func (g *gateway) DescribeTopics(ctx context.Context, req *connect.Request[gatewayv1.DescribeTopicsRequest]) (*connect.Response[gatewayv1.DescribeTopicsResponse], error) {
	c := g.c
	c.mu.Lock()
	defer c.mu.Unlock()
	names := req.Msg.GetNames()
	if len(names) == 0 {
		names = c.sortedNamesLocked()
	}
	resp := &gatewayv1.DescribeTopicsResponse{}
	for _, n := range names {
		t := c.topics[n]
		if t == nil {
			return nil, unknownTopic(n)
		}
		resp.Topics = append(resp.Topics, t.description())
		if req.Msg.GetIncludeOffsets() {
			for i, p := range t.parts {
				resp.PartitionOffsets = append(resp.PartitionOffsets, &gatewayv1.PartitionOffsets{
					Topic: n, Partition: int32(i), LogStartOffset: p.start, HighWatermark: p.next,
				})
			}
		}
	}
	return connect.NewResponse(resp), nil
}

func (g *gateway) ListTopics(ctx context.Context, req *connect.Request[gatewayv1.ListTopicsRequest]) (*connect.Response[gatewayv1.ListTopicsResponse], error) {
	c := g.c
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &gatewayv1.ListTopicsResponse{}
	for _, n := range c.sortedNamesLocked() {
		t := c.topics[n]
		resp.Topics = append(resp.Topics, &controllerv1.TopicListing{Name: n, TopicId: t.id, Partitions: int32(len(t.parts)), ReplicationFactor: t.replicas})
	}
	return connect.NewResponse(resp), nil
}

func (g *gateway) AlterTopicConfig(ctx context.Context, req *connect.Request[gatewayv1.AlterTopicConfigRequest]) (*connect.Response[gatewayv1.AlterTopicConfigResponse], error) {
	c := g.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.topics[req.Msg.GetName()]
	if t == nil {
		return nil, unknownTopic(req.Msg.GetName())
	}
	for k := range req.Msg.GetSetConfigs() {
		if !topicconfig.Known(k) {
			return nil, errorf(connect.CodeInvalidArgument, commonv1.Reason_REASON_INVALID_CONFIG, "unknown config key %q", k)
		}
	}
	for k, v := range req.Msg.GetSetConfigs() {
		t.configs[k] = v
	}
	for _, k := range req.Msg.GetDeleteConfigs() {
		delete(t.configs, k)
	}
	c.bumpLocked()
	return connect.NewResponse(&gatewayv1.AlterTopicConfigResponse{Configs: t.description().Configs}), nil
}

func (g *gateway) DescribeCluster(ctx context.Context, req *connect.Request[gatewayv1.DescribeClusterRequest]) (*connect.Response[gatewayv1.DescribeClusterResponse], error) {
	c := g.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["DescribeCluster"]++
	if err := c.faultLocked(0, "DescribeCluster", "", -1, false); err != nil {
		return nil, err
	}
	resp := &gatewayv1.DescribeClusterResponse{
		ClusterId: "fake",
		Controllers: &controllerv1.ControllerQuorum{
			ActiveControllerId: "controller-1",
			Members:            []*controllerv1.ControllerMember{{ControllerId: "controller-1", Address: "http://127.0.0.1:9093", Active: true, Healthy: true}},
		},
		MetadataVersion: c.version,
		Services:        []*gatewayv1.ServiceStatus{{Service: "coordinator", Address: "http://127.0.0.1:9094", Message: "not running"}},
	}
	for _, n := range c.nodesLocked() {
		resp.Nodes = append(resp.Nodes, proto.Clone(c.registry[n.GetNodeId()]).(*controllerv1.NodeStatus))
	}
	for _, t := range c.topics {
		for _, p := range t.parts {
			if c.deadLocked(p.md.GetLeaderId()) {
				resp.OfflinePartitions++
			}
			for _, r := range p.md.GetReplicas() {
				if c.deadLocked(r) {
					resp.UnderReplicatedPartitions++
					break
				}
			}
		}
	}
	return connect.NewResponse(resp), nil
}

// SetNodeDead marks a registered node dead (or alive again), as
// DescribeCluster and WatchMetadata report it. Leadership does not move.
func (c *Cluster) SetNodeDead(id int32, dead bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.registry[id]
	if n == nil {
		return
	}
	n = proto.Clone(n).(*controllerv1.NodeStatus)
	n.State = controllerv1.NodeState_NODE_STATE_ALIVE
	if dead {
		n.State = controllerv1.NodeState_NODE_STATE_DEAD
	}
	c.registry[id] = n
	c.bumpLocked()
}

func sortStrings(s []string) { sort.Strings(s) }
