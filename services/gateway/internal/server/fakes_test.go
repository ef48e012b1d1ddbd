package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/testwait"
)

// serveOn serves h on a loopback port for the test's lifetime and returns
// its base URL.
func serveOn(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serve.StartServer(ln, h)
	t.Cleanup(func() { srv.Close() })
	return srv.URL()
}

// deadURL is a loopback URL nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// streamScript is what one WatchMetadata connection does: send messages,
// then return (ending the stream) with its error.
type streamScript func(ctx context.Context, send func(*controllerv1.WatchMetadataResponse) error) error

// fakeController is an in-process ControllerService. Each WatchMetadata
// connection runs the next script from scripts (or blocks until the client
// goes away when none is queued).
type fakeController struct {
	controllerv1connect.UnimplementedControllerServiceHandler

	scripts chan streamScript

	mu           sync.Mutex
	watchCalls   []*controllerv1.WatchMetadataRequest
	allocCalls   int
	nextPID      int64
	createErr    error
	describe     *controllerv1.DescribeTopicsResponse
	lastCreate   *controllerv1.CreateTopicRequest
	describeResp *controllerv1.DescribeClusterResponse
}

func newFakeController() *fakeController {
	return &fakeController{scripts: make(chan streamScript, 16), nextPID: 1000}
}

func (f *fakeController) start(t *testing.T) string {
	mux := http.NewServeMux()
	mux.Handle(controllerv1connect.NewControllerServiceHandler(f))
	return serveOn(t, mux)
}

func (f *fakeController) WatchMetadata(ctx context.Context, req *connect.Request[controllerv1.WatchMetadataRequest], stream *connect.ServerStream[controllerv1.WatchMetadataResponse]) error {
	f.mu.Lock()
	f.watchCalls = append(f.watchCalls, req.Msg)
	f.mu.Unlock()
	select {
	case s := <-f.scripts:
		return s(ctx, stream.Send)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeController) watchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchCalls)
}

func (f *fakeController) CreateTopic(_ context.Context, req *connect.Request[controllerv1.CreateTopicRequest]) (*connect.Response[controllerv1.CreateTopicResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastCreate = req.Msg
	if f.createErr != nil {
		return nil, f.createErr
	}
	return connect.NewResponse(&controllerv1.CreateTopicResponse{Topic: &controllerv1.TopicDescription{Name: req.Msg.GetName(), TopicId: "id-" + req.Msg.GetName()}}), nil
}

func (f *fakeController) DescribeTopics(context.Context, *connect.Request[controllerv1.DescribeTopicsRequest]) (*connect.Response[controllerv1.DescribeTopicsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(f.describe), nil
}

func (f *fakeController) DescribeCluster(context.Context, *connect.Request[controllerv1.DescribeClusterRequest]) (*connect.Response[controllerv1.DescribeClusterResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.describeResp == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no active controller"))
	}
	return connect.NewResponse(f.describeResp), nil
}

func (f *fakeController) AllocateProducerIds(_ context.Context, req *connect.Request[controllerv1.AllocateProducerIdsRequest]) (*connect.Response[controllerv1.AllocateProducerIdsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allocCalls++
	first := f.nextPID
	f.nextPID += int64(req.Msg.GetCount()) + 7 // blocks need not be adjacent
	return connect.NewResponse(&controllerv1.AllocateProducerIdsResponse{FirstProducerId: first, Count: req.Msg.GetCount()}), nil
}

// tp is a topic-partition key.
type tp struct {
	topic     string
	partition int32
}

// produced is one Produce a fake storage node accepted.
type produced struct {
	node    int32
	tp      tp
	records int
	acks    commonv1.Acks
	epoch   int32
}

// fakeCluster is the shared state of fake storage nodes: who leads what,
// and one in-memory log per partition.
type fakeCluster struct {
	mu       sync.Mutex
	leaders  map[tp]int32
	epochs   map[tp]int32
	addrs    map[int32]string
	logs     map[tp][][]byte // batches, base offsets stamped
	next     map[tp]int64
	accepted []produced
	refused  []int32 // node ids that answered NOT_LEADER, in order
	noHint   bool    // NOT_LEADER answers carry no leader hint
	// unknown is how many more Produce calls are answered
	// UNKNOWN_TOPIC_OR_PARTITION, as a leader that has not yet created a
	// new topic's replica answers.
	unknown int
}

func newFakeCluster() *fakeCluster {
	return &fakeCluster{
		leaders: map[tp]int32{}, epochs: map[tp]int32{}, addrs: map[int32]string{},
		logs: map[tp][][]byte{}, next: map[tp]int64{},
	}
}

// startNode serves a fake storage node with the given id and returns its URL.
func (c *fakeCluster) startNode(t *testing.T, id int32) string {
	mux := http.NewServeMux()
	mux.Handle(storagev1connect.NewStorageServiceHandler(&fakeStorage{c: c, id: id}))
	u := serveOn(t, mux)
	c.mu.Lock()
	c.addrs[id] = u
	c.mu.Unlock()
	return u
}

func (c *fakeCluster) setLeader(k tp, node, epoch int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaders[k], c.epochs[k] = node, epoch
}

type fakeStorage struct {
	storagev1connect.UnimplementedStorageServiceHandler
	c  *fakeCluster
	id int32
}

// notLeader is the storage node's NOT_LEADER answer; call with c.mu held.
func (s *fakeStorage) notLeader(k tp) *connect.Error {
	s.c.refused = append(s.c.refused, s.id)
	msg := fmt.Sprintf("node %d is not the leader of %s-%d", s.id, k.topic, k.partition)
	ed := &commonv1.ErrorDetail{Code: commonv1.Code_CODE_FAILED_PRECONDITION, Reason: commonv1.Reason_REASON_NOT_LEADER, Message: msg}
	if !s.c.noHint {
		leaderID := s.c.leaders[k]
		ed.Hint = &commonv1.ErrorDetail_Leader{Leader: &commonv1.LeaderHint{
			TopicPartition: &commonv1.TopicPartition{Topic: k.topic, Partition: k.partition},
			LeaderId:       leaderID, LeaderAddress: s.c.addrs[leaderID], LeaderEpoch: s.c.epochs[k],
		}}
	}
	return apierr.Error(ed)
}

func (s *fakeStorage) Produce(_ context.Context, req *connect.Request[storagev1.ProduceRequest]) (*connect.Response[storagev1.ProduceResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	k := tp{req.Msg.GetTopic(), req.Msg.GetPartition()}
	if c.unknown > 0 {
		c.unknown--
		return nil, apierr.Error(&commonv1.ErrorDetail{Code: commonv1.Code_CODE_NOT_FOUND, Reason: commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION,
			Message: "unknown topic or partition on this node"})
	}
	if c.leaders[k] != s.id {
		return nil, s.notLeader(k)
	}
	h, err := recordbatch.Verify(req.Msg.GetRecords())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	b := append([]byte{}, req.Msg.GetRecords()...)
	base := c.next[k]
	recordbatch.SetBaseOffset(b, base)
	recordbatch.SetPartitionLeaderEpoch(b, c.epochs[k])
	c.logs[k] = append(c.logs[k], b)
	c.next[k] = base + int64(h.LastOffsetDelta) + 1
	c.accepted = append(c.accepted, produced{node: s.id, tp: k, records: int(h.RecordCount), acks: req.Msg.GetAcks(), epoch: req.Msg.GetLeaderEpoch()})
	off := base
	if req.Msg.GetAcks() == commonv1.Acks_ACKS_NONE {
		off = -1
	}
	return connect.NewResponse(&storagev1.ProduceResponse{BaseOffset: off, LogAppendTimeMs: -1}), nil
}

func (s *fakeStorage) Fetch(_ context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	out := &storagev1.FetchResponse{}
	for _, p := range req.Msg.GetPartitions() {
		k := tp{p.GetTopic(), p.GetPartition()}
		r := &storagev1.FetchPartitionResult{Topic: k.topic, Partition: k.partition, HighWatermark: c.next[k], LastStableOffset: c.next[k]}
		switch {
		case c.leaders[k] != s.id:
			r.Error = apierr.AsDetail(s.notLeader(k))
		case p.GetFetchOffset() > c.next[k]:
			r.Error = &commonv1.ErrorDetail{
				Code: commonv1.Code_CODE_OUT_OF_RANGE, Reason: commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE,
				Message: fmt.Sprintf("offset %d is outside [0, %d]", p.GetFetchOffset(), c.next[k]),
				Hint:    &commonv1.ErrorDetail_OffsetRange{OffsetRange: &commonv1.OffsetRangeHint{HighWatermark: c.next[k]}},
			}
		default:
			for _, b := range c.logs[k] {
				h, _ := recordbatch.ParseHeader(b)
				if h.NextOffset() > p.GetFetchOffset() {
					r.Records = append(r.Records, b...)
				}
			}
		}
		out.Partitions = append(out.Partitions, r)
	}
	return connect.NewResponse(out), nil
}

func (s *fakeStorage) ListOffsets(_ context.Context, req *connect.Request[storagev1.ListOffsetsRequest]) (*connect.Response[storagev1.ListOffsetsResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	out := &storagev1.ListOffsetsResponse{}
	for _, p := range req.Msg.GetPartitions() {
		k := tp{p.GetTopic(), p.GetPartition()}
		r := &storagev1.ListOffsetsPartitionResult{Topic: k.topic, Partition: k.partition, TimestampMs: -1, LeaderEpoch: -1}
		switch {
		case c.leaders[k] != s.id:
			r.Error = apierr.AsDetail(s.notLeader(k))
		case p.GetSpec() == storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST:
			r.Offset = 0
		default:
			r.Offset = c.next[k]
		}
		out.Partitions = append(out.Partitions, r)
	}
	return connect.NewResponse(out), nil
}

// snapshot builds a snapshot message of topics (name → partition count)
// whose partitions are led as c says, over c's nodes.
func (c *fakeCluster) snapshot(version int64, topics map[string]int32) *controllerv1.WatchMetadataResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &controllerv1.MetadataSnapshot{ClusterId: "cluster-1", Controllers: &controllerv1.ControllerQuorum{ActiveControllerId: "1"}}
	for name, n := range topics {
		t := &commonv1.TopicMetadata{Name: name, TopicId: "id-" + name, Configs: map[string]string{"compression.type": "producer"}}
		for p := range n {
			k := tp{name, p}
			t.Partitions = append(t.Partitions, &commonv1.PartitionMetadata{
				Partition: p, LeaderId: c.leaders[k], LeaderEpoch: c.epochs[k],
				Replicas: []int32{c.leaders[k]}, Isr: []int32{c.leaders[k]},
			})
		}
		s.Topics = append(s.Topics, t)
	}
	for id, addr := range c.addrs {
		s.Nodes = append(s.Nodes, &controllerv1.NodeStatus{
			Node: &commonv1.Node{NodeId: id, Address: addr}, State: controllerv1.NodeState_NODE_STATE_ALIVE,
		})
	}
	return &controllerv1.WatchMetadataResponse{Version: version, Change: &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: s}}
}

// sendThenHold is a script that sends msgs and keeps the stream open until
// the client goes away or release is closed.
func sendThenHold(release <-chan struct{}, msgs ...*controllerv1.WatchMetadataResponse) streamScript {
	return func(ctx context.Context, send func(*controllerv1.WatchMetadataResponse) error) error {
		for _, m := range msgs {
			if err := send(m); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-release:
			return connect.NewError(connect.CodeUnavailable, errors.New("controller lost etcd"))
		}
	}
}

// testGateway starts a gateway against the controllers and returns it with
// a client of its API.
func testGateway(t *testing.T, cfg *Config) (*Gateway, gatewayv1connect.GatewayServiceClient, string) {
	t.Helper()
	if cfg.ProducerIDBlockSize == 0 {
		cfg.ProducerIDBlockSize = DefaultProducerIDBlockSize
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	g, err := Start(context.Background(), cfg, Options{
		HTTPClient:      serve.NewHTTPClient(),
		WatchMinBackoff: 10 * time.Millisecond,
		WatchMaxBackoff: 50 * time.Millisecond,
		RetryBackoff:    5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	mux := http.NewServeMux()
	mux.Handle(g.Handler())
	u := serveOn(t, mux)
	return g, gatewayv1connect.NewGatewayServiceClient(serve.NewHTTPClient(), u), u
}

// waitFor polls cond until it holds; these take milliseconds when the
// machine is idle, the 30s deadline is for one that is not.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 30*time.Second, what, func() error { return testwait.True(cond()) })
}

func waitReady(t *testing.T, g *Gateway) {
	t.Helper()
	select {
	case <-g.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("gateway never got a metadata snapshot")
	}
}
