// Package fakecluster is an in-memory Strata cluster for client, CLI and
// service tests, in the spirit of franz-go's kfake: a GatewayService, a
// ControllerService and one StorageService per fake node, served over
// HTTP/2 cleartext on loopback, with a tiny log per partition and a fault
// API (MoveLeader, KillNode, AddFault with a budget, RemoveFault, Fired)
// to make leaders change and requests fail on demand. One state answers
// all three services, so the fencing rules live here once.
//
// What it models: topics with partitions, leaders, leader and partition
// epochs, replicas and ISR (with the fencing checks of the real storage
// service on Produce, Fetch and ListOffsets, and of the real controller on
// AlterPartition and Heartbeat), batches appended as given with base
// offset and leader epoch stamped, idempotent producer deduplication by
// producer id and sequence, long-poll fetch, ListOffsets, DescribeLog
// (with a pretend tier set by SetTiered), the admin pass-through calls of
// the gateway, node registration (RegisterNode: a new incarnation gets a
// new node epoch) and the WatchMetadata stream, so real storage nodes and
// gateways can run against it (New(0) for no fake nodes; SetTopic,
// UpdatePartition and UpdateTopicConfigs change metadata as the controller
// would), and killed nodes (KillNode, Fault.Kill: every connection reset,
// as a client sees a process killed with SIGKILL). What it does not: real
// replication (the high watermark is the log end offset), retention,
// persistence, leader election on its own, consumer groups (the
// coordinator calls answer UNAVAILABLE unless a test serves a coordinator
// of its own with SetCoordinator).
package fakecluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// Cluster is the fake. Its methods are safe for concurrent use.
type Cluster struct {
	gateway *httptest.Server
	nodes   []*httptest.Server
	coord   *httptest.Server // nil until SetCoordinator

	ctrl *httptest.Server

	mu        sync.Mutex
	topics    map[string]*topic
	version   int64
	nextPID   int64
	nextID    int
	faults    []*Fault
	changed   chan struct{}                      // closed and replaced on every append and metadata change
	metaMoved chan struct{}                      // closed and replaced on every metadata change (version bump)
	registry  map[int32]*controllerv1.NodeStatus // registered nodes by id: the fake ones and any that called RegisterNode
	nextEpoch int64                              // last node epoch handed out by RegisterNode
	alters    int                                // accepted AlterPartition items
	produced  []ProduceCall                      // every Produce answered, see Produced
	held      int                                // batches held ahead of their sequence, see Held
	security  *commonv1.SecurityState            // users, ACLs and quotas the metadata stream carries; nil until SetSecurity
	calls     map[string]int

	connMu sync.Mutex
	conns  []map[net.Conn]struct{} // open connections per node (index id-1)
	killed []bool                  // per node: connections are reset
}

type topic struct {
	name     string
	id       string
	replicas int32
	configs  map[string]string
	parts    []*partition
}

type partition struct {
	// md is the controller's record: leader, leader and partition epochs,
	// replicas, ISR. Changed in place under Cluster.mu; only clones leave.
	md      *commonv1.PartitionMetadata
	batches [][]byte // stamped, in offset order
	bases   []int64  // base offset of each batch
	next    int64    // log end offset (= high watermark here)
	start   int64
	tier    tierExtent // what DescribeLog reports as tiered; see SetTiered
	// idempotence: per producer id, recent batches by base sequence
	producers map[int64]*producerState
}

// tierExtent is a partition's pretend tiered storage: records below
// localStart are "in the tier" up to end, holding size bytes.
type tierExtent struct {
	set             bool
	localStart, end int64
	size            int64
}

// SetTiered makes DescribeLog report a partition as tiered: its local log
// starting at localStart and the tier holding offsets up to tieredEnd in
// tieredBytes bytes. Fetch and ListOffsets are unchanged (the log start
// stays where it was, as with real tiering).
func (c *Cluster) SetTiered(topicName string, part int32, localStart, tieredEnd, tieredBytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.topics[topicName].parts[part].tier = tierExtent{set: true, localStart: localStart, end: tieredEnd, size: tieredBytes}
}

// DeleteRecordsBefore moves a partition's log start offset up to offset
// (not past its end), as retention or a deletion of records does: fetches
// below it answer OFFSET_OUT_OF_RANGE from then on.
func (c *Cluster) DeleteRecordsBefore(topicName string, part int32, offset int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.topics[topicName].parts[part]
	p.start = max(p.start, min(offset, p.next))
}

// DeleteTopic deletes a topic, as the gateway's DeleteTopic does; a topic
// created again under the same name gets a new id.
func (c *Cluster) DeleteTopic(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.topics, name)
	c.bumpLocked()
}

type producerState struct {
	epoch   int16
	nextSeq int32
	recent  map[int32]int64 // base sequence → base offset
}

// New starts a cluster of n storage nodes (ids 1..n) and its gateway.
func New(n int) *Cluster {
	c := &Cluster{
		topics:    map[string]*topic{},
		version:   1,
		nextPID:   1000,
		changed:   make(chan struct{}),
		metaMoved: make(chan struct{}),
		registry:  map[int32]*controllerv1.NodeStatus{},
		nextEpoch: 100,
		calls:     map[string]int{},
	}
	c.conns = make([]map[net.Conn]struct{}, n)
	c.killed = make([]bool, n)
	for i := 1; i <= n; i++ {
		mux := http.NewServeMux()
		mux.Handle(storagev1connect.NewStorageServiceHandler(&storage{c: c, id: int32(i)}))
		c.conns[i-1] = map[net.Conn]struct{}{}
		c.nodes = append(c.nodes, start(mux, c.trackConn(i-1)))
		c.registry[int32(i)] = &controllerv1.NodeStatus{
			Node:      &commonv1.Node{NodeId: int32(i), Address: c.nodes[i-1].URL},
			NodeEpoch: 1, State: controllerv1.NodeState_NODE_STATE_ALIVE, LastHeartbeatMs: -1,
		}
	}
	mux := http.NewServeMux()
	mux.Handle(gatewayv1connect.NewGatewayServiceHandler(&gateway{c: c}))
	c.gateway = start(mux, nil)
	mux = http.NewServeMux()
	mux.Handle(c.ControllerHandler())
	c.ctrl = start(mux, nil)
	return c
}

// start serves h over h2c and HTTP/1.1 on a loopback port; connState, when
// set, sees every connection change state.
func start(h http.Handler, connState func(net.Conn, http.ConnState)) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	s.Config.Protocols = &protos
	s.Config.ConnState = connState
	s.Start()
	return s
}

// trackConn keeps node i's open connections, and resets a new one at once
// while the node is killed.
func (c *Cluster) trackConn(i int) func(net.Conn, http.ConnState) {
	return func(conn net.Conn, st http.ConnState) {
		c.connMu.Lock()
		defer c.connMu.Unlock()
		switch st {
		case http.StateNew:
			if c.killed[i] {
				reset(conn)
				return
			}
			c.conns[i][conn] = struct{}{}
		case http.StateClosed, http.StateHijacked:
			delete(c.conns[i], conn)
		}
	}
}

// reset closes a connection with a TCP RST, so the peer reads "connection
// reset by peer" as it does from a process killed with SIGKILL.
func reset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// KillNode makes node id behave as a process killed with SIGKILL: every
// open connection to it is reset, and so is every new one until
// RestartNode. Leadership does not move; use MoveLeader (or Fault.Kill,
// which does both).
func (c *Cluster) KillNode(id int32) {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	c.killed[id-1] = true
	for conn := range c.conns[id-1] {
		reset(conn)
		delete(c.conns[id-1], conn)
	}
}

// RestartNode lets a killed node accept connections again.
func (c *Cluster) RestartNode(id int32) {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	c.killed[id-1] = false
}

// Close stops every server.
func (c *Cluster) Close() {
	c.gateway.Close()
	c.ctrl.Close()
	for _, n := range c.nodes {
		n.Close()
	}
	c.mu.Lock()
	coord := c.coord
	c.mu.Unlock()
	if coord != nil {
		coord.Close()
	}
}

// SetCoordinator serves h, a CoordinatorService handler the test provides,
// as the coordinator of every group: FindCoordinator names it. Call it
// once, before the first group call.
func (c *Cluster) SetCoordinator(h http.Handler) {
	s := start(h, nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.coord = s
}

// GatewayURL is the base URL clients bootstrap from.
func (c *Cluster) GatewayURL() string { return c.gateway.URL }

// NodeURL is the base URL of storage node id.
func (c *Cluster) NodeURL(id int32) string { return c.nodes[id-1].URL }

// CreateTopic creates a topic with partitions led round-robin by the nodes.
func (c *Cluster) CreateTopic(name string, partitions, replicas int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.createLocked(name, partitions, replicas, nil)
	return err
}

func (c *Cluster) createLocked(name string, partitions, replicas int32, configs map[string]string) (*topic, error) {
	if _, ok := c.topics[name]; ok {
		return nil, errorf(connect.CodeAlreadyExists, commonv1.Reason_REASON_TOPIC_ALREADY_EXISTS, "topic %q already exists", name)
	}
	if partitions <= 0 {
		partitions = 1
	}
	if replicas <= 0 {
		replicas = 3
	}
	if int(replicas) > len(c.nodes) {
		return nil, errorf(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_REPLICATION_FACTOR,
			"replication factor %d is larger than the %d live nodes", replicas, len(c.nodes))
	}
	c.nextID++
	t := &topic{name: name, id: fmt.Sprintf("00000000-0000-4000-8000-%012d", c.nextID), replicas: replicas, configs: map[string]string{}}
	for k, v := range configs {
		t.configs[k] = v
	}
	n := int32(len(c.nodes))
	for i := range partitions {
		md := &commonv1.PartitionMetadata{Partition: i, LeaderId: i%n + 1}
		for r := range replicas {
			md.Replicas = append(md.Replicas, (i+r)%n+1)
		}
		md.Isr = slices.Clone(md.Replicas)
		t.parts = append(t.parts, &partition{md: md, producers: map[int64]*producerState{}})
	}
	c.topics[name] = t
	c.bumpLocked()
	return t, nil
}

// SetNodeListener makes node id advertise a listener, as a storage node
// advertises its Kafka listener (name "kafka", address "kafka://host:port"),
// replacing one of the same name, and bumps the metadata version.
func (c *Cluster) SetNodeListener(id int32, name, address string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.registry[id].GetNode()
	if n == nil {
		return
	}
	n.Listeners = slices.DeleteFunc(n.Listeners, func(l *commonv1.Listener) bool { return l.GetName() == name })
	n.Listeners = append(n.Listeners, &commonv1.Listener{Name: name, Address: address})
	c.bumpLocked()
}

// MoveLeader makes node the leader of a partition and bumps its leader
// epoch, as the controller does on a leader change. The old leader answers
// NOT_LEADER from then on.
func (c *Cluster) MoveLeader(topicName string, part, node int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.moveLeaderLocked(c.topics[topicName].parts[part], node)
}

func (c *Cluster) moveLeaderLocked(p *partition, node int32) {
	p.md.LeaderId = node
	p.md.LeaderEpoch++
	p.md.PartitionEpoch++
	c.bumpLocked()
}

// killLocked kills node id (KillNode) and moves the leadership of every
// partition it leads to the next node, as the controller would after the
// node's session expired. The fake log is shared, so whatever the killed
// leader appended is on the new leader too, as if replicated.
func (c *Cluster) killLocked(id int32) {
	c.KillNode(id)
	next := id%int32(len(c.nodes)) + 1
	for _, t := range c.topics {
		for _, p := range t.parts {
			if p.md.GetLeaderId() == id {
				c.moveLeaderLocked(p, next)
			}
		}
	}
}

// Leader returns the current leader and epoch of a partition.
func (c *Cluster) Leader(topicName string, part int32) (node, epoch int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.topics[topicName].parts[part]
	return p.md.GetLeaderId(), p.md.GetLeaderEpoch()
}

// Batches returns the headers of a partition's batches in offset order.
func (c *Cluster) Batches(topicName string, part int32) []recordbatch.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	var hs []recordbatch.Header
	for _, b := range c.topics[topicName].parts[part].batches {
		h, err := recordbatch.PeekHeader(b)
		if err == nil {
			hs = append(hs, h)
		}
	}
	return hs
}

// AppendRaw appends one batch to a partition's log as given, stamped with
// the next offset and the leader epoch and nothing checked, as a log
// written before leaders validated batches may hold one; it returns the
// batch's base offset.
func (c *Cluster) AppendRaw(topicName string, part int32, batch []byte) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.topics[topicName].parts[part]
	base := p.next
	p.batches = append(p.batches, stamp(batch, base, p.md.GetLeaderEpoch()))
	p.bases = append(p.bases, base)
	p.next += int64(binary.BigEndian.Uint32(batch[23:])) + 1 // lastOffsetDelta + 1
	c.notifyLocked()
	return base
}

// Records decodes a partition's records in offset order.
func (c *Cluster) Records(topicName string, part int32) ([]recordbatch.Record, error) {
	c.mu.Lock()
	bs := append([][]byte(nil), c.topics[topicName].parts[part].batches...)
	c.mu.Unlock()
	var out []recordbatch.Record
	for _, b := range bs {
		batch, err := recordbatch.Decode(b)
		if err != nil {
			return nil, err
		}
		out = append(out, batch.Records...)
	}
	return out, nil
}

// Calls returns how many times an RPC (by method name, "Produce") was served.
func (c *Cluster) Calls(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[method]
}

// Fault makes matching requests fail. Method is the RPC name ("Produce",
// "Fetch", "ListOffsets", "Metadata", "AlterPartition", ...); Node, Topic
// and Partition narrow it (Node 0, empty Topic and Partition -1 match any;
// a gateway or controller call has no topic or partition, so its fault
// needs Partition -1). It fires Count times (0 means
// forever) with Code and Reason. AfterAppend makes a Produce fault fire
// after the batch is appended: the client sees a failure but the data is
// in the log, which only idempotence can keep from being duplicated.
//
// Kill, instead of an error answer, kills the node serving the request at
// that point (see KillNode): the request's connection is reset and the
// node's partitions move to the next node with a new epoch. Before the
// append the batch is lost with the node; with AfterAppend it is in the
// log and only its answer is lost.
//
// Range, when set, is the OffsetRangeHint the error carries (with
// REASON_OFFSET_OUT_OF_RANGE), to make a leader report any range;
// NotEnoughReplicas likewise is the NotEnoughReplicasHint (with
// REASON_NOT_ENOUGH_REPLICAS), the ISR size and min.insync.replicas a
// leader reports when it refuses an acks=all produce.
type Fault struct {
	Method      string
	Node        int32
	Topic       string
	Partition   int32
	Code        connect.Code
	Reason      commonv1.Reason
	Count       int
	AfterAppend bool
	Kill        bool
	// Hang (Produce and ProducePartitions only), instead of an error
	// answer, holds the call until its caller gives up (the call's
	// context ends) or the fault is removed, when it fails with
	// UNAVAILABLE: the client never sees the answer, as when a leader's
	// replies are black-holed or delayed past the request timeout. With
	// AfterAppend the batch is in the log first, so only the answer is
	// lost; without, the request is lost too.
	Hang  bool
	Range *commonv1.OffsetRangeHint

	NotEnoughReplicas *commonv1.NotEnoughReplicasHint
	// Message, when set, is the refusal's message instead of "injected
	// fault: <reason>" (a server's one line, as a permission refusal
	// carries).
	Message string

	fired int
}

// AddFault installs a fault and returns it; see Fired.
func (c *Cluster) AddFault(f *Fault) *Fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = append(c.faults, f)
	return f
}

// RemoveFault lifts a fault: requests no longer match it. Fired still
// reports how often it fired.
func (c *Cluster) RemoveFault(f *Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = slices.DeleteFunc(c.faults, func(g *Fault) bool { return g == f })
	c.notifyLocked() // calls held by a Hang fault see it lifted
}

// Fired reports how often a fault has fired.
func (c *Cluster) Fired(f *Fault) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f.fired
}

// faultLocked returns the error of the first matching live fault, after
// killing storage node node (0 for the gateway) when the fault says so.
func (c *Cluster) faultLocked(node int32, method, topicName string, part int32, afterAppend bool) error {
	for _, f := range c.faults {
		if f.Method != method || f.AfterAppend != afterAppend || (f.Node != 0 && f.Node != node) ||
			(f.Topic != "" && f.Topic != topicName) || (f.Partition >= 0 && f.Partition != part) ||
			(f.Count > 0 && f.fired >= f.Count) {
			continue
		}
		f.fired++
		if f.Hang {
			return &hangError{f: f}
		}
		if f.Kill && node > 0 {
			c.killLocked(node)
			return errorf(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "injected fault: node %d killed", node)
		}
		if f.Range != nil {
			d := detail(f.Code, f.Reason, fmt.Sprintf("injected fault: %v", f.Reason))
			d.Hint = &commonv1.ErrorDetail_OffsetRange{OffsetRange: f.Range}
			return asError(d)
		}
		if f.NotEnoughReplicas != nil {
			d := detail(f.Code, f.Reason, fmt.Sprintf("injected fault: %v", f.Reason))
			d.Hint = &commonv1.ErrorDetail_NotEnoughReplicas{NotEnoughReplicas: proto.Clone(f.NotEnoughReplicas).(*commonv1.NotEnoughReplicasHint)}
			return asError(d)
		}
		if f.Message != "" {
			return asError(detail(f.Code, f.Reason, f.Message))
		}
		return errorf(f.Code, f.Reason, "injected fault: %v", f.Reason)
	}
	return nil
}

// hangError is what faultLocked returns for a Hang fault: the caller
// holds the call (holdLocked) instead of answering.
type hangError struct{ f *Fault }

func (e *hangError) Error() string { return "injected fault: answer held" }

// holdLocked holds a call a Hang fault matched until ctx ends or the fault
// is removed, with c.mu released meanwhile; it returns the error the
// caller then sees.
func (c *Cluster) holdLocked(ctx context.Context, f *Fault) error {
	for slices.Contains(c.faults, f) && ctx.Err() == nil {
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		}
		c.mu.Lock()
	}
	if err := ctx.Err(); err != nil {
		// As a real server answers: a passed deadline (the caller's, carried
		// in the call's timeout header) is DeadlineExceeded, anything else
		// Canceled.
		code := connect.CodeCanceled
		if errors.Is(err, context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		return connect.NewError(code, err)
	}
	return errorf(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "injected fault: answer lost")
}

// notifyLocked wakes long-polling fetches.
func (c *Cluster) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Snapshot is the cluster's metadata as the controller's WatchMetadata
// stream starts it: every topic and registered node at the current
// version. The caller may change it, to script a stream of its own.
func (c *Cluster) Snapshot() *controllerv1.WatchMetadataResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &controllerv1.WatchMetadataResponse{Version: c.version, Change: &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: c.watchStateLocked()}}
}

// bumpLocked records a metadata change: a new version, sent to every
// WatchMetadata stream, and waiting fetches woken to see it.
func (c *Cluster) bumpLocked() {
	c.version++
	close(c.metaMoved)
	c.metaMoved = make(chan struct{})
	c.notifyLocked()
}

// errorf builds a Connect error with an ErrorDetail, as the services do.
func errorf(code connect.Code, reason commonv1.Reason, format string, args ...any) *connect.Error {
	return apierr.Error(apierr.Detail(code, reason, format, args...))
}

func detail(code connect.Code, reason commonv1.Reason, msg string) *commonv1.ErrorDetail {
	return apierr.Detail(code, reason, "%s", msg)
}

// metadata renders a topic as the controller describes it: a copy the
// caller may keep.
func (t *topic) metadata() *commonv1.TopicMetadata {
	tm := &commonv1.TopicMetadata{Name: t.name, TopicId: t.id, Configs: maps.Clone(t.configs)}
	for _, p := range t.parts {
		tm.Partitions = append(tm.Partitions, proto.Clone(p.md).(*commonv1.PartitionMetadata))
	}
	return tm
}

func (t *topic) description() *controllerv1.TopicDescription {
	d := &controllerv1.TopicDescription{Name: t.name, TopicId: t.id, ReplicationFactor: t.replicas, Partitions: t.metadata().Partitions}
	keys := make([]string, 0, len(t.configs))
	for k := range t.configs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		d.Configs = append(d.Configs, &controllerv1.ConfigEntry{Key: k, Value: t.configs[k], Source: controllerv1.ConfigSource_CONFIG_SOURCE_TOPIC})
	}
	return d
}

// nodesLocked lists the registered nodes by id.
func (c *Cluster) nodesLocked() []*commonv1.Node {
	ids := slices.Sorted(maps.Keys(c.registry))
	ns := make([]*commonv1.Node, 0, len(ids))
	for _, id := range ids {
		ns = append(ns, proto.Clone(c.registry[id].GetNode()).(*commonv1.Node))
	}
	return ns
}

// addrLocked is the address node id registered with, or "".
func (c *Cluster) addrLocked(id int32) string {
	return c.registry[id].GetNode().GetAddress()
}

// deadLocked reports whether node id is registered and dead.
func (c *Cluster) deadLocked(id int32) bool {
	return c.registry[id].GetState() == controllerv1.NodeState_NODE_STATE_DEAD
}

// stamp writes the base offset and leader epoch into a batch copy.
func stamp(b []byte, base int64, epoch int32) []byte {
	out := append([]byte(nil), b...)
	binary.BigEndian.PutUint64(out[0:], uint64(base))
	binary.BigEndian.PutUint32(out[12:], uint32(epoch))
	return out
}

// ClosedGatewayURL returns a URL where nothing listens, for tests of an
// unreachable gateway.
func ClosedGatewayURL() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "http://127.0.0.1:1"
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}
