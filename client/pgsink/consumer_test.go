package pgsink

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	"github.com/strata-mq/strata/lib/fakecluster"
)

// coordinator is a group coordinator for a group of one member at a time
// on one topic: a join gets every partition under the next epoch, and
// commits are stored as sent.
type coordinator struct {
	coordinatorv1connect.UnimplementedCoordinatorServiceHandler
	topic string
	parts int32

	mu        sync.Mutex
	epoch     int32
	committed map[int32]int64
	commits   int
}

func (c *coordinator) ConsumerGroupHeartbeat(_ context.Context, req *connect.Request[coordinatorv1.ConsumerGroupHeartbeatRequest]) (*connect.Response[coordinatorv1.ConsumerGroupHeartbeatResponse], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := req.Msg
	resp := &coordinatorv1.ConsumerGroupHeartbeatResponse{MemberId: m.GetMemberId(), HeartbeatIntervalMs: 20, MemberEpoch: m.GetMemberEpoch()}
	if m.GetMemberEpoch() == 0 {
		c.epoch++
		resp.MemberEpoch = c.epoch
		all := &commonv1.TopicPartitions{Topic: c.topic}
		for p := range c.parts {
			all.Partitions = append(all.Partitions, p)
		}
		resp.Assignment = &coordinatorv1.Assignment{Partitions: []*commonv1.TopicPartitions{all}}
	}
	return connect.NewResponse(resp), nil
}

func (c *coordinator) OffsetFetch(_ context.Context, req *connect.Request[coordinatorv1.OffsetFetchRequest]) (*connect.Response[coordinatorv1.OffsetFetchResponse], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := &coordinatorv1.OffsetFetchResponse{}
	for _, t := range req.Msg.GetTopics() {
		for _, p := range t.GetPartitions() {
			off, ok := c.committed[p]
			if !ok {
				off = -1
			}
			out.Offsets = append(out.Offsets, &coordinatorv1.CommittedOffset{Topic: t.GetTopic(), Partition: p, CommittedOffset: off, CommittedLeaderEpoch: -1})
		}
	}
	return connect.NewResponse(out), nil
}

func (c *coordinator) OffsetCommit(_ context.Context, req *connect.Request[coordinatorv1.OffsetCommitRequest]) (*connect.Response[coordinatorv1.OffsetCommitResponse], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commits++
	out := &coordinatorv1.OffsetCommitResponse{}
	for _, p := range req.Msg.GetPartitions() {
		c.committed[p.GetPartition()] = p.GetCommittedOffset()
		out.Partitions = append(out.Partitions, &coordinatorv1.OffsetCommitPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition()})
	}
	return connect.NewResponse(out), nil
}

func (c *coordinator) state() (map[int32]int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[int32]int64{}
	for p, o := range c.committed {
		m[p] = o
	}
	return m, c.commits
}

// fakeGroup is a one-node fake cluster with topic "orders" of one
// partition holding n records, and a coordinator that has committed
// committed for it (none when negative).
func fakeGroup(t *testing.T, n int, committed int64) (*fakecluster.Cluster, *coordinator) {
	t.Helper()
	fc := fakecluster.New(1)
	t.Cleanup(fc.Close)
	if err := fc.CreateTopic("orders", 1, 1); err != nil {
		t.Fatal(err)
	}
	co := &coordinator{topic: "orders", parts: 1, committed: map[int32]int64{}}
	if committed >= 0 {
		co.committed[0] = committed
	}
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(co))
	fc.SetCoordinator(mux)
	p, err := client.NewProducer(fc.GatewayURL(), client.RetryBackoff(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range n {
		if err := p.ProduceSync(ctxT(t), &client.Record{Topic: "orders", Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	return fc, co
}

func newConsumerT(t *testing.T, db DB, fc *fakecluster.Cluster, opts ...Opt) *Consumer {
	t.Helper()
	base := []Opt{GroupOptions(client.GroupConsumerOptions(client.RetryBackoff(5*time.Millisecond), client.MaxRetryBackoff(20*time.Millisecond), client.FetchMaxWait(50*time.Millisecond)))}
	c, err := NewConsumer(ctxT(t), db, fc.GatewayURL(), "billing", []string{"orders"}, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// pollAll polls until the record at offset last has been returned.
func pollAll(t *testing.T, ctx context.Context, c *Consumer, last int64) []*client.Record {
	t.Helper()
	var out []*client.Record
	for len(out) == 0 || out[len(out)-1].Offset < last {
		rs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rs...)
	}
	return out
}

// TestConsumerStartsAtSinkOffsets: a member that died between its database
// commit and its group commit left the coordinator behind; the next member
// starts at the sink's offset, not the group's, and after its own batch
// the coordinator has caught up. AfterCommit runs between the two commits.
func TestConsumerStartsAtSinkOffsets(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	fc, co := fakeGroup(t, 10, 2)
	// The dead member's sink applied up to offset 6.
	dead := newSinkT(t, db)
	if _, err := dead.Assign(ctx, 1, []client.TopicPartition{tp0}); err != nil {
		t.Fatal(err)
	}
	var got []*client.Record
	if _, err := dead.Apply(ctx, recs("orders", 0, 0, 5, 1), writeEffects("dead", &got)); err != nil {
		t.Fatal(err)
	}

	var seen []int // coordinator commits seen by AfterCommit
	var nexts []int64
	c := newConsumerT(t, db, fc, AfterCommit(func(_ context.Context, next map[client.TopicPartition]int64) {
		_, n := co.state()
		seen, nexts = append(seen, n), append(nexts, next[tp0])
	}))
	rs := pollAll(t, ctx, c, 9)
	if rs[0].Offset != 6 {
		t.Fatalf("the new member started at %d; want 6, the sink's offset (the group's is 2)", rs[0].Offset)
	}
	if _, err := c.Apply(ctx, rs, writeEffects("next", &got)); err != nil {
		t.Fatal(err)
	}
	committed, n := co.state()
	if committed[0] != 10 || n != 1 {
		t.Fatalf("coordinator has %v after %d commits; want orders-0 at 10 after 1", committed, n)
	}
	if !slices.Equal(seen, []int{0}) || !slices.Equal(nexts, []int64{10}) {
		t.Fatalf("AfterCommit saw %v coordinator commits and next offsets %v; want [0], [10]", seen, nexts)
	}
	if e, w := effects(t, db, tp0), append(want("dead", 0, 5), want("next", 6, 9)...); !slices.Equal(e, w) {
		t.Fatalf("effects %v; want %v", e, w)
	}
}

// TestConsumerReadsAgainAfterFailedApply: when the transaction fails, the
// batch's partitions move back and the next Poll returns the records again.
func TestConsumerReadsAgainAfterFailedApply(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	fc, co := fakeGroup(t, 5, -1)
	c := newConsumerT(t, db, fc)
	rs := pollAll(t, ctx, c, 4)
	boom := errors.New("deadlock detected")
	_, err := c.Apply(ctx, rs, func(context.Context, pgx.Tx, []*client.Record) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Apply = %v; want fn's error", err)
	}
	if _, n := co.state(); n != 0 {
		t.Fatalf("a failed Apply committed to the coordinator")
	}
	again := pollAll(t, ctx, c, 4)
	if again[0].Offset != 0 || len(again) != 5 {
		t.Fatalf("after the failed Apply, Poll returned %d records from %d; want 5 from 0", len(again), again[0].Offset)
	}
	var got []*client.Record
	if _, err := c.Apply(ctx, again, writeEffects("m", &got)); err != nil {
		t.Fatal(err)
	}
	if e, w := effects(t, db, tp0), want("m", 0, 4); !slices.Equal(e, w) {
		t.Fatalf("effects %v; want %v", e, w)
	}
}

// TestGroupCannotCommit: the group membership a Consumer exposes cannot
// commit (nor seek): a commit through it could move the coordinator's
// offsets past records Apply has not applied.
func TestGroupCannotCommit(t *testing.T) {
	db := newDB(t)
	fc, _ := fakeGroup(t, 0, -1)
	c := newConsumerT(t, db, fc)
	g := reflect.TypeOf(c.Group())
	for _, m := range []string{"Commit", "CommitRecords", "Seek"} {
		if _, ok := g.MethodByName(m); ok {
			t.Errorf("Consumer.Group() (%s) has %s", g, m)
		}
	}
	for _, m := range []string{"MemberID", "Epoch", "Assignment", "Position", "HighWatermark"} {
		if _, ok := g.MethodByName(m); !ok {
			t.Errorf("Consumer.Group() (%s) lacks %s", g, m)
		}
	}
}

// TestAutoCommitStaysOff: AutoCommit passed through GroupOptions would
// commit what Poll returned, applied or not; the sink turns it off.
func TestAutoCommitStaysOff(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	fc, co := fakeGroup(t, 5, -1)
	c := newConsumerT(t, db, fc, GroupOptions(client.AutoCommit(time.Millisecond)))
	pollAll(t, ctx, c, 4)
	pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, _ = c.Poll(pctx) // an auto-commit would be due here
	if committed, n := co.state(); n != 0 {
		t.Fatalf("the coordinator got %d commits (%v) of records never applied", n, committed)
	}
}
