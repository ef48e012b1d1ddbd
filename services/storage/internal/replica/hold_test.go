package replica

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/testwait"
)

// holdTest is a sole leader whose holds last until the test ends them, so
// what is held depends on the bounds alone, never on how fast the machine is.
type holdTest struct {
	t      *testing.T
	r      *Replica
	ctx    context.Context
	cancel context.CancelFunc
	held   []chan error
}

func newHoldTest(t *testing.T, limits holdLimits, producers ...int64) *holdTest {
	r := openSoleLeader(t, t.TempDir(), partlog.Config{})
	r.holdFor = time.Hour
	r.holding.limits = limits
	for _, pid := range producers {
		if _, err := produceAll(r, idemBatch(t, pid, 0, 2)); err != nil { // next sequence 2
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &holdTest{t: t, r: r, ctx: ctx, cancel: cancel}
	t.Cleanup(func() {
		h.cancel()
		for _, c := range h.held {
			<-c
		}
		r.Close()
	})
	return h
}

// hold sends batches ahead of their sequence and waits until the leader
// holds them.
func (h *holdTest) hold(batches []byte) {
	h.t.Helper()
	want := h.r.HoldingAhead() + 1
	c := make(chan error, 1)
	go func() {
		_, err := h.r.Produce(h.ctx, batches, AcksAll, 1, time.Hour)
		c <- err
	}()
	h.held = append(h.held, c)
	var answered error
	testwait.Until(h.t, time.Minute, fmt.Sprintf("%d requests held", want), func() error {
		select {
		case answered = <-c:
			c <- answered
			return nil
		default:
		}
		return testwait.True(h.r.HoldingAhead() == want)
	})
	if answered != nil {
		h.t.Fatalf("request %d answered instead of held: %v", want, answered)
	}
}

// refused sends batches ahead of their sequence and requires a refusal
// for a full hold, at once: it fails as soon as the leader holds them.
func (h *holdTest) refused(what string, batches []byte) {
	h.t.Helper()
	held := h.r.HoldingAhead()
	c := make(chan error, 1)
	go func() {
		_, err := h.r.Produce(h.ctx, batches, AcksAll, 1, time.Hour)
		c <- err
	}()
	var err error
	wasHeld := false
	testwait.Until(h.t, time.Minute, what+" answered", func() error {
		select {
		case err = <-c:
			return nil
		default:
		}
		wasHeld = h.r.HoldingAhead() > held
		return testwait.True(wasHeld)
	})
	if wasHeld {
		h.held = append(h.held, c)
		h.t.Fatalf("%s: held as request %d; want a refusal at once", what, held+1)
	}
	if !errors.Is(err, ErrOutOfOrderSequence) || !IsHoldFull(err) {
		h.t.Fatalf("%s: %v; want ErrOutOfOrderSequence for a full hold", what, err)
	}
}

// A producer gets at most five requests held (Kafka's max in flight); the
// sixth is refused at once, while another producer's batch is still held.
// When the holds end, nothing was appended. Before, every request ahead
// was held, however many.
func TestHoldIsBoundedPerProducer(t *testing.T) {
	h := newHoldTest(t, defaultHoldLimits, 7, 8)
	for k := range maxHeldPerProducer {
		h.hold(idemBatch(t, 7, int32(4+k), 1))
	}
	h.refused("producer 7's sixth batch ahead", idemBatch(t, 7, 20, 1))
	h.hold(idemBatch(t, 8, 5, 1))
	h.cancel()
	for _, c := range h.held {
		if err := <-c; !errors.Is(err, ErrOutOfOrderSequence) || IsHoldFull(err) {
			t.Fatalf("held request: %v; want ErrOutOfOrderSequence after the hold", err)
		}
	}
	h.held = nil
	if n := h.r.HoldingAhead(); n != 0 {
		t.Fatalf("%d requests still held", n)
	}
	if leo := h.r.Log().LogEndOffset(); leo != 4 {
		t.Fatalf("log end %d; want 4 (nothing held was appended)", leo)
	}
}

// The partition holds at most perPartition requests and perPartitionBytes,
// whichever producers they come from; a lone request is held whatever its
// size, and room freed by an append is used again.
func TestHoldIsBoundedPerPartition(t *testing.T) {
	one := int64(len(idemBatch(t, 1, 5, 1)))
	t.Run("requests", func(t *testing.T) {
		lim := defaultHoldLimits
		lim.perPartition = 3
		h := newHoldTest(t, lim, 1, 2, 3, 4)
		for pid := int64(1); pid <= 3; pid++ {
			h.hold(idemBatch(t, pid, 5, 1))
		}
		h.refused("a fourth producer's batch", idemBatch(t, 4, 5, 1))
		// Producer 1's gap fills: its held batch lands and frees room.
		if _, err := produceAll(h.r, idemBatch(t, 1, 2, 3)); err != nil {
			t.Fatal(err)
		}
		if err := <-h.held[0]; err != nil {
			t.Fatalf("the held batch after its gap filled: %v", err)
		}
		h.held = h.held[1:]
		h.hold(idemBatch(t, 4, 5, 1))
	})
	t.Run("bytes", func(t *testing.T) {
		lim := defaultHoldLimits
		lim.perPartitionBytes = one // room for one request; a lone one fits anyway
		h := newHoldTest(t, lim, 1, 2)
		h.hold(idemBatch(t, 1, 5, 2)) // bigger than the bound, but alone
		h.refused("a second request past the byte bound", idemBatch(t, 2, 5, 1))
	})
	t.Run("producer bytes", func(t *testing.T) {
		lim := defaultHoldLimits
		lim.perProducerBatches = 0 // no room past a lone request
		h := newHoldTest(t, lim, 1, 2)
		h.hold(idemBatch(t, 1, 5, 1))
		h.refused("the producer's second request", idemBatch(t, 1, 6, 1))
		h.hold(idemBatch(t, 2, 5, 1))
	})
}
