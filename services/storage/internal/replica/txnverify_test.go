package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/recordbatch/batchtest"
)

// fakeCoordinator answers verifications as a transaction coordinator
// would for one partition, and counts the questions.
type fakeCoordinator struct {
	mu     sync.Mutex
	added  map[int64]int16 // producer id → epoch whose transaction holds the partition
	down   bool            // unreachable
	asked  int
	during func() // runs while a question is being answered, when set
}

func (c *fakeCoordinator) verify(_ context.Context, pid int64, epoch int16) error {
	c.mu.Lock()
	c.asked++
	during, down := c.during, c.down
	e, ok := c.added[pid]
	c.mu.Unlock()
	if during != nil {
		during()
	}
	switch {
	case down:
		return fmt.Errorf("%w: connection refused", ErrTxnNotVerified)
	case !ok || e != epoch:
		return fmt.Errorf("%w: not added", ErrInvalidTxnState)
	}
	return nil
}

func (c *fakeCoordinator) set(f func(c *fakeCoordinator)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func (c *fakeCoordinator) questions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asked
}

func txnBatch(t *testing.T, pid int64, epoch int16, seq int32, n int) []byte {
	t.Helper()
	return batchtest.Build(t, recordbatch.BuildOptions{Idempotent: true, Transactional: true, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq},
		batchtest.Records(n))
}

// A transactional batch is appended only once the coordinator said the
// partition is in the producer's transaction; the answer is asked once
// per transaction, until the marker; a refused or unverifiable batch
// leaves the log as it was (KIP-890 part 1).
func TestTxnProduceIsVerified(t *testing.T) {
	r := openSoleLeader(t, t.TempDir(), partlog.Config{})
	defer r.Close()
	coord := &fakeCoordinator{added: map[int64]int16{}}
	produce := func(b []byte) (ProduceResult, error) {
		return r.ProduceTxn(context.Background(), b, AcksAll, 1, 5*time.Second, coord.verify)
	}
	leo := func() int64 { return r.Log().LogEndOffset() }
	marker := func(commit bool) {
		t.Helper()
		m := recordbatch.Marker{Type: recordbatch.ControlAbort}
		if commit {
			m.Type = recordbatch.ControlCommit
		}
		if _, err := r.AppendMarker(context.Background(), 7, 0, m, 1, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// Not added: refused, nothing appended.
	if _, err := produce(txnBatch(t, 7, 0, 0, 2)); !errors.Is(err, ErrInvalidTxnState) || leo() != 0 {
		t.Fatalf("not added: %v, log end %d; want ErrInvalidTxnState and 0", err, leo())
	}
	// The coordinator cannot be reached: refused retriably, nothing appended.
	coord.set(func(c *fakeCoordinator) { c.down, c.added[7] = true, 0 })
	if _, err := produce(txnBatch(t, 7, 0, 0, 2)); !errors.Is(err, ErrTxnNotVerified) || leo() != 0 {
		t.Fatalf("coordinator down: %v, log end %d; want ErrTxnNotVerified and 0", err, leo())
	}
	// Added: appended, and the next batches of the transaction are not
	// asked about again.
	coord.set(func(c *fakeCoordinator) { c.down, c.asked = false, 0 })
	for seq := int32(0); seq < 6; seq += 2 {
		if _, err := produce(txnBatch(t, 7, 0, seq, 2)); err != nil {
			t.Fatalf("added, sequence %d: %v", seq, err)
		}
	}
	if n := coord.questions(); n != 1 || leo() != 6 {
		t.Fatalf("asked %d times, log end %d; want 1 and 6", n, leo())
	}
	// The marker ends the transaction and the verification with it: the
	// next transaction's first batch is asked about again, and refused
	// while the coordinator no longer has the partition in it.
	marker(true)
	coord.set(func(c *fakeCoordinator) { delete(c.added, 7) })
	end := leo()
	if _, err := produce(txnBatch(t, 7, 0, 6, 1)); !errors.Is(err, ErrInvalidTxnState) || leo() != end {
		t.Fatalf("after the marker: %v, log end %d; want ErrInvalidTxnState and %d", err, leo(), end)
	}
	if n := coord.questions(); n != 2 {
		t.Fatalf("asked %d times, want 2", n)
	}
	if st, _ := r.Log().Producer(7); st.TxnFirstOffset != -1 {
		t.Fatalf("a refused batch opened a transaction at %d", st.TxnFirstOffset)
	}
	// A marker appended while the coordinator was being asked undoes the
	// verification: the batch would open a transaction after its end.
	coord.set(func(c *fakeCoordinator) {
		c.added[7] = 0
		c.during = func() { marker(false) }
	})
	end = leo() + 1 // the abort marker
	if _, err := produce(txnBatch(t, 7, 0, 6, 1)); !errors.Is(err, ErrInvalidTxnState) || leo() != end {
		t.Fatalf("marker during the verification: %v, log end %d; want ErrInvalidTxnState and %d", err, leo(), end)
	}
	coord.set(func(c *fakeCoordinator) { c.during = nil })
	if _, err := produce(txnBatch(t, 7, 0, 6, 1)); err != nil {
		t.Fatalf("verified again: %v", err)
	}
	// A newer epoch is verified anew.
	coord.set(func(c *fakeCoordinator) { c.added[7] = 1 })
	asked := coord.questions()
	if _, err := produce(txnBatch(t, 7, 1, 0, 1)); err != nil || coord.questions() != asked+1 {
		t.Fatalf("new epoch: %v, asked %d more times; want 1", err, coord.questions()-asked)
	}

	// Without a verifier (no transactional id), a transactional batch is
	// refused; plain and idempotent ones go through unasked.
	end = leo()
	if _, err := r.Produce(context.Background(), txnBatch(t, 9, 0, 0, 1), AcksAll, 1, 5*time.Second); !errors.Is(err, partlog.ErrInvalidBatch) || leo() != end {
		t.Fatalf("no transactional id: %v, log end %d", err, leo())
	}
	asked = coord.questions()
	if _, err := produce(idemBatch(t, 9, 0, 1)); err != nil || coord.questions() != asked {
		t.Fatalf("idempotent batch: %v, asked %d", err, coord.questions()-asked)
	}
}

// The first batches of a transaction sent at once (a producer with
// several in flight) share one verification: neither undoes the other's,
// and both are appended in sequence order.
func TestTxnProduceConcurrentFirstBatches(t *testing.T) {
	r := openSoleLeader(t, t.TempDir(), partlog.Config{})
	defer r.Close()
	// The producer is known at sequence 1, so the batch ahead of its
	// sequence waits for the other rather than being taken as a new
	// producer's first.
	if _, err := produceAll(r, idemBatch(t, 7, 0, 2)); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	coord := &fakeCoordinator{added: map[int64]int16{7: 0}, during: func() { <-release }}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		b := txnBatch(t, 7, 0, int32(2+2*i), 2)
		wg.Go(func() {
			_, errs[i] = r.ProduceTxn(context.Background(), b, AcksAll, 1, 5*time.Second, coord.verify)
		})
	}
	// Both questions are out (or the second shares the first's) before
	// the coordinator answers.
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if leo := r.Log().LogEndOffset(); leo != 6 {
		t.Fatalf("log end %d, want 6", leo)
	}
	if st, _ := r.Log().Producer(7); st.TxnFirstOffset != 2 {
		t.Fatalf("transaction opened at %d, want 2", st.TxnFirstOffset)
	}
}
