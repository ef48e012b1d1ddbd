// Package controllertest is an in-memory ControllerService for storage node
// tests: RegisterNode, Heartbeat, WatchMetadata (snapshot, then deltas
// carrying every topic and node) and AlterPartition (compare-and-set on the
// partition epoch, added members at their current node epoch), with state a
// test changes directly. Other RPCs are unimplemented.
package controllertest

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
)

// Controller is the fake. Safe for concurrent use.
type Controller struct {
	controllerv1connect.UnimplementedControllerServiceHandler

	mu        sync.Mutex
	version   int64
	nextEpoch int64
	topics    map[string]*commonv1.TopicMetadata
	nodes     map[int32]*controllerv1.NodeStatus
	changed   chan struct{}
	alters    int // accepted AlterPartition items
}

// New returns an empty controller.
func New() *Controller {
	return &Controller{version: 1, nextEpoch: 100, topics: map[string]*commonv1.TopicMetadata{},
		nodes: map[int32]*controllerv1.NodeStatus{}, changed: make(chan struct{})}
}

// Handler returns the Connect path and handler.
func (c *Controller) Handler() (string, http.Handler) {
	return controllerv1connect.NewControllerServiceHandler(c)
}

func (c *Controller) bumpLocked() {
	c.version++
	close(c.changed)
	c.changed = make(chan struct{})
}

// SetTopic creates or replaces a topic.
func (c *Controller) SetTopic(t *commonv1.TopicMetadata) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.topics[t.GetName()] = proto.Clone(t).(*commonv1.TopicMetadata)
	c.bumpLocked()
}

// UpdatePartition changes a partition record with fn and bumps its
// partition epoch (fn bumps the leader epoch itself when it moves the
// leader).
func (c *Controller) UpdatePartition(topic string, partition int32, fn func(p *commonv1.PartitionMetadata)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.partLocked(topic, partition)
	fn(p)
	p.PartitionEpoch++
	c.bumpLocked()
}

// UpdateTopicConfigs changes a topic's configs with fn, as AlterTopicConfig
// does, and sends the topic to every watcher.
func (c *Controller) UpdateTopicConfigs(topic string, fn func(configs map[string]string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.topics[topic]
	if t.Configs == nil {
		t.Configs = map[string]string{}
	}
	fn(t.Configs)
	c.bumpLocked()
}

// Partition returns a copy of a partition record.
func (c *Controller) Partition(topic string, partition int32) *commonv1.PartitionMetadata {
	c.mu.Lock()
	defer c.mu.Unlock()
	return proto.Clone(c.partLocked(topic, partition)).(*commonv1.PartitionMetadata)
}

// Alters is the number of accepted AlterPartition items.
func (c *Controller) Alters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.alters
}

func (c *Controller) partLocked(topic string, partition int32) *commonv1.PartitionMetadata {
	t := c.topics[topic]
	if t == nil {
		return nil
	}
	for _, p := range t.Partitions {
		if p.GetPartition() == partition {
			return p
		}
	}
	return nil
}

func (c *Controller) RegisterNode(_ context.Context, req *connect.Request[controllerv1.RegisterNodeRequest]) (*connect.Response[controllerv1.RegisterNodeResponse], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := req.Msg
	if cur := c.nodes[m.GetNodeId()]; cur != nil && cur.GetIncarnationId() == m.GetIncarnationId() {
		return connect.NewResponse(&controllerv1.RegisterNodeResponse{NodeEpoch: cur.GetNodeEpoch(), HeartbeatIntervalMs: 100, LeaseTtlMs: 10000}), nil
	}
	c.nextEpoch++
	c.nodes[m.GetNodeId()] = &controllerv1.NodeStatus{
		Node:      &commonv1.Node{NodeId: m.GetNodeId(), Address: m.GetAddress(), Rack: m.GetRack()},
		NodeEpoch: c.nextEpoch, IncarnationId: m.GetIncarnationId(), State: controllerv1.NodeState_NODE_STATE_ALIVE,
	}
	c.bumpLocked()
	return connect.NewResponse(&controllerv1.RegisterNodeResponse{NodeEpoch: c.nextEpoch, HeartbeatIntervalMs: 100, LeaseTtlMs: 10000}), nil
}

func (c *Controller) Heartbeat(_ context.Context, req *connect.Request[controllerv1.HeartbeatRequest]) (*connect.Response[controllerv1.HeartbeatResponse], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[req.Msg.GetNodeId()]
	if n == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("unknown node"))
	}
	if n.GetNodeEpoch() != req.Msg.GetNodeEpoch() {
		return nil, connect.NewError(connect.CodeAborted, errors.New("stale node epoch"))
	}
	return connect.NewResponse(&controllerv1.HeartbeatResponse{LeaseTtlMs: 10000}), nil
}

func (c *Controller) snapshotLocked() *controllerv1.WatchMetadataResponse {
	snap := &controllerv1.MetadataSnapshot{ClusterId: "test"}
	for _, t := range c.topics {
		snap.Topics = append(snap.Topics, proto.Clone(t).(*commonv1.TopicMetadata))
	}
	for _, n := range c.nodes {
		snap.Nodes = append(snap.Nodes, proto.Clone(n).(*controllerv1.NodeStatus))
	}
	return &controllerv1.WatchMetadataResponse{Version: c.version, Change: &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: snap}}
}

func (c *Controller) WatchMetadata(ctx context.Context, _ *connect.Request[controllerv1.WatchMetadataRequest], stream *connect.ServerStream[controllerv1.WatchMetadataResponse]) error {
	c.mu.Lock()
	msg, ch := c.snapshotLocked(), c.changed
	c.mu.Unlock()
	if err := stream.Send(msg); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		}
		c.mu.Lock()
		snap := c.snapshotLocked()
		ch = c.changed
		c.mu.Unlock()
		// Every delta carries every topic and node whole, which is what a
		// delta may do (elements replace the client's copy).
		d := &controllerv1.MetadataDelta{Topics: snap.GetSnapshot().GetTopics(), Nodes: snap.GetSnapshot().GetNodes()}
		if err := stream.Send(&controllerv1.WatchMetadataResponse{Version: snap.GetVersion(), Change: &controllerv1.WatchMetadataResponse_Delta{Delta: d}}); err != nil {
			return err
		}
	}
}

func (c *Controller) AlterPartition(_ context.Context, req *connect.Request[controllerv1.AlterPartitionRequest]) (*connect.Response[controllerv1.AlterPartitionResponse], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := req.Msg
	if n := c.nodes[m.GetNodeId()]; n == nil || n.GetNodeEpoch() != m.GetNodeEpoch() {
		return nil, connect.NewError(connect.CodeAborted, errors.New("stale node epoch"))
	}
	out := &controllerv1.AlterPartitionResponse{}
	changed := false
	for _, it := range m.GetPartitions() {
		res := &controllerv1.AlterPartitionResult{Topic: it.GetTopic(), Partition: it.GetPartition()}
		out.Partitions = append(out.Partitions, res)
		p := c.partLocked(it.GetTopic(), it.GetPartition())
		fail := func(code commonv1.Code, reason commonv1.Reason, msg string) {
			res.Error = &commonv1.ErrorDetail{Code: code, Reason: reason, Message: msg}
		}
		switch {
		case p == nil:
			fail(commonv1.Code_CODE_NOT_FOUND, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "unknown partition")
		case p.GetLeaderId() != m.GetNodeId():
			fail(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_NOT_LEADER, "not the leader")
		case p.GetLeaderEpoch() != it.GetLeaderEpoch():
			fail(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_FENCED_LEADER_EPOCH, "stale leader epoch")
		case p.GetPartitionEpoch() != it.GetPartitionEpoch():
			fail(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_STALE_PARTITION_EPOCH, "stale partition epoch")
		default:
			ok := slices.Contains(it.GetNewIsr(), p.GetLeaderId())
			for _, id := range it.GetNewIsr() {
				ok = ok && slices.Contains(p.GetReplicas(), id)
			}
			if !ok {
				fail(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "ineligible ISR")
				break
			}
			// As the controller (KIP-903): an added member must be named
			// with the node epoch of its current registration.
			for _, id := range it.GetNewIsr() {
				if slices.Contains(p.GetIsr(), id) {
					continue
				}
				var e int64
				for _, m := range it.GetNewIsrMembers() {
					if m.GetNodeId() == id {
						e = m.GetNodeEpoch()
					}
				}
				if n := c.nodes[id]; n == nil || n.GetNodeEpoch() != e {
					ok = false
				}
			}
			if !ok {
				fail(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA, "added member not at its current node epoch")
				break
			}
			p.Isr = slices.Clone(it.GetNewIsr())
			p.PartitionEpoch++
			c.alters++
			changed = true
		}
		if p != nil {
			res.State = proto.Clone(p).(*commonv1.PartitionMetadata)
		}
	}
	if changed {
		c.bumpLocked()
	}
	return connect.NewResponse(out), nil
}
