package replica

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

// memCluster is three replicas of one partition, each on its own in-memory
// filesystem (vfs.MemFS, which can lose power), replicating through direct
// calls: node 1 leads at epoch 1, nodes 2 and 3 follow, all in the ISR.
type memCluster struct {
	t    *testing.T
	cfg  Config
	fss  map[int32]*vfs.MemFS
	reps map[int32]*Replica
}

const memDir = "/data/orders-0"

var allISR = State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}}

func newMemCluster(t *testing.T, cfg Config) *memCluster {
	c := &memCluster{t: t, cfg: cfg, fss: map[int32]*vfs.MemFS{}, reps: map[int32]*Replica{}}
	for id := int32(1); id <= 3; id++ {
		c.fss[id] = vfs.NewMem()
		c.open(id)
	}
	return c
}

func (c *memCluster) open(id int32) {
	c.t.Helper()
	r, err := Open(memDir, "orders", "id", 0, c.cfg, Options{NodeID: id, FS: c.fss[id], Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		c.t.Fatalf("open replica %d: %v", id, err)
	}
	c.t.Cleanup(func() { r.Close() })
	r.ApplyState(allISR)
	c.reps[id] = r
}

// pump runs one fetch round: each follower fetches from the leader and
// appends what it got (waiting for its own fsync under FlushSync, as the
// fetch loop does before its next fetch).
func (c *memCluster) pump() {
	c.t.Helper()
	leader := c.reps[1]
	for id := int32(2); id <= 3; id++ {
		f := c.reps[id]
		off, last, _ := f.FollowerPosition()
		res, err := leader.Replicate(Fetch{ReplicaID: id, NodeEpoch: int64(id), LeaderEpoch: 1, FetchOffset: off, LastFetchedEpoch: last, MaxBytes: 1 << 20})
		if err != nil || res.Diverging || res.OutOfRange {
			c.t.Fatalf("replicate to %d at %d: %v %+v", id, off, err, res)
		}
		if err := f.AppendFromLeader(context.Background(), 1, res.Records, res.HW); err != nil {
			c.t.Fatalf("follower %d append: %v", id, err)
		}
	}
}

// produceAll sends one batch with acks=all, replicating until it is
// acknowledged, and returns its offsets.
func (c *memCluster) produceAll(values ...string) (first, last int64) {
	c.t.Helper()
	recs := make([]recordbatch.Record, len(values))
	for i, v := range values {
		recs[i] = recordbatch.Record{Value: []byte(v)}
	}
	b, err := recordbatch.Build(recordbatch.BuildOptions{}, recs)
	if err != nil {
		c.t.Fatal(err)
	}
	type result struct {
		res ProduceResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := c.reps[1].Produce(context.Background(), b, AcksAll, 1, 20*time.Second)
		done <- result{res, err}
	}()
	for {
		select {
		case r := <-done:
			if r.err != nil {
				c.t.Fatalf("acks=all produce: %v", r.err)
			}
			return r.res.BaseOffset, r.res.LastOffset
		default:
			c.pump()
		}
	}
}

// powerLoss cuts the power of all three machines at once, losing every
// byte and name change not fsynced, and reopens the replicas on what is
// left. It returns each replica's recovery point (fsynced end) at the cut.
func (c *memCluster) powerLoss() map[int32]int64 {
	c.t.Helper()
	synced := map[int32]int64{}
	for id, fs := range c.fss {
		synced[id] = c.reps[id].Log().RecoveryPoint()
		c.fss[id] = fs.Crash(vfs.CrashOptions{})
	}
	for id := range c.fss {
		c.reps[id].Close() // writes to the filesystem that lost power; not seen
		c.open(id)
		if !c.reps[id].Log().UncleanShutdown() {
			c.t.Errorf("replica %d reopened after a power cut reports a clean shutdown", id)
		}
	}
	return synced
}

// values reads a replica's whole log.
func (c *memCluster) values(id int32) []string {
	c.t.Helper()
	l := c.reps[id].Log()
	var out []string
	for off := l.LogStartOffset(); off < l.LogEndOffset(); {
		rr, err := l.Read(off, 1<<20, l.LogEndOffset())
		if err != nil || len(rr.Batches) == 0 {
			c.t.Fatalf("read replica %d at %d: %v", id, off, err)
		}
		it := recordbatch.NewIter(rr.Batches, true)
		for {
			_, raw, ok := it.Next()
			if !ok {
				break
			}
			dec, err := recordbatch.Decode(raw)
			if err != nil {
				c.t.Fatal(err)
			}
			for _, r := range dec.Records {
				out = append(out, string(r.Value))
			}
		}
		off = rr.NextOffset
	}
	return out
}

// requirePrefix fails unless replica id holds exactly want[:n] for some
// n >= atLeast, and returns n.
func (c *memCluster) requirePrefix(id int32, want []string, atLeast int) int {
	c.t.Helper()
	got := c.values(id)
	if len(got) < atLeast || len(got) > len(want) {
		c.t.Fatalf("replica %d holds %d records after the power cut, want between %d and %d", id, len(got), atLeast, len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			c.t.Fatalf("replica %d holds %q at offset %d, want %q", id, got[i], i, want[i])
		}
	}
	return len(got)
}

func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// What survives when every replica loses power at once, for each flush
// policy (docs/design/replication.md, "Durability"). Every replica loses
// all it had not fsynced (vfs.MemFS.Crash without a random source).
func TestPowerLossOfAllReplicas(t *testing.T) {
	// flush.messages=1: an acks=all record is fsynced on every ISR member
	// before it is acknowledged (followers fsync before their next fetch,
	// which is what lets the high watermark pass it; the leader counts
	// its own log only up to its fsynced end). All of it survives.
	t.Run("flush.messages=1", func(t *testing.T) {
		c := newMemCluster(t, Config{MinISR: 2, Log: partlog.Config{Flush: partlog.FlushPolicy{Mode: partlog.FlushSync}}})
		var acked []string
		for i := range 5 {
			v := seq(fmt.Sprintf("b%d", i), 3)
			c.produceAll(v...)
			acked = append(acked, v...)
		}
		hw := c.reps[1].Log().HighWatermark()
		c.powerLoss()
		for id := int32(1); id <= 3; id++ {
			c.requirePrefix(id, acked, len(acked))
		}
		if hw != int64(len(acked)) {
			t.Fatalf("high watermark before the cut %d, want %d", hw, len(acked))
		}
	})

	// flush.ms=T: every replica fsyncs every T, so what was acknowledged
	// more than T (plus an fsync) before the cut survives on all of them;
	// what was acknowledged since may be lost everywhere.
	t.Run("flush.ms", func(t *testing.T) {
		c := newMemCluster(t, Config{MinISR: 2, Log: partlog.Config{Flush: partlog.FlushPolicy{Mode: partlog.FlushInterval, Interval: 10 * time.Millisecond}}})
		old := seq("old", 4)
		_, last := c.produceAll(old...)
		deadline := time.Now().Add(20 * time.Second)
		for id := int32(1); id <= 3; id++ {
			for c.reps[id].Log().RecoveryPoint() <= last {
				if time.Now().After(deadline) {
					t.Fatalf("replica %d never fsynced offset %d on its interval", id, last)
				}
				time.Sleep(time.Millisecond)
			}
		}
		recent := seq("recent", 4)
		c.produceAll(recent...)
		synced := c.powerLoss()
		for id := int32(1); id <= 3; id++ {
			n := c.requirePrefix(id, append(old, recent...), len(old))
			if int64(n) != synced[id] {
				t.Errorf("replica %d recovered %d records; it had fsynced %d", id, n, synced[id])
			}
		}
	})

	// Default (no flush.*): durability comes from replication, and a power
	// cut of every replica at once loses what none had fsynced, acks=all
	// records included. Only fsyncs the log makes on its own survive: a
	// sealed segment is fsynced after its roll (and everything is at each
	// checkpoint round, every minute, and on a clean close).
	t.Run("default", func(t *testing.T) {
		c := newMemCluster(t, Config{MinISR: 2, Log: partlog.Config{SegmentBytes: 1024}})
		var sealed []string
		for i := 0; c.reps[1].Log().Stats().Segments < 2; i++ {
			v := seq(fmt.Sprintf("s%d", i), 4)
			c.produceAll(v...)
			sealed = append(sealed, v...)
		}
		// The batch that rolled is in the new segment; the rest are sealed.
		rolledAt := len(sealed) - 4
		deadline := time.Now().Add(20 * time.Second)
		for id := int32(1); id <= 3; id++ {
			for c.reps[id].Log().RecoveryPoint() < int64(rolledAt) {
				if time.Now().After(deadline) {
					t.Fatalf("replica %d never fsynced its sealed segment", id)
				}
				time.Sleep(time.Millisecond)
			}
		}
		tail := seq("tail", 4)
		c.produceAll(tail...)
		synced := c.powerLoss()
		for id := int32(1); id <= 3; id++ {
			n := c.requirePrefix(id, append(sealed, tail...), rolledAt)
			if int64(n) != synced[id] {
				t.Errorf("replica %d recovered %d records; it had fsynced %d", id, n, synced[id])
			}
			if n == len(sealed)+len(tail) {
				t.Errorf("replica %d kept every acks=all record through the power cut without fsyncing them", id)
			}
		}
	})
}

// gateFS holds every fsync of a .log file while closed is set, so a test
// can look at a leader whose append is written but not yet on disk.
type gateFS struct {
	vfs.FS
	mu      sync.Mutex
	closed  bool
	opened  chan struct{} // closed and replaced when the gate opens
	waiting chan struct{} // receives when an fsync starts waiting
}

func newGateFS(fs vfs.FS) *gateFS {
	return &gateFS{FS: fs, opened: make(chan struct{}), waiting: make(chan struct{}, 16)}
}

func (g *gateFS) set(closed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = closed
	if !closed {
		close(g.opened)
		g.opened = make(chan struct{})
	}
}

func (g *gateFS) wrap(f vfs.File, name string, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &gateFile{File: f, g: g}, nil
}

func (g *gateFS) Create(name string) (vfs.File, error) {
	f, err := g.FS.Create(name)
	return g.wrap(f, name, err)
}

func (g *gateFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := g.FS.OpenReadWrite(name)
	return g.wrap(f, name, err)
}

type gateFile struct {
	vfs.File
	g *gateFS
}

func (f *gateFile) Sync() error {
	f.g.mu.Lock()
	closed, opened := f.g.closed, f.g.opened
	f.g.mu.Unlock()
	if closed {
		select {
		case f.g.waiting <- struct{}{}:
		default:
		}
		<-opened
	}
	return f.File.Sync()
}

// Under flush.messages=1 a record becomes visible to consumers only once
// it is on disk on the leader too, not just in its page cache while the
// followers have fsynced it: otherwise a power cut of every replica could
// take back a record consumers read.
func TestHighWatermarkWaitsForLeaderFsyncUnderFlushSync(t *testing.T) {
	gate := newGateFS(vfs.NewMem())
	r, err := Open(memDir, "orders", "id", 0, Config{MinISR: 2, Log: partlog.Config{Flush: partlog.FlushPolicy{Mode: partlog.FlushSync}}},
		Options{NodeID: 1, FS: gate, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}})

	gate.set(true)
	defer gate.set(false) // before Close, which waits for the held fsync
	done := make(chan error, 1)
	go func() {
		_, err := r.Produce(context.Background(), testBatch(t, 3), AcksLeader, 1, time.Second)
		done <- err
	}()
	<-gate.waiting // written, published, its fsync held
	res, err := r.Replicate(Fetch{ReplicaID: 2, NodeEpoch: 2, LeaderEpoch: 1, FetchOffset: 0, LastFetchedEpoch: -1, MaxBytes: 1 << 20})
	if err != nil || len(res.Records) == 0 {
		t.Fatalf("follower fetch: %v, %d bytes", err, len(res.Records))
	}
	fetchAs(t, r, 2, 2, 3) // the follower has all three records (and fsynced them)
	if hw := r.Log().HighWatermark(); hw != 0 {
		t.Fatalf("high watermark %d before the leader's own fsync completed, want 0", hw)
	}
	gate.set(false)
	if err := <-done; err != nil {
		t.Fatalf("produce: %v", err)
	}
	if hw := r.Log().HighWatermark(); hw != 3 {
		t.Fatalf("high watermark %d after the leader's fsync, want 3", hw)
	}
}

// Switching a topic to flush.messages=1 does not hide what the leader
// appended before: it is fsynced at the switch, so the high watermark can
// pass it without waiting for another append.
func TestSwitchToFlushSyncKeepsEarlierRecordsCommittable(t *testing.T) {
	r := leaderOf(t, Config{MinISR: 2}, Options{FS: vfs.NewMem()}, State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}})
	produceLeader(t, r, 3)
	if err := r.SetConfig(Config{MinISR: 2, Log: partlog.Config{Flush: partlog.FlushPolicy{Mode: partlog.FlushSync}}}); err != nil {
		t.Fatal(err)
	}
	fetch(t, r, 2, 3)
	if hw := r.Log().HighWatermark(); hw != 3 {
		t.Fatalf("follower at 3 after the switch to flush.messages=1: high watermark %d, want 3", hw)
	}
}
