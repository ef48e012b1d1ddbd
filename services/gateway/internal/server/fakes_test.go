package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/guard"
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
	listing      *controllerv1.ListTopicsResponse
	// adminCalls are the requests of the user, ACL and quota calls in
	// order, and adminCallers who made each (the principal its guard saw,
	// "" behind none).
	adminCalls   []proto.Message
	adminCallers []string
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

func (f *fakeController) ListTopics(_ context.Context, req *connect.Request[controllerv1.ListTopicsRequest]) (*connect.Response[controllerv1.ListTopicsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(f.listing), nil
}

// recordAdmin notes an admin call and who made it.
func (f *fakeController) recordAdmin(ctx context.Context, m proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.adminCalls = append(f.adminCalls, m)
	caller := ""
	if p := guard.Principal(ctx); !p.IsZero() {
		caller = p.String()
	}
	if info, ok := guard.Info(ctx); ok && !info.Via.IsZero() {
		caller += " via " + info.Via.String()
	}
	f.adminCallers = append(f.adminCallers, caller)
}

// admin returns the admin calls so far and their callers.
func (f *fakeController) admin() ([]proto.Message, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.adminCalls), slices.Clone(f.adminCallers)
}

// The security admin calls answer canned values derived from the request,
// so a test can tell that both directions crossed the gateway.

func (f *fakeController) CreateUser(ctx context.Context, req *connect.Request[controllerv1.CreateUserRequest]) (*connect.Response[controllerv1.CreateUserResponse], error) {
	f.recordAdmin(ctx, req.Msg)
	return connect.NewResponse(&controllerv1.CreateUserResponse{
		User: &commonv1.UserCredential{Name: req.Msg.GetName(), CreatedMs: 7}, Token: "token-of-" + req.Msg.GetName(),
	}), nil
}

func (f *fakeController) DeleteUser(ctx context.Context, req *connect.Request[controllerv1.DeleteUserRequest]) (*connect.Response[controllerv1.DeleteUserResponse], error) {
	f.recordAdmin(ctx, req.Msg)
	return connect.NewResponse(&controllerv1.DeleteUserResponse{}), nil
}

func (f *fakeController) ListUsers(ctx context.Context, req *connect.Request[controllerv1.ListUsersRequest]) (*connect.Response[controllerv1.ListUsersResponse], error) {
	f.recordAdmin(ctx, req.Msg)
	return connect.NewResponse(&controllerv1.ListUsersResponse{Users: []*commonv1.UserCredential{{Name: "alice", CreatedMs: 3}}}), nil
}

func (f *fakeController) CreateAcls(ctx context.Context, req *connect.Request[controllerv1.CreateAclsRequest]) (*connect.Response[controllerv1.CreateAclsResponse], error) {
	f.recordAdmin(ctx, req.Msg)
	return connect.NewResponse(&controllerv1.CreateAclsResponse{}), nil
}

func (f *fakeController) DeleteAcls(ctx context.Context, req *connect.Request[controllerv1.DeleteAclsRequest]) (*connect.Response[controllerv1.DeleteAclsResponse], error) {
	f.recordAdmin(ctx, req.Msg)
	return connect.NewResponse(&controllerv1.DeleteAclsResponse{Deleted: []*commonv1.AclBinding{{Principal: req.Msg.GetFilter().GetPrincipal()}}}), nil
}

func (f *fakeController) DescribeAcls(ctx context.Context, req *connect.Request[controllerv1.DescribeAclsRequest]) (*connect.Response[controllerv1.DescribeAclsResponse], error) {
	f.recordAdmin(ctx, req.Msg)
	return connect.NewResponse(&controllerv1.DescribeAclsResponse{Acls: []*commonv1.AclBinding{{Principal: req.Msg.GetFilter().GetPrincipal()}}}), nil
}

func (f *fakeController) SetQuota(ctx context.Context, req *connect.Request[controllerv1.SetQuotaRequest]) (*connect.Response[controllerv1.SetQuotaResponse], error) {
	f.recordAdmin(ctx, req.Msg)
	return connect.NewResponse(&controllerv1.SetQuotaResponse{}), nil
}

func (f *fakeController) ListQuotas(ctx context.Context, req *connect.Request[controllerv1.ListQuotasRequest]) (*connect.Response[controllerv1.ListQuotasResponse], error) {
	f.recordAdmin(ctx, req.Msg)
	return connect.NewResponse(&controllerv1.ListQuotasResponse{Quotas: []*commonv1.Quota{{Principal: "User:alice", ProduceBytesPerSecond: 1000}}}), nil
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

// fakeCluster is lib/fakecluster's storage nodes (ids 1..n) for the
// gateway under test. The gateway watches a scripted fakeController, not
// the cluster's own, so a test decides what metadata the gateway sees and
// when; snapshot renders the cluster's state for a script.
type fakeCluster struct {
	*fakecluster.Cluster
}

func newFakeCluster(t *testing.T, nodes int) *fakeCluster {
	c := fakecluster.New(nodes)
	t.Cleanup(c.Close)
	return &fakeCluster{c}
}

// setLeader makes node the only replica and leader of k at epoch, creating
// the topic (id "id-<topic>") and any partitions below k.partition as
// needed. The gateway hears of it only through a script.
func (c *fakeCluster) setLeader(k tp, node, epoch int32) {
	tm := &commonv1.TopicMetadata{Name: k.topic, TopicId: "id-" + k.topic, Configs: map[string]string{"compression.type": "producer"}}
	for _, t := range c.Snapshot().GetSnapshot().GetTopics() {
		if t.GetName() == k.topic {
			tm = t
		}
	}
	for p := int32(len(tm.Partitions)); p <= k.partition; p++ {
		tm.Partitions = append(tm.Partitions, &commonv1.PartitionMetadata{Partition: p})
	}
	p := tm.Partitions[k.partition]
	p.LeaderId, p.LeaderEpoch, p.Replicas, p.Isr = node, epoch, []int32{node}, []int32{node}
	c.SetTopic(tm)
}

// snapshot builds a snapshot message at version of the named topics as
// the cluster has them, over every node.
func (c *fakeCluster) snapshot(version int64, topics map[string]int32) *controllerv1.WatchMetadataResponse {
	msg := c.Snapshot()
	msg.Version = version
	s := msg.GetSnapshot()
	s.ClusterId, s.Controllers = "cluster-1", &controllerv1.ControllerQuorum{ActiveControllerId: "1"}
	s.Topics = slices.DeleteFunc(s.Topics, func(t *commonv1.TopicMetadata) bool {
		_, ok := topics[t.GetName()]
		return !ok
	})
	return msg
}

// accepted lists the Produce calls the nodes appended.
func (c *fakeCluster) accepted() []fakecluster.ProduceCall {
	return slices.DeleteFunc(c.Produced(), func(p fakecluster.ProduceCall) bool { return p.Err != nil })
}

// refused lists the nodes that answered a Produce NOT_LEADER, in order.
func (c *fakeCluster) refused() []int32 {
	var ids []int32
	for _, p := range c.Produced() {
		if p.Err != nil && apierr.DetailOf(p.Err).GetReason() == commonv1.Reason_REASON_NOT_LEADER {
			ids = append(ids, p.Node)
		}
	}
	return ids
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
	t.Cleanup(func() { g.Close() })
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
