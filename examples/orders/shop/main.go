// Command shop is the orders story's shop: it publishes order events
// (placed, paid, shipped, cancelled) as JSON to the orders topic, keyed by
// order id, at a set rate. Each order's events carry its sequence numbers
// 1, 2, 3..., and an order's next event is published only once the one
// before was acknowledged, so the topic holds every order's events in
// order with none missing.
//
// It prints a progress line every few seconds and, when it ends (after
// --duration, or on SIGINT or SIGTERM), one last line that the demo reads:
//
//	shop: done: events=24000 orders=5100 failed=0
//
// events counts the events the cluster acknowledged; failed the ones it
// did not (their order gets no further event).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/examples/orders/event"
)

func main() {
	gateway := flag.String("gateway", envOr("STRATA_GATEWAY", "http://127.0.0.1:9092"), "gateway base URL (STRATA_GATEWAY)")
	topic := flag.String("topic", "orders", "topic to publish to")
	rate := flag.Int("rate", 400, "events per second")
	duration := flag.Duration("duration", time.Minute, "how long to publish; 0: until SIGINT or SIGTERM")
	maxOpen := flag.Int("max-open", 500, "orders in progress at once")
	progress := flag.Duration("progress", 5*time.Second, "interval of the progress lines")
	seed := flag.Uint64("seed", 0, "random seed; 0: from the clock")
	flag.Parse()
	if *rate < 1 || *maxOpen < 1 || *duration < 0 || *progress <= 0 {
		fmt.Fprintln(os.Stderr, "shop: --rate and --max-open must be positive, --duration not negative")
		os.Exit(2)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	p, err := client.NewProducer(*gateway, client.DeliveryTimeout(5*time.Minute))
	if err != nil {
		fmt.Fprintf(os.Stderr, "shop: %v\n", err)
		os.Exit(1)
	}
	s := &shop{p: p, topic: *topic, maxOpen: *maxOpen, rnd: rand.New(rand.NewPCG(*seed, *seed>>1|1))}
	s.run(ctx, *rate, *progress)
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	err = p.Flush(fctx)
	cancel()
	p.Close()
	events, orders, failed := s.counts()
	if err != nil {
		fmt.Fprintf(os.Stderr, "shop: flush: %v\n", err)
	}
	fmt.Printf("shop: done: events=%d orders=%d failed=%d\n", events, orders, failed)
	if err != nil || failed > 0 {
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// order is one order in progress.
type order struct {
	id       string
	seq      int   // sequence number of the last event sent
	amount   int64 // cents
	paid     bool
	inflight bool // its last event is not acknowledged yet
}

type shop struct {
	p       *client.Producer
	topic   string
	maxOpen int
	rnd     *rand.Rand // used by run's goroutine only

	mu     sync.Mutex
	open   []*order // orders whose lifecycle is not over
	placed int      // orders placed (their first event sent)
	acked  int64
	orders int64 // orders whose placed event was acknowledged
	failed int64
}

func (s *shop) counts() (events, orders, failed int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked, s.orders, s.failed
}

// run publishes at rate until ctx ends, printing progress.
func (s *shop) run(ctx context.Context, rate int, progress time.Duration) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	report := time.NewTicker(progress)
	defer report.Stop()
	start, sent := time.Now(), 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-report.C:
			s.mu.Lock()
			fmt.Printf("shop: %d events acknowledged, %d orders placed, %d open\n", s.acked, s.placed, len(s.open))
			s.mu.Unlock()
		case now := <-tick.C:
			due := int(now.Sub(start).Seconds() * float64(rate))
			for ; sent < due; sent++ {
				if !s.next(ctx) {
					sent = due // every open order waits for an acknowledgement
					break
				}
			}
		}
	}
}

// next publishes one event: a new order, or the next step of an open one
// whose last event was acknowledged. It reports false when it could do
// neither.
func (s *shop) next(ctx context.Context) bool {
	s.mu.Lock()
	var ready []*order
	for _, o := range s.open {
		if !o.inflight {
			ready = append(ready, o)
		}
	}
	var o *order
	var e event.Event
	switch {
	case len(s.open) < s.maxOpen && (len(ready) == 0 || s.rnd.Float64() < 0.3):
		s.placed++
		o = &order{id: fmt.Sprintf("order-%07d", s.placed), amount: 500 + s.rnd.Int64N(50000)}
		s.open = append(s.open, o)
		e = event.Event{Kind: event.Placed, AmountCents: o.amount}
	case len(ready) > 0:
		o = ready[s.rnd.IntN(len(ready))]
		r := s.rnd.Float64()
		switch {
		case !o.paid && r < 0.85:
			o.paid = true
			e = event.Event{Kind: event.Paid, AmountCents: o.amount}
		case !o.paid:
			e = event.Event{Kind: event.Cancelled}
		case r < 0.9:
			e = event.Event{Kind: event.Shipped}
		default:
			e = event.Event{Kind: event.Cancelled, AmountCents: o.amount}
		}
	default:
		s.mu.Unlock()
		return false
	}
	o.seq++
	o.inflight = true
	e.OrderID, e.Seq, e.At = o.id, o.seq, time.Now()
	last := e.Kind == event.Shipped || e.Kind == event.Cancelled
	s.mu.Unlock()
	rec := &client.Record{Topic: s.topic, Key: []byte(o.id), Value: e.Encode(), Timestamp: e.At}
	// The record is bounded by DeliveryTimeout, not by the end of the run.
	s.p.Produce(context.WithoutCancel(ctx), rec, func(_ *client.Record, err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.failed++
			fmt.Fprintf(os.Stderr, "shop: %s event %d: %v\n", e.OrderID, e.Seq, err)
			s.close(o) // its next event would break the order's sequence
			return
		}
		s.acked++
		if e.Seq == 1 {
			s.orders++
		}
		o.inflight = false
		if last {
			s.close(o)
		}
	})
	return true
}

// close drops o from the open orders; s.mu is held.
func (s *shop) close(o *order) {
	for i, x := range s.open {
		if x == o {
			s.open = append(s.open[:i], s.open[i+1:]...)
			return
		}
	}
}
