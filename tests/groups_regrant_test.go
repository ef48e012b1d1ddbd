package tests

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/tests/harness"
)

// reader is an in-process GroupConsumer that keeps every record it read and
// commits only when the test says so.
type reader struct {
	gc   *client.GroupConsumer
	mu   sync.Mutex
	recs []*client.Record
	done chan struct{}
}

func (e *groupEnv) startReader(t *testing.T, ctx context.Context, group, topic string) *reader {
	t.Helper()
	gc, err := client.NewGroupConsumer(e.gateway, group, []string{topic},
		client.GroupConsumerOptions(client.FetchMaxWait(100*time.Millisecond), client.RetryBackoff(50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{gc: gc, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			recs, err := gc.Poll(ctx)
			if err != nil {
				continue
			}
			r.mu.Lock()
			r.recs = append(r.recs, recs...)
			r.mu.Unlock()
		}
	}()
	return r
}

// read returns the records of partition p read so far, from index from on
// of everything read, and the count of everything read.
func (r *reader) read(p int32, from int) ([]*client.Record, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*client.Record
	for _, rec := range r.recs[min(from, len(r.recs)):] {
		if rec.Partition == p {
			out = append(out, rec)
		}
	}
	return out, len(r.recs)
}

// waitRead waits until the reader has read offset off of partition p after
// index from of everything read.
func (r *reader) waitRead(t *testing.T, ctx context.Context, p int32, from int, off int64) {
	t.Helper()
	for {
		recs, _ := r.read(p, from)
		if slices.ContainsFunc(recs, func(rec *client.Record) bool { return rec.Offset == off }) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("partition %d: offset %d not read (%d records of it read)", p, off, len(recs))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// testRegrant: member A reads every partition and commits nothing; member
// B joins, takes half, commits further and leaves; A reads and commits
// the returned partitions further, then commits the records it read of
// them before B took them. That commit must fail and leave the offsets
// where A's newer commit put them. Then the same after a fence: A is
// removed from the group by the operator, joins again, gets everything
// back, commits further, and commits what it read before the fence.
func (e *groupEnv) testRegrant(t *testing.T) {
	ctx := harness.Deadline(t, 90*time.Second)
	const topic, group = "faults-regrant", "regrant"
	e.c.CreateTopic(ctx, topic, faultParts, 1, nil)
	prod := newTopicProducer(t, e.gateway, topic)
	prod.produceRound(ctx, 5)
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	a := e.startReader(t, mctx, group, topic)
	defer a.gc.Close(context.Background())
	for p := range int32(faultParts) {
		a.waitRead(t, ctx, p, 0, 4)
	}
	_, mark := a.read(0, 0)

	// B takes half of the partitions, reads them from the start (nothing
	// is committed) and commits 10.
	b := e.startReader(t, mctx, group, topic)
	var moved []int32
	for len(moved) == 0 {
		for _, tp := range b.gc.Assignment() {
			moved = append(moved, tp.Partition)
		}
		if len(moved) == 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("the second member was never assigned a partition")
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	p := moved[0]
	prod.produceRound(ctx, 5)
	b.waitRead(t, ctx, p, 0, 9)
	if err := b.gc.Commit(ctx); err != nil {
		t.Fatalf("B's commit: %v", err)
	}
	waitCommitted(t, ctx, e, group, p, 10)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := b.gc.Close(cctx); err != nil {
		t.Fatalf("B's close: %v", err)
	}
	cancel()

	// A gets p back, reads on from B's commit and commits 15.
	prod.produceRound(ctx, 5)
	a.waitRead(t, ctx, p, mark, 14)
	if err := a.gc.Commit(ctx); err != nil {
		t.Fatalf("A's commit after getting %d back: %v", p, err)
	}
	waitCommitted(t, ctx, e, group, p, 15)
	before, _ := a.read(p, 0)
	before = slices.DeleteFunc(before, func(r *client.Record) bool { return r.Offset >= 5 })
	err := a.gc.CommitRecords(ctx, before...)
	t.Logf("commit of the records A read of partition %d before B took it: %v", p, err)
	if !errors.Is(err, client.ErrFenced) || !strings.Contains(err.Error(), "assigned to this member again") {
		t.Fatalf("commit of records read under an earlier assignment = %v; want client.ErrFenced saying why", err)
	}
	if got := committedOf(t, ctx, e, group, p); got != 15 {
		t.Fatalf("partition %d: committed %d after A committed records it read before B took it; want 15", p, got)
	}

	// The operator removes A; A is fenced, joins again and gets everything.
	epoch := a.gc.Epoch()
	if _, err := e.coord.LeaveGroup(ctx, connect.NewRequest(&coordinatorv1.LeaveGroupRequest{GroupId: group,
		Members: []*coordinatorv1.MemberIdentity{{MemberId: a.gc.MemberID()}}})); err != nil {
		t.Fatalf("remove A: %v", err)
	}
	for a.gc.Epoch() <= epoch {
		select {
		case <-ctx.Done():
			t.Fatalf("A did not join again after it was removed (epoch %d)", a.gc.Epoch())
		case <-time.After(20 * time.Millisecond):
		}
	}
	_, mark = a.read(0, 0)
	prod.produceRound(ctx, 5)
	a.waitRead(t, ctx, p, mark, 19)
	if err := a.gc.Commit(ctx); err != nil {
		t.Fatalf("A's commit after joining again: %v", err)
	}
	waitCommitted(t, ctx, e, group, p, 20)
	fenced, _ := a.read(p, 0)
	fenced = slices.DeleteFunc(fenced, func(r *client.Record) bool { return r.Offset < 10 || r.Offset >= 15 })
	err = a.gc.CommitRecords(ctx, fenced...)
	t.Logf("commit of the records A read of partition %d before it was fenced: %v", p, err)
	if !errors.Is(err, client.ErrFenced) {
		t.Fatalf("commit of records read before the fence = %v; want client.ErrFenced", err)
	}
	if got := committedOf(t, ctx, e, group, p); got != 20 {
		t.Fatalf("partition %d: committed %d after A committed records it read before the fence; want 20", p, got)
	}
	stop()
	<-a.done
	<-b.done
}

func committedOf(t *testing.T, ctx context.Context, e *groupEnv, group string, p int32) int64 {
	t.Helper()
	for _, row := range e.describe(t, ctx, group).GetPartitions() {
		if row.GetPartition() == p {
			return row.GetCommittedOffset()
		}
	}
	return -1
}

func waitCommitted(t *testing.T, ctx context.Context, e *groupEnv, group string, p int32, off int64) {
	t.Helper()
	e.waitGroup(t, ctx, group, "a commit", func(d *coordinatorv1.GroupDescription) bool {
		for _, row := range d.GetPartitions() {
			if row.GetPartition() == p {
				return row.GetCommittedOffset() == off
			}
		}
		return false
	})
}
