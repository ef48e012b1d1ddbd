package fakecluster

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
)

// Registration answers of the fake ControllerService.
const (
	heartbeatIntervalMs = 100
	leaseTTLMs          = 10000
)

// controller is the fake ControllerService: RegisterNode, Heartbeat,
// WatchMetadata and AlterPartition over the cluster's state, with the
// controller's fencing rules (node epochs, leader and partition epochs,
// ISR eligibility). Other RPCs are unimplemented.
type controller struct {
	controllerv1connect.UnimplementedControllerServiceHandler
	c *Cluster
}

// ControllerHandler returns the Connect path and handler of the cluster's
// ControllerService, for a test that serves it on a mux of its own.
func (c *Cluster) ControllerHandler() (string, http.Handler) {
	return controllerv1connect.NewControllerServiceHandler(&controller{c: c})
}

// ControllerURL is the base URL the cluster serves its ControllerService
// at, for services under test (storage nodes, gateways) to register with
// and watch.
func (c *Cluster) ControllerURL() string { return c.ctrl.URL }

// SetTopic creates or replaces a topic with the metadata given, as the
// controller would publish it: partitions must be listed by index from 0.
// A partition that exists keeps its log; a topic id that changes starts
// the topic over.
func (c *Cluster) SetTopic(tm *commonv1.TopicMetadata) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.topics[tm.GetName()]
	if t == nil || t.id != tm.GetTopicId() {
		t = &topic{name: tm.GetName(), id: tm.GetTopicId()}
		c.topics[t.name] = t
	}
	t.configs = maps.Clone(tm.GetConfigs())
	if t.configs == nil {
		t.configs = map[string]string{}
	}
	t.parts = t.parts[:min(len(t.parts), len(tm.GetPartitions()))]
	for i, pm := range tm.GetPartitions() {
		md := proto.Clone(pm).(*commonv1.PartitionMetadata)
		if i < len(t.parts) {
			t.parts[i].md = md
		} else {
			t.parts = append(t.parts, &partition{md: md, producers: map[int64]*producerState{}})
		}
		t.replicas = max(t.replicas, int32(len(md.GetReplicas())))
	}
	c.bumpLocked()
}

// UpdatePartition changes a partition's record with fn and bumps its
// partition epoch (fn bumps the leader epoch itself when it moves the
// leader), as an AlterPartition or reassignment on the controller does.
func (c *Cluster) UpdatePartition(topicName string, part int32, fn func(p *commonv1.PartitionMetadata)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.partLocked(topicName, part)
	fn(p.md)
	p.md.PartitionEpoch++
	c.bumpLocked()
}

// UpdateTopicConfigs changes a topic's configs with fn, as
// AlterTopicConfig does, and sends the topic to every watcher.
func (c *Cluster) UpdateTopicConfigs(topicName string, fn func(configs map[string]string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(c.topics[topicName].configs)
	c.bumpLocked()
}

// SetSecurity replaces the users, ACLs and quotas the metadata stream
// carries, as the controller publishes them after CreateAcls, SetQuota
// and the like: every watcher gets them whole in the next delta. nil is
// sent as an empty state once one was set.
func (c *Cluster) SetSecurity(st *commonv1.SecurityState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st == nil {
		st = &commonv1.SecurityState{}
	}
	c.security = proto.Clone(st).(*commonv1.SecurityState)
	c.bumpLocked()
}

// Partition returns a copy of a partition's record, or nil.
func (c *Cluster) Partition(topicName string, part int32) *commonv1.PartitionMetadata {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.partLocked(topicName, part); p != nil {
		return proto.Clone(p.md).(*commonv1.PartitionMetadata)
	}
	return nil
}

// Alters is the number of AlterPartition items accepted.
func (c *Cluster) Alters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.alters
}

func (c *Cluster) partLocked(topicName string, part int32) *partition {
	t := c.topics[topicName]
	if t == nil || part < 0 || int(part) >= len(t.parts) {
		return nil
	}
	return t.parts[part]
}

func (h *controller) RegisterNode(_ context.Context, req *connect.Request[controllerv1.RegisterNodeRequest]) (*connect.Response[controllerv1.RegisterNodeResponse], error) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["RegisterNode"]++
	if err := c.faultLocked(0, "RegisterNode", "", -1, false); err != nil {
		return nil, err
	}
	m := req.Msg
	if cur := c.registry[m.GetNodeId()]; cur != nil && cur.GetIncarnationId() == m.GetIncarnationId() {
		return connect.NewResponse(&controllerv1.RegisterNodeResponse{NodeEpoch: cur.GetNodeEpoch(), HeartbeatIntervalMs: heartbeatIntervalMs, LeaseTtlMs: leaseTTLMs}), nil
	}
	c.nextEpoch++
	c.registry[m.GetNodeId()] = &controllerv1.NodeStatus{
		Node:      &commonv1.Node{NodeId: m.GetNodeId(), Address: m.GetAddress(), Rack: m.GetRack()},
		NodeEpoch: c.nextEpoch, IncarnationId: m.GetIncarnationId(), State: controllerv1.NodeState_NODE_STATE_ALIVE,
	}
	c.bumpLocked()
	return connect.NewResponse(&controllerv1.RegisterNodeResponse{NodeEpoch: c.nextEpoch, HeartbeatIntervalMs: heartbeatIntervalMs, LeaseTtlMs: leaseTTLMs}), nil
}

func (h *controller) Heartbeat(_ context.Context, req *connect.Request[controllerv1.HeartbeatRequest]) (*connect.Response[controllerv1.HeartbeatResponse], error) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["Heartbeat"]++
	if err := c.faultLocked(0, "Heartbeat", "", -1, false); err != nil {
		return nil, err
	}
	n := c.registry[req.Msg.GetNodeId()]
	if n == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("unknown node"))
	}
	if n.GetNodeEpoch() != req.Msg.GetNodeEpoch() {
		return nil, connect.NewError(connect.CodeAborted, errors.New("stale node epoch"))
	}
	return connect.NewResponse(&controllerv1.HeartbeatResponse{LeaseTtlMs: leaseTTLMs}), nil
}

// watchStateLocked renders the whole metadata: every topic and node.
func (c *Cluster) watchStateLocked() *controllerv1.MetadataSnapshot {
	snap := &controllerv1.MetadataSnapshot{ClusterId: "fake", Security: c.security}
	for _, name := range slices.Sorted(maps.Keys(c.topics)) {
		snap.Topics = append(snap.Topics, c.topics[name].metadata())
	}
	for _, id := range slices.Sorted(maps.Keys(c.registry)) {
		snap.Nodes = append(snap.Nodes, proto.Clone(c.registry[id]).(*controllerv1.NodeStatus))
	}
	return snap
}

// WatchMetadata sends a snapshot, whatever from_version asks, then on
// every change a delta that carries every topic and node whole (which a
// delta may do: its elements replace the client's copy), the security
// state once SetSecurity has set one, and names the topics and nodes gone
// since the last message.
func (h *controller) WatchMetadata(ctx context.Context, _ *connect.Request[controllerv1.WatchMetadataRequest], stream *connect.ServerStream[controllerv1.WatchMetadataResponse]) error {
	c := h.c
	c.mu.Lock()
	c.calls["WatchMetadata"]++
	if err := c.faultLocked(0, "WatchMetadata", "", -1, false); err != nil {
		c.mu.Unlock()
		return err
	}
	snap, version, moved := c.watchStateLocked(), c.version, c.metaMoved
	c.mu.Unlock()
	if err := stream.Send(&controllerv1.WatchMetadataResponse{Version: version, Change: &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: snap}}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-moved:
		}
		c.mu.Lock()
		next := c.watchStateLocked()
		version, moved = c.version, c.metaMoved
		c.mu.Unlock()
		d := &controllerv1.MetadataDelta{Topics: next.GetTopics(), Nodes: next.GetNodes(), Security: next.GetSecurity()}
		for _, t := range snap.GetTopics() {
			if !slices.ContainsFunc(next.GetTopics(), func(n *commonv1.TopicMetadata) bool { return n.GetTopicId() == t.GetTopicId() }) {
				d.DeletedTopics = append(d.DeletedTopics, &controllerv1.DeletedTopic{Name: t.GetName(), TopicId: t.GetTopicId()})
			}
		}
		for _, n := range snap.GetNodes() {
			if !slices.ContainsFunc(next.GetNodes(), func(m *controllerv1.NodeStatus) bool { return m.GetNode().GetNodeId() == n.GetNode().GetNodeId() }) {
				d.RemovedNodeIds = append(d.RemovedNodeIds, n.GetNode().GetNodeId())
			}
		}
		snap = next
		if err := stream.Send(&controllerv1.WatchMetadataResponse{Version: version, Change: &controllerv1.WatchMetadataResponse_Delta{Delta: d}}); err != nil {
			return err
		}
	}
}

// AlterPartition applies a leader's ISR change with the controller's
// checks: the sender's node epoch, its leadership, the leader and
// partition epochs, and that every member of the new ISR is a replica and
// every added one is named at its current node epoch (KIP-903).
func (h *controller) AlterPartition(_ context.Context, req *connect.Request[controllerv1.AlterPartitionRequest]) (*connect.Response[controllerv1.AlterPartitionResponse], error) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["AlterPartition"]++
	if err := c.faultLocked(0, "AlterPartition", "", -1, false); err != nil {
		return nil, err
	}
	m := req.Msg
	if n := c.registry[m.GetNodeId()]; n == nil || n.GetNodeEpoch() != m.GetNodeEpoch() {
		return nil, connect.NewError(connect.CodeAborted, errors.New("stale node epoch"))
	}
	out := &controllerv1.AlterPartitionResponse{}
	changed := false
	for _, it := range m.GetPartitions() {
		res := &controllerv1.AlterPartitionResult{Topic: it.GetTopic(), Partition: it.GetPartition()}
		out.Partitions = append(out.Partitions, res)
		part := c.partLocked(it.GetTopic(), it.GetPartition())
		fail := func(code commonv1.Code, reason commonv1.Reason, msg string) {
			res.Error = &commonv1.ErrorDetail{Code: code, Reason: reason, Message: msg}
		}
		if part == nil {
			fail(commonv1.Code_CODE_NOT_FOUND, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "unknown partition")
			continue
		}
		p := part.md
		switch {
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
			for _, id := range it.GetNewIsr() {
				if slices.Contains(p.GetIsr(), id) {
					continue
				}
				var e int64
				for _, mem := range it.GetNewIsrMembers() {
					if mem.GetNodeId() == id {
						e = mem.GetNodeEpoch()
					}
				}
				if n := c.registry[id]; n == nil || n.GetNodeEpoch() != e {
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
		res.State = proto.Clone(p).(*commonv1.PartitionMetadata)
	}
	if changed {
		c.bumpLocked()
	}
	return connect.NewResponse(out), nil
}
