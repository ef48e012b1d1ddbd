package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/gen/strata/tiering/v1/tieringv1connect"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/testwait"
)

var (
	tieringBinOnce sync.Once
	tieringBin     string
	tieringBinErr  error
)

// buildTiering builds the strata-tiering binary once per test run. The
// storage module does not import the tiering module; the go.work workspace
// resolves it for `go build`.
func buildTiering(t *testing.T) string {
	t.Helper()
	tieringBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "strata-tiering-bin-")
		if err != nil {
			tieringBinErr = err
			return
		}
		tieringBin = filepath.Join(dir, "strata-tiering")
		out, err := exec.Command("go", "build", "-o", tieringBin, "github.com/strata-mq/strata/services/tiering/cmd/strata-tiering").CombinedOutput()
		if err != nil {
			tieringBinErr = fmt.Errorf("build strata-tiering: %v\n%s", err, out)
		}
	})
	if tieringBinErr != nil {
		t.Fatal(tieringBinErr)
	}
	return tieringBin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startTieringProcess runs strata-tiering as a real process serving the
// embedded S3 server, and returns its URL once it answers.
func startTieringProcess(t *testing.T, client *http.Client) string {
	t.Helper()
	return newTieringProcess(t, client).url
}

// tieringProcess is a strata-tiering process that a test can kill and
// start again on the same ports and bucket directory.
type tieringProcess struct {
	t      *testing.T
	client *http.Client
	argv   []string
	url    string

	mu     sync.Mutex
	logs   bytes.Buffer
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// newTieringProcess starts strata-tiering with the embedded S3 server and
// waits until it answers. It is killed when the test ends. Its ports are
// chosen free, and another process may take one before it binds: then it
// exits saying so and is started again on other ports.
func newTieringProcess(t *testing.T, client *http.Client) *tieringProcess {
	t.Helper()
	bin, dir := buildTiering(t), filepath.Join(t.TempDir(), "s3")
	p := &tieringProcess{t: t, client: client}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("strata-tiering log:\n%s", p.logs.String())
			p.mu.Unlock()
		}
	})
	for attempt := 1; ; attempt++ {
		api, s3 := freeAddr(t), freeAddr(t)
		p.url = "http://" + api
		p.argv = []string{bin, "--listen", api, "--embedded-s3-listen", s3,
			"--embedded-s3-dir", dir, "--log-format", "text", "--retention-interval", "1h"}
		if !p.tryStart() {
			return p
		}
		if attempt == 3 {
			t.Fatalf("strata-tiering: a port was taken before it could bind, %d times", attempt)
		}
	}
}

// start runs the process again on its ports and waits until it answers.
func (p *tieringProcess) start() {
	p.t.Helper()
	if p.tryStart() {
		p.t.Fatalf("strata-tiering: a port of %s was taken before it could start again", p.url)
	}
}

// tryStart runs the process and waits until GetTieredState answers; inUse
// reports that it exited because a port was taken.
func (p *tieringProcess) tryStart() (inUse bool) {
	p.t.Helper()
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Stderr = writerFunc(func(b []byte) (int, error) { p.mu.Lock(); defer p.mu.Unlock(); return p.logs.Write(b) })
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	tc := tieringv1connect.NewTieringServiceClient(p.client, p.url)
	testwait.Until(p.t, 60*time.Second, "strata-tiering to answer", func() error {
		select {
		case <-exited:
			return nil
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := tc.GetTieredState(ctx, connect.NewRequest(&tieringv1.GetTieredStateRequest{}))
		return err
	})
	select {
	case <-exited:
		p.mu.Lock()
		defer p.mu.Unlock()
		p.cmd = nil
		if strings.Contains(p.logs.String(), "address already in use") {
			return true
		}
		p.t.Fatalf("strata-tiering exited before it answered:\n%s", p.logs.String())
	default:
	}
	return false
}

// kill stops the process with SIGKILL and waits for it. Safe to call when
// it is not running.
func (p *tieringProcess) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// startTieredNode starts node id of cluster c with tiering enabled.
func startTieredNode(c *testCluster, id int32, tieringURL string) {
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
	c.mu.Lock()
	dir := c.dirs[id]
	c.mu.Unlock()
	node, err := Start(context.Background(), Config{
		NodeID: id, Advertise: url, DataDir: dir, Controllers: []string{c.ctrlURL},
		ReplicaLagTime: c.lag, ISRCheckInterval: 50 * time.Millisecond, ReplicaMaxWait: 200 * time.Millisecond,
		HTTPClient: c.client, Logger: logger, Tiering: tieringURL, TierInterval: 100 * time.Millisecond,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(node.Handler())
	c.mu.Lock()
	c.nodes[id] = &testNode{node: node, srv: serve.StartServer(ln, mux), url: url}
	c.mu.Unlock()
}

// readAll fetches a partition from offset 0 to the high watermark.
func readAll(t *testing.T, c *testCluster, id int32, topic string, hw int64) []byte {
	t.Helper()
	var out []byte
	for off := int64(0); off < hw; {
		res := fetch(t, c.storage(id), topic, off, 0)
		if res.GetError() != nil {
			t.Fatalf("fetch at %d: %v", off, res.GetError())
		}
		if len(res.GetRecords()) == 0 {
			t.Fatalf("fetch at %d returned nothing (hw %d)", off, hw)
		}
		out = append(out, res.GetRecords()...)
		off = lastOffset(t, res.GetRecords()) + 1
	}
	return out
}

func lastOffset(t *testing.T, b []byte) int64 {
	t.Helper()
	var last int64 = -1
	for len(b) > 0 {
		h, err := recordbatch.PeekHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		last, b = h.LastOffset(), b[h.Size():]
	}
	return last
}

// TestTieredReadsAfterLocalDeletion produces to a topic with small
// segments, turns tiering on with local.retention.ms=0, waits until every
// sealed segment is tiered and deleted from both replicas' disks, and reads
// the partition from offset 0 again: the bytes equal those read from local
// disk before.
func TestTieredReadsAfterLocalDeletion(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir()} // before the cluster, so removed after it stops
	c := newCluster(t, 0, 5*time.Second)
	c.dirs[1], c.dirs[2] = dirs[0], dirs[1]
	tieringURL := startTieringProcess(t, c.client)
	for id := int32(1); id <= 2; id++ {
		startTieredNode(c, id, tieringURL)
	}
	const topic = "tiered"
	configs := map[string]string{"min.insync.replicas": "1", "segment.bytes": "16384", "remote.storage.enable": "false", "local.retention.ms": "0"}
	meta := func() *commonv1.TopicMetadata {
		return &commonv1.TopicMetadata{
			Name: topic, TopicId: "6f1c7a52-3c1e-4a4e-9d55-0b8f9f4a1e01",
			Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: 1, LeaderEpoch: 1, PartitionEpoch: 1,
				Replicas: []int32{1, 2}, Isr: []int32{1, 2}}},
			Configs: maps(configs),
		}
	}
	c.ctrl.SetTopic(meta())
	c.eventually("replicas hosted", func() bool {
		for id := int32(1); id <= 2; id++ {
			if r := c.node(id).node.replica(topic, 0); r == nil || r.View().State.LeaderEpoch != 1 {
				return false
			}
		}
		return true
	})
	leader := c.storage(1)
	val := strings.Repeat("v", 900)
	for i := range 120 {
		if _, err := produce(leader, topic, commonv1.Acks_ACKS_ALL, -1, batch(t, fmt.Sprintf("%d-%s", i, val), fmt.Sprintf("%d-b", i)), 5*time.Second); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	r1 := c.node(1).node.replica(topic, 0)
	hw := r1.Log().HighWatermark()
	before := readAll(t, c, 1, topic, hw)
	if r1.Log().LogStartOffset() != 0 {
		t.Fatal("local data deleted before tiering was enabled")
	}

	configs["remote.storage.enable"] = "true"
	c.ctrl.SetTopic(meta())
	c.eventually("sealed segments tiered and deleted locally on both replicas", func() bool {
		for id := int32(1); id <= 2; id++ {
			r := c.node(id).node.replica(topic, 0)
			segs := r.Log().Segments()
			st, ok := c.node(id).node.tieredState(topic, 0)
			if !ok || len(segs) != 1 || st.end < segs[0].BaseOffset || r.Log().LogStartOffset() == 0 {
				return false
			}
		}
		return true
	})
	after := readAll(t, c, 1, topic, hw)
	if !bytes.Equal(before, after) {
		t.Fatalf("tiered read differs from the local read: %d vs %d bytes", len(after), len(before))
	}

	lo, err := leader.ListOffsets(context.Background(), connect.NewRequest(&storagev1.ListOffsetsRequest{Partitions: []*storagev1.ListOffsetsPartition{
		{Topic: topic, Spec: storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST, CurrentLeaderEpoch: -1}}}))
	if err != nil || lo.Msg.GetPartitions()[0].GetOffset() != 0 {
		t.Fatalf("earliest offset: %v %v", lo, err)
	}
	dl, err := leader.DescribeLog(context.Background(), connect.NewRequest(&storagev1.DescribeLogRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	d := dl.Msg.GetPartitions()[0]
	if d.GetLogStartOffset() != 0 || d.GetLocalLogStartOffset() == 0 || d.GetTieredEndOffset() < d.GetLocalLogStartOffset() || d.GetTieredSizeBytes() == 0 {
		t.Fatalf("describe log: %v", d)
	}

	// Produce keeps working and new data is tiered too.
	for i := range 40 {
		if _, err := produce(leader, topic, commonv1.Acks_ACKS_ALL, -1, batch(t, fmt.Sprintf("late-%d-%s", i, val)), 5*time.Second); err != nil {
			t.Fatalf("produce late %d: %v", i, err)
		}
	}
	hw2 := r1.Log().HighWatermark()
	all := readAll(t, c, 1, topic, hw2)
	if !bytes.HasPrefix(all, before) || len(values(t, all)) != 120*2+40 {
		t.Fatalf("full read after more produce: %d values", len(values(t, all)))
	}
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
