package replica

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/recordbatch/batchtest"
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
