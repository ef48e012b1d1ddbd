package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/tests/harness"
)

// proxiedClient is an HTTP/2 cleartext client whose connections to the
// address `via` names are made through it instead: a producer given it
// talks to one storage node through a harness.Proxy, and to everything
// else directly.
func proxiedClient(via map[string]string) *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	d := &net.Dialer{Timeout: 2 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Protocols: &protos,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if to, ok := via[addr]; ok {
				addr = to
			}
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// leaderKillPoint is a point of a produce request's life at which the
// partition's leader is killed with SIGKILL.
type leaderKillPoint struct {
	name string
	// kill produces r with produce and kills leader at the point; proxy
	// is between the producer and leader, followers are the other
	// replicas.
	kill func(ctx context.Context, t *testing.T, c *harness.Cluster, topic string, leader *harness.Node, followers []*harness.Node, proxy *harness.Proxy, produce func())
}

// TestProduceSurvivesLeaderKill kills a partition's leader at each point
// of an acks=all produce request's life, with a TCP proxy between the
// producer and the leader to hold the request or its answer at that point:
//
//   - before the request reaches the leader (held at the proxy);
//   - in flight: the leader appended it, the followers (paused with
//     SIGSTOP) did not fetch it, so it is not committed;
//   - after the append, before the answer: committed on every replica,
//     the answer held at the proxy.
//
// The kill resets the producer's connection. Every time the record is
// acknowledged (a broken connection is retriable; the new leader answers a
// batch it already holds with its original offset), and the partition holds
// each record exactly once, at the offset its callback reported.
func TestProduceSurvivesLeaderKill(t *testing.T) {
	t.Parallel()
	// A long lag time keeps the paused followers in the ISR.
	c := harness.StartCluster(t, harness.ClusterConfig{ReplicaLagTime: 20 * time.Second})
	gw := harness.StartGateway(t, c)
	points := []leaderKillPoint{
		{"before the request", func(ctx context.Context, t *testing.T, c *harness.Cluster, topic string, leader *harness.Node, _ []*harness.Node, proxy *harness.Proxy, produce func()) {
			proxy.Pause(harness.ToServer)
			produce()
			waitCond(ctx, t, "the request held at the proxy", func() bool { return proxy.Held(harness.ToServer) > 0 })
			leader.Kill()
			proxy.Reset()
		}},
		{"in flight", func(ctx context.Context, t *testing.T, c *harness.Cluster, topic string, leader *harness.Node, followers []*harness.Node, proxy *harness.Proxy, produce func()) {
			for _, f := range followers {
				f.Stop()
			}
			produce()
			waitCond(ctx, t, "the leader to append the record", func() bool {
				d, err := describeLog(ctx, leader, topic, 0)
				return err == nil && d.GetLogEndOffset() >= 2
			})
			leader.Kill()
			proxy.Reset()
			for _, f := range followers {
				f.Continue()
			}
		}},
		{"after the append, before the answer", func(ctx context.Context, t *testing.T, c *harness.Cluster, topic string, leader *harness.Node, followers []*harness.Node, proxy *harness.Proxy, produce func()) {
			proxy.Pause(harness.ToClient)
			produce()
			waitCond(ctx, t, "the record committed on every replica", func() bool {
				d, err := describeLog(ctx, leader, topic, 0)
				if err != nil || d.GetHighWatermark() < 2 {
					return false
				}
				for _, f := range followers {
					if d, err := describeLog(ctx, f, topic, 0); err != nil || d.GetLogEndOffset() < 2 {
						return false
					}
				}
				return true
			})
			leader.Kill()
			proxy.Reset()
		}},
	}
	for i, pt := range points {
		t.Run(pt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			topic := fmt.Sprintf("leader-kill-%d", i)
			c.CreateTopic(ctx, topic, 1, 3, map[string]string{"min.insync.replicas": "2"})
			c.WaitFullISR(ctx, topic, 1)
			rc := checkReplication(t, c, topic, 1)
			leader, _ := c.Leader(ctx, topic, 0)
			defer func() {
				if leader.Proc.Exited() { // the next point needs three live nodes
					leader.Restart()
				}
			}()
			var followers []*harness.Node
			for _, n := range c.StorageNodes() {
				if n != leader {
					followers = append(followers, n)
				}
			}
			target := strings.TrimPrefix(leader.URL, "http://")
			proxy := harness.StartProxy(t, target)
			p, err := client.NewProducer(gw.URL, client.HTTPClient(proxiedClient(map[string]string{target: proxy.Addr()})),
				client.Linger(0), client.DeliveryTimeout(2*time.Minute), client.MaxRetryBackoff(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()

			recs := []*client.Record{{Topic: topic, Value: []byte("r0")}, {Topic: topic, Value: []byte("r1")}, {Topic: topic, Value: []byte("r2")}}
			if err := p.ProduceSync(ctx, recs[0]); err != nil {
				t.Fatalf("r0: %v", err)
			}
			if proxy.Forwarded(harness.ToServer) == 0 {
				t.Fatal("the producer does not reach the leader through the proxy")
			}
			done := make(chan error, 1)
			pt.kill(ctx, t, c, topic, leader, followers, proxy, func() {
				p.Produce(ctx, recs[1], func(_ *client.Record, err error) { done <- err })
			})
			killed := time.Now()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("r1 failed after the leader was killed: %v", err)
				}
				t.Logf("r1 acknowledged %v after the leader was killed", time.Since(killed).Round(time.Millisecond))
			case <-ctx.Done():
				t.Fatal("r1 never acknowledged")
			}
			if err := p.ProduceSync(ctx, recs[2]); err != nil {
				t.Fatalf("r2: %v", err)
			}

			leader.Restart()
			c.WaitFullISR(ctx, topic, 1)
			got := readPartition(ctx, t, c, topic, 0)
			if len(got) != len(recs) {
				t.Fatalf("partition holds %d records, want %d: %v", len(got), len(recs), got)
			}
			for i, r := range recs {
				if got[i].Offset != int64(i) || string(got[i].Value) != string(r.Value) || r.Offset != int64(i) {
					t.Fatalf("offset %d holds %q; %s was acknowledged at offset %d", got[i].Offset, got[i].Value, r.Value, r.Offset)
				}
				rc.ack(0, r.Offset, string(r.Value))
			}
			rc.finish(ctx)
		})
	}
}

// waitCond polls cond every 20ms until it holds, failing the test when
// ctx ends first.
func waitCond(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestCLIProduceSurvivesLeaderKill runs `strata produce` as a new user
// would, feeding it about 200 records/s with acks=all, and kills the active
// controller and, 2 s later, the leader of partition 0, both with SIGKILL.
// The CLI exits 0 with one delivery report per record, and every record is
// in the topic exactly once, at the partition and offset its report gave.
func TestCLIProduceSurvivesLeaderKill(t *testing.T) {
	t.Parallel()
	const (
		topic      = "cli-load"
		partitions = 6
		records    = 3000
	)
	c := harness.StartCluster(t, harness.ClusterConfig{Controllers: 3})
	gw := harness.StartGateway(t, c)
	strata := harness.Binary(t, "github.com/strata-mq/strata/cmd/strata")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c.CreateTopic(ctx, topic, partitions, 3, nil)
	c.WaitFullISR(ctx, topic, partitions)
	rc := checkReplication(t, c, topic, partitions)
	leader, _ := c.Leader(ctx, topic, 0)
	active := waitAgreedActive(ctx, t, c.Controllers())

	cmd := exec.CommandContext(ctx, strata, "--gateway", gw.URL, "produce", topic, "--output", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	w := bufio.NewWriter(stdin)
	for i := range records {
		<-tick.C
		fmt.Fprintf(w, "%d\n", i)
		if err := w.Flush(); err != nil {
			t.Fatalf("writing to strata produce: %v", err)
		}
		switch i {
		case records / 3:
			for _, n := range c.Controllers() {
				if strconv.Itoa(n.ID) == active {
					n.Kill()
				}
			}
		case records/3 + 400: // 2 s later at 200 records/s
			leader.Kill()
		}
	}
	tick.Stop()
	stdin.Close()
	err = cmd.Wait()
	if err != nil {
		t.Fatalf("strata produce: %v\nstderr:\n%s", err, stderr.String())
	}

	// One report per record, in input order, each at a distinct offset.
	type report struct {
		Partition int32 `json:"partition"`
		Offset    int64 `json:"offset"`
	}
	at := map[report]int{}
	dec := json.NewDecoder(&stdout)
	for i := 0; ; i++ {
		var r report
		if err := dec.Decode(&r); err == io.EOF {
			if i != records {
				t.Fatalf("%d delivery reports, want %d", i, records)
			}
			break
		} else if err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
		if prev, dup := at[r]; dup {
			t.Fatalf("records %d and %d both reported at partition %d offset %d", prev, i, r.Partition, r.Offset)
		}
		at[r] = i
		rc.ack(r.Partition, r.Offset, strconv.Itoa(i))
	}
	rc.finish(ctx)
	seen := map[string]bool{}
	for p := range int32(partitions) {
		for _, rec := range readPartition(ctx, t, c, topic, p) {
			v := string(rec.Value)
			if seen[v] {
				t.Fatalf("record %s is in the topic twice (again at partition %d offset %d)", v, p, rec.Offset)
			}
			seen[v] = true
			if i, ok := at[report{p, rec.Offset}]; !ok || strconv.Itoa(i) != v {
				t.Fatalf("partition %d offset %d holds %s, reported for record %d (%v)", p, rec.Offset, v, i, ok)
			}
		}
	}
	if len(seen) != records {
		t.Fatalf("the topic holds %d records, want %d", len(seen), records)
	}
}
