package replica

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/recordbatch/batchtest"
	"github.com/strata-mq/strata/lib/testwait"
)

// openSoleLeader opens a replica in dir that leads alone (RF=1, min ISR 1).
func openSoleLeader(t *testing.T, dir string, log partlog.Config) *Replica {
	t.Helper()
	r, err := Open(dir, "idem", "idem-id", 0, Config{Log: log, MinISR: 1}, Options{NodeID: 1})
	if err != nil {
		t.Fatal(err)
	}
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, ISR: []int32{1}})
	return r
}

// idemBatch builds a batch of n records of producer pid (epoch 0) from
// sequence seq.
func idemBatch(t *testing.T, pid int64, seq int32, n int) []byte {
	t.Helper()
	return batchtest.Build(t, recordbatch.BuildOptions{Idempotent: true, ProducerID: pid, BaseSequence: seq}, batchtest.Records(n))
}

func plainBatch(t *testing.T, n int) []byte {
	t.Helper()
	return batchtest.Build(t, recordbatch.BuildOptions{}, batchtest.Records(n))
}

func produceAll(r *Replica, batches ...[]byte) (ProduceResult, error) {
	return r.Produce(context.Background(), slices.Concat(batches...), AcksAll, 1, 5*time.Second)
}

// Every batch of a request is checked against the producer state and
// against the batches before it in the same request, not only the first.
func TestIdempotenceChecksEveryBatchOfARequest(t *testing.T) {
	r := openSoleLeader(t, t.TempDir(), partlog.Config{})
	defer r.Close()
	a := idemBatch(t, 7, 0, 2) // sequences 0-1
	if res, err := produceAll(r, bytes.Clone(a)); err != nil || res.BaseOffset != 0 {
		t.Fatalf("first append: %+v %v", res, err)
	}
	leo := func() int64 { return r.Log().LogEndOffset() }

	// A duplicate behind a new batch: before, only the first batch was
	// checked and the duplicate went into the log a second time.
	_, err := produceAll(r, idemBatch(t, 7, 2, 1), bytes.Clone(a))
	if !errors.Is(err, ErrDuplicateInRequest) || leo() != 2 {
		t.Fatalf("new then duplicate: err %v, log end %d; want ErrDuplicateInRequest and 2", err, leo())
	}
	// A gap between two batches of the same request.
	_, err = produceAll(r, idemBatch(t, 7, 2, 1), idemBatch(t, 7, 9, 1))
	if !errors.Is(err, ErrOutOfOrderSequence) || leo() != 2 {
		t.Fatalf("gap inside a request: err %v, log end %d; want ErrOutOfOrderSequence and 2", err, leo())
	}
	// A batch repeated inside one request.
	b := idemBatch(t, 7, 2, 1)
	_, err = produceAll(r, b, b)
	if !errors.Is(err, ErrOutOfOrderSequence) || leo() != 2 {
		t.Fatalf("batch repeated in a request: err %v, log end %d; want ErrOutOfOrderSequence and 2", err, leo())
	}
	// Consecutive batches of two producers interleaved in one request.
	req := [][]byte{idemBatch(t, 7, 2, 1), idemBatch(t, 8, 0, 3), idemBatch(t, 7, 3, 2), plainBatch(t, 1)}
	res, err := produceAll(r, cloneAll(req)...)
	if err != nil || res.BaseOffset != 2 || res.LastOffset != 8 || res.Duplicate {
		t.Fatalf("interleaved request: %+v %v", res, err)
	}
	// The whole idempotent part of it again: the original offsets.
	res, err = produceAll(r, cloneAll(req[:3])...)
	if err != nil || !res.Duplicate || res.BaseOffset != 2 || res.LastOffset != 7 {
		t.Fatalf("retry of the request: %+v %v; want duplicate 2-7", res, err)
	}
	if leo() != 9 {
		t.Fatalf("log end %d, want 9", leo())
	}
}

func cloneAll(bs [][]byte) [][]byte {
	out := make([][]byte, len(bs))
	for i, b := range bs {
		out[i] = bytes.Clone(b)
	}
	return out
}

// A retry is recognised after the leader restarts, however many segments
// rolled since the original append and after retention deleted the
// segment that held it (Kafka's producer-state snapshots).
func TestProducerStateSurvivesRestartAndRetention(t *testing.T) {
	dir := t.TempDir()
	cfg := partlog.Config{SegmentBytes: 1024, RetentionAge: -1}
	r := openSoleLeader(t, dir, cfg)
	a := idemBatch(t, 7, 0, 2)
	if res, err := produceAll(r, bytes.Clone(a)); err != nil || res.BaseOffset != 0 {
		t.Fatalf("first append: %+v %v", res, err)
	}
	for range 40 { // about ten segments of other traffic
		if _, err := produceAll(r, plainBatch(t, 3)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := r.Log().Stats().Segments; n < 4 {
		t.Fatalf("only %d segments; the test needs the batch well before the last two", n)
	}

	r = openSoleLeader(t, dir, cfg)
	res, err := produceAll(r, bytes.Clone(a))
	if err != nil || !res.Duplicate || res.BaseOffset != 0 || res.LastOffset != 1 {
		t.Fatalf("retry after restart: %+v %v; want duplicate 0-1", res, err)
	}
	// Retention deletes the segment holding the batch; the state stays.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.RetentionBytes = 600
	r = openSoleLeader(t, dir, cfg)
	defer func() { _ = r.Close() }()
	if n, err := r.Log().ApplyRetention(context.Background()); err != nil || n == 0 || r.Log().LogStartOffset() <= 1 {
		t.Fatalf("retention deleted %d segments (%v), log start %d", n, err, r.Log().LogStartOffset())
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = openSoleLeader(t, dir, cfg)
	res, err = produceAll(r, bytes.Clone(a))
	if err != nil || !res.Duplicate || res.BaseOffset != 0 {
		t.Fatalf("retry after retention and restart: %+v %v; want duplicate at 0", res, err)
	}
	if _, err := produceAll(r, idemBatch(t, 7, 5, 1)); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap after restart: %v, want ErrOutOfOrderSequence (the state is known)", err)
	}
	if _, err := produceAll(r, idemBatch(t, 7, 2, 1)); err != nil {
		t.Fatalf("next sequence after restart: %v", err)
	}
}

// A replica that joins with an empty log copies the leader's log from its
// log start. The producer state of batches below that start must come with
// it: once the new replica leads, a retry of such a batch is a duplicate,
// answered with its original offset, not appended again (as it was when
// the state was not carried).
func TestProducerStateFollowsANewReplica(t *testing.T) {
	logCfg := partlog.Config{SegmentBytes: 64} // a segment per batch
	leader := openSoleLeader(t, t.TempDir(), logCfg)
	defer leader.Close()
	first, second := idemBatch(t, 7, 0, 1), idemBatch(t, 7, 1, 1)
	for _, b := range [][]byte{first, bytes.Clone(second), plainBatch(t, 1), plainBatch(t, 1)} {
		if _, err := produceAll(leader, b); err != nil {
			t.Fatal(err)
		}
	}
	// Retention removes producer 7's batches (offsets 0 and 1).
	if err := leader.Log().DeleteRecordsBefore(2); err != nil {
		t.Fatal(err)
	}
	if start := leader.Log().LogStartOffset(); start != 2 {
		t.Fatalf("log start %d, want 2", start)
	}
	// Node 2 joins the replicas with an empty log.
	leader.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 2, Replicas: []int32{1, 2}, ISR: []int32{1}})
	newReplica := func(t *testing.T, withState bool) *Replica {
		t.Helper()
		f, err := Open(t.TempDir(), "idem", "idem-id", 0, Config{Log: logCfg, MinISR: 1}, Options{NodeID: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		f.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 2, Replicas: []int32{1, 2}, ISR: []int32{1}})
		res, err := leader.Replicate(Fetch{ReplicaID: 2, NodeEpoch: 5, LeaderEpoch: 1, FetchOffset: 0, LastFetchedEpoch: -1, MaxBytes: 1 << 20})
		if err != nil || !res.OutOfRange || res.LogStart != 2 {
			t.Fatalf("fetch from 0 below the leader's log start 2: %+v %v", res, err)
		}
		if len(res.ProducerState) == 0 {
			t.Fatal("no producer state with the out-of-range answer")
		}
		state := res.ProducerState
		if !withState {
			state = nil // a leader that sends none
		}
		if err := f.ResetTo(1, res.LogStart, state); err != nil {
			t.Fatal(err)
		}
		for f.Log().LogEndOffset() < leader.Log().LogEndOffset() {
			rr, err := leader.Replicate(Fetch{ReplicaID: 2, NodeEpoch: 5, LeaderEpoch: 1, FetchOffset: f.Log().LogEndOffset(),
				LastFetchedEpoch: f.Log().LatestEpoch(), MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if err := f.AppendFromLeader(context.Background(), 1, rr.Records, rr.HW); err != nil {
				t.Fatal(err)
			}
		}
		// The move completes and the new replica leads.
		f.ApplyState(State{LeaderID: 2, LeaderEpoch: 2, PartitionEpoch: 3, Replicas: []int32{2}, ISR: []int32{2}})
		return f
	}

	t.Run("state carried", func(t *testing.T) {
		f := newReplica(t, true)
		leo := f.Log().LogEndOffset()
		res, err := f.Produce(context.Background(), bytes.Clone(second), AcksAll, 2, 5*time.Second)
		if err != nil || !res.Duplicate || res.BaseOffset != 1 {
			t.Fatalf("retry of producer 7's batch at offset 1 on the new leader: %+v %v, want a duplicate at 1", res, err)
		}
		if f.Log().LogEndOffset() != leo {
			t.Fatalf("the retry was appended again: log end %d, was %d", f.Log().LogEndOffset(), leo)
		}
		// The producer goes on from where it was.
		if _, err := f.Produce(context.Background(), idemBatch(t, 7, 2, 1), AcksAll, 2, 5*time.Second); err != nil {
			t.Fatalf("producer 7's next batch: %v", err)
		}
	})
	t.Run("state not carried", func(t *testing.T) {
		f := newReplica(t, false)
		leo := f.Log().LogEndOffset()
		// The replica cannot tell the retry from a new producer: it
		// refuses it, rather than appending it a second time.
		if _, err := f.Produce(context.Background(), bytes.Clone(second), AcksAll, 2, 5*time.Second); !errors.Is(err, ErrUnknownProducer) {
			t.Fatalf("retry at sequence 1 on a replica without producer history: %v, want ErrUnknownProducer", err)
		}
		if f.Log().LogEndOffset() != leo {
			t.Fatalf("the refused retry was appended: log end %d, was %d", f.Log().LogEndOffset(), leo)
		}
		// A new producer session (sequence 0) is accepted.
		if _, err := f.Produce(context.Background(), idemBatch(t, 8, 0, 1), AcksAll, 2, 5*time.Second); err != nil {
			t.Fatalf("a new producer: %v", err)
		}
	})
}

// A batch ahead of its producer's next sequence waits for the batches
// before it (a producer with several in flight, whose calls the server
// serves concurrently) and lands after them. Before, it was refused at
// once with ErrOutOfOrderSequence.
func TestBatchAheadOfItsSequenceWaitsForTheGap(t *testing.T) {
	r := openSoleLeader(t, t.TempDir(), partlog.Config{})
	defer r.Close()
	if _, err := produceAll(r, idemBatch(t, 7, 0, 2)); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res ProduceResult
		err error
	}
	third := make(chan answer, 1)
	go func() {
		res, err := produceAll(r, idemBatch(t, 7, 4, 3)) // sequences 4-6: ahead of 2
		third <- answer{res, err}
	}()
	testwait.Until(t, time.Minute, "the batch ahead to be held", func() error { return testwait.True(r.HoldingAhead() == 1) })
	if leo := r.Log().LogEndOffset(); leo != 2 {
		t.Fatalf("log end %d while the batch ahead waits; want 2", leo)
	}
	res, err := produceAll(r, idemBatch(t, 7, 2, 2)) // sequences 2-3 fill the gap
	if err != nil || res.BaseOffset != 2 || res.Held {
		t.Fatalf("the batch filling the gap: %+v %v", res, err)
	}
	a := <-third
	if a.err != nil || a.res.BaseOffset != 4 || a.res.LastOffset != 6 || !a.res.Held {
		t.Fatalf("the held batch: %+v %v; want offsets 4-6, held", a.res, a.err)
	}
	if n := r.HoldingAhead(); n != 0 {
		t.Fatalf("%d requests still held", n)
	}
}

// A batch ahead whose predecessors never come is refused with
// ErrOutOfOrderSequence once the hold (bounded by the request's timeout)
// passes, and nothing is appended; so is one whose request ends first.
// A batch behind the expected sequence, and a gap inside one request, are
// refused at once: no later batch can fill them.
func TestBatchAheadIsRefusedWhenTheGapStays(t *testing.T) {
	r := openSoleLeader(t, t.TempDir(), partlog.Config{})
	defer r.Close()
	if _, err := produceAll(r, idemBatch(t, 7, 0, 2)); err != nil {
		t.Fatal(err)
	}
	_, err := r.Produce(context.Background(), idemBatch(t, 7, 5, 1), AcksAll, 1, 20*time.Millisecond)
	if !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap that stays: %v; want ErrOutOfOrderSequence", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.Produce(ctx, idemBatch(t, 7, 5, 1), AcksAll, 1, time.Minute)
		done <- err
	}()
	testwait.Until(t, time.Minute, "the batch ahead to be held", func() error { return testwait.True(r.HoldingAhead() == 1) })
	cancel()
	if err := <-done; !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("held request canceled: %v; want ErrOutOfOrderSequence", err)
	}

	// Behind: sequence 1 is inside the remembered batch 0-1 but not it.
	_, err = r.Produce(context.Background(), idemBatch(t, 7, 1, 1), AcksAll, 1, time.Minute)
	if !errors.Is(err, ErrOutOfOrderSequence) || errors.Is(err, errSequenceAhead) {
		t.Fatalf("batch behind: %v; want ErrOutOfOrderSequence at once", err)
	}
	_, err = r.Produce(context.Background(), slices.Concat(idemBatch(t, 7, 2, 1), idemBatch(t, 7, 9, 1)), AcksAll, 1, time.Minute)
	if !errors.Is(err, ErrOutOfOrderSequence) || errors.Is(err, errSequenceAhead) {
		t.Fatalf("gap inside a request: %v; want ErrOutOfOrderSequence at once", err)
	}
	if leo := r.Log().LogEndOffset(); leo != 2 {
		t.Fatalf("log end %d; want 2 (nothing appended)", leo)
	}
}

func TestSeqAhead(t *testing.T) {
	for _, c := range []struct {
		s, want int32
		ahead   bool
	}{
		{5, 2, true}, {2, 2, false}, {1, 2, false},
		{3, math.MaxInt32 - 1, true}, // wrapped past 2^31-1
		{math.MaxInt32, 3, false},    // far behind, wrapped
		{1<<30 + 1, 0, false},        // more than half the space ahead: behind
	} {
		if got := seqAhead(c.s, c.want); got != c.ahead {
			t.Errorf("seqAhead(%d, %d) = %v, want %v", c.s, c.want, got, c.ahead)
		}
	}
}

// ProduceAppend appends and leaves the wait to Wait; a batch ahead of its
// sequence is not held but refused as IsAhead, with nothing appended, so
// the caller can hold it on its own (ProduceTxn). Wait with no time left
// still answers a produce already committed, and fails one that is not.
func TestProduceAppendLeavesHoldsAndWaitsToTheCaller(t *testing.T) {
	r := leaderOf(t, Config{MinISR: 1}, Options{}, State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1, 2}, ISR: []int32{1}})
	a, err := r.ProduceAppend(context.Background(), idemBatch(t, 7, 0, 2), AcksAll, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := a.Wait(context.Background(), 0); err != nil || res.BaseOffset != 0 || res.LastOffset != 1 {
		t.Fatalf("committed at once (ISR of one): %+v %v", res, err)
	}
	if _, err := r.ProduceAppend(context.Background(), idemBatch(t, 7, 4, 1), AcksAll, 1, nil); !IsAhead(err) {
		t.Fatalf("batch ahead of its sequence: %v, want IsAhead", err)
	}
	if leo := r.Log().LogEndOffset(); leo != 2 || r.HoldingAhead() != 0 {
		t.Fatalf("log end %d, %d held after a refused batch ahead; want 2 and none", leo, r.HoldingAhead())
	}
	// Follower 2 joins the ISR: the next produce waits for it.
	fetch(t, r, 2, 2)
	r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 2, Replicas: []int32{1, 2}, ISR: []int32{1, 2}})
	a, err = r.ProduceAppend(context.Background(), idemBatch(t, 7, 2, 1), AcksAll, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Wait(context.Background(), 0); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("not yet fetched by the follower, no time left: %v, want ErrTimedOut", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Wait(context.Background(), time.Minute)
		done <- err
	}()
	fetch(t, r, 2, 3)
	if err := <-done; err != nil {
		t.Fatalf("committed once the follower fetched: %v", err)
	}
}
