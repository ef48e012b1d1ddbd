package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/vfs"
)

// testCluster is a fake controller (lib/fakecluster with no fake nodes)
// and real storage nodes on loopback.
type testCluster struct {
	t       testing.TB
	ctrl    *fakecluster.Cluster
	ctrlURL string
	lag     time.Duration
	client  *http.Client
	// wrap, when set, wraps each node's handler (to watch its requests).
	wrap func(id int32, h http.Handler) http.Handler
	// fs, when set, is each node's filesystem (Config.FS).
	fs func(id int32) vfs.FS
	// requireAuth gives each node a guard that enforces, as
	// --require-auth does (security_test.go).
	requireAuth bool
	// walkEvery is the nodes' ReplicaWalkEvery (0: the default).
	walkEvery time.Duration

	mu          sync.Mutex
	logFailures []string // "node N: topic-partition", from Config.OnLogFailure
	nodes       map[int32]*testNode
	dirs        map[int32]string
}

type testNode struct {
	node *Node
	srv  *serve.Server
	url  string
}

func newCluster(t *testing.T, n int, lag time.Duration) *testCluster {
	t.Helper()
	return newWrappedCluster(t, n, lag, nil)
}

// newWrappedCluster is newCluster with each node's handler wrapped.
func newWrappedCluster(t *testing.T, n int, lag time.Duration, wrap func(id int32, h http.Handler) http.Handler) *testCluster {
	t.Helper()
	return newClusterWith(t, n, lag, wrap, nil)
}

// newClusterWith is newCluster with each node's handler wrapped and its
// filesystem chosen; nil leaves either as it is.
func newClusterWith(t *testing.T, n int, lag time.Duration, wrap func(id int32, h http.Handler) http.Handler, fs func(id int32) vfs.FS) *testCluster {
	t.Helper()
	return newClusterOf(t, n, lag, &testCluster{wrap: wrap, fs: fs})
}

// newClusterOf starts the cluster c's options (wrap, fs, requireAuth)
// describe.
func newClusterOf(t testing.TB, n int, lag time.Duration, c *testCluster) *testCluster {
	t.Helper()
	c.t, c.ctrl, c.lag, c.client = t, fakecluster.New(0), lag, serve.NewHTTPClient()
	c.nodes, c.dirs = map[int32]*testNode{}, map[int32]string{}
	for id := int32(1); id <= int32(n); id++ {
		c.dirs[id] = t.TempDir() // before the cleanup below, so removed after it
	}
	t.Cleanup(c.ctrl.Close)
	mux := http.NewServeMux()
	mux.Handle(c.ctrl.ControllerHandler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serve.StartServer(ln, mux)
	c.ctrlURL = srv.URL()
	t.Cleanup(func() {
		c.mu.Lock()
		ids := make([]int32, 0, len(c.nodes))
		for id := range c.nodes {
			ids = append(ids, id)
		}
		c.mu.Unlock()
		for _, id := range ids {
			c.stop(id)
		}
		srv.Close()
	})
	for id := int32(1); id <= int32(n); id++ {
		c.start(id)
	}
	return c
}

func (c *testCluster) start(id int32) {
	c.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(&testWriter{c.t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	var fs vfs.FS
	if c.fs != nil {
		fs = c.fs(id)
	}
	var g *guard.Guard
	if c.requireAuth {
		if g, err = guard.New(context.Background(), guard.Config{RequireAuth: true, Logger: logger}); err != nil {
			c.t.Fatal(err)
		}
	}
	node, err := Start(context.Background(), Config{
		NodeID: id, Advertise: url, DataDir: c.dirs[id], Controllers: []string{c.ctrlURL},
		ReplicaLagTime: c.lag, ISRCheckInterval: 50 * time.Millisecond, ReplicaMaxWait: 200 * time.Millisecond,
		ReplicaWalkEvery: c.walkEvery, HTTPClient: c.client, Logger: logger, FS: fs, Guard: g,
		OnLogFailure: func(topic string, partition int32, err error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.logFailures = append(c.logFailures, fmt.Sprintf("node %d: %s-%d", id, topic, partition))
		},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(node.Handler())
	var h http.Handler = mux
	if c.wrap != nil {
		h = c.wrap(id, mux)
	}
	c.mu.Lock()
	c.nodes[id] = &testNode{node: node, srv: serve.StartServer(ln, h), url: url}
	c.mu.Unlock()
}

func (c *testCluster) stop(id int32) {
	c.mu.Lock()
	n := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	if n == nil {
		return
	}
	n.srv.Close()
	if err := n.node.Close(); err != nil {
		c.t.Errorf("close node %d: %v", id, err)
	}
}

func (c *testCluster) node(id int32) *testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

func (c *testCluster) storage(id int32) storagev1connect.StorageServiceClient {
	return storagev1connect.NewStorageServiceClient(c.client, c.node(id).url)
}

type testWriter struct{ t testing.TB }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// createTopic creates a one-partition topic led by node 1 over nodes 1..rf.
func (c *testCluster) createTopic(name string, rf int, minISR int) {
	var replicas []int32
	for id := int32(1); id <= int32(rf); id++ {
		replicas = append(replicas, id)
	}
	c.ctrl.SetTopic(&commonv1.TopicMetadata{
		Name: name, TopicId: name + "-id",
		Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: 1, LeaderEpoch: 1, PartitionEpoch: 1,
			Replicas: replicas, Isr: slices.Clone(replicas)}},
		Configs: map[string]string{"min.insync.replicas": fmt.Sprint(minISR), "segment.bytes": "1048576"},
	})
	// Wait until every replica knows its role.
	c.eventually(fmt.Sprintf("topic %s hosted", name), func() bool {
		for _, id := range replicas {
			n := c.node(id)
			if n == nil {
				continue
			}
			r := n.node.replica(name, 0)
			if r == nil || r.View().State.LeaderEpoch != 1 {
				return false
			}
		}
		return true
	})
}

// eventually waits for cond with a deadline sized for a loaded machine;
// these conditions take milliseconds to a few lag times when idle.
func (c *testCluster) eventually(what string, cond func() bool) {
	c.t.Helper()
	testwait.Until(c.t, 30*time.Second, what, func() error { return testwait.True(cond()) })
}

func batch(t *testing.T, values ...string) []byte {
	t.Helper()
	var recs []recordbatch.Record
	for _, v := range values {
		recs = append(recs, recordbatch.Record{Value: []byte(v), Timestamp: time.Now().UnixMilli()})
	}
	b, err := recordbatch.Build(recordbatch.BuildOptions{}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func produce(c storagev1connect.StorageServiceClient, topic string, acks commonv1.Acks, epoch int32, records []byte, timeout time.Duration) (*storagev1.ProduceResponse, error) {
	resp, err := c.Produce(context.Background(), connect.NewRequest(&storagev1.ProduceRequest{
		Topic: topic, Acks: acks, LeaderEpoch: epoch, Records: records, TimeoutMs: int32(timeout / time.Millisecond),
	}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func fetch(t *testing.T, c storagev1connect.StorageServiceClient, topic string, offset int64, wait time.Duration) *storagev1.FetchPartitionResult {
	t.Helper()
	resp, err := c.Fetch(context.Background(), connect.NewRequest(&storagev1.FetchRequest{
		Partitions: []*storagev1.FetchPartition{{Topic: topic, FetchOffset: offset, CurrentLeaderEpoch: -1}},
		MaxWaitMs:  int32(wait / time.Millisecond), MinBytes: 1,
	}))
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	return resp.Msg.GetPartitions()[0]
}

func values(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	it := recordbatch.NewIter(b, true)
	for {
		_, raw, ok := it.Next()
		if !ok {
			break
		}
		dec, err := recordbatch.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range dec.Records {
			out = append(out, string(r.Value))
		}
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	return out
}

func reason(err error) commonv1.Reason {
	return apierr.ReasonOf(err)
}

func isr(c *testCluster, topic string) []int32 {
	s := slices.Clone(c.ctrl.Partition(topic, 0).GetIsr())
	slices.Sort(s)
	return s
}

// logBytes reads a replica's whole log (below its log end offset).
func logBytes(t *testing.T, n *Node, topic string) []byte {
	t.Helper()
	r := n.replica(topic, 0)
	var out []byte
	for off := r.Log().LogStartOffset(); off < r.Log().LogEndOffset(); {
		rr, err := r.Log().Read(off, 1<<20, r.Log().LogEndOffset())
		if err != nil {
			t.Fatal(err)
		}
		if len(rr.Batches) == 0 {
			break
		}
		out = append(out, rr.Batches...)
		off = rr.NextOffset
	}
	return out
}
