package metadata

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/services/storage/internal/clock"
)

// leaseController answers RegisterNode and Heartbeat with a 10 s lease and
// lets a test make heartbeats fail or take (fake) time.
type leaseController struct {
	controllerv1connect.UnimplementedControllerServiceHandler
	clk *clock.Fake

	mu       sync.Mutex
	down     bool          // heartbeats fail with UNAVAILABLE
	slowOnce time.Duration // the next heartbeat lets this much fake time pass, then heartbeats fail
	answered int           // heartbeats answered, successfully or not
	changed  chan struct{} // closed and replaced when answered grows
}

const leaseTTL = 10 * time.Second

func (lc *leaseController) RegisterNode(context.Context, *connect.Request[controllerv1.RegisterNodeRequest]) (*connect.Response[controllerv1.RegisterNodeResponse], error) {
	return connect.NewResponse(&controllerv1.RegisterNodeResponse{NodeEpoch: 7, HeartbeatIntervalMs: 50, LeaseTtlMs: int32(leaseTTL / time.Millisecond)}), nil
}

func (lc *leaseController) Heartbeat(context.Context, *connect.Request[controllerv1.HeartbeatRequest]) (*connect.Response[controllerv1.HeartbeatResponse], error) {
	lc.mu.Lock()
	defer func() {
		lc.answered++
		close(lc.changed)
		lc.changed = make(chan struct{})
		lc.mu.Unlock()
	}()
	if d := lc.slowOnce; d > 0 {
		// The controller renews the lease when the request arrives; the
		// answer reaches the node d later.
		lc.clk.Advance(d)
		lc.slowOnce, lc.down = 0, true
		return connect.NewResponse(&controllerv1.HeartbeatResponse{LeaseTtlMs: int32(leaseTTL / time.Millisecond)}), nil
	}
	if lc.down {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("controller unreachable"))
	}
	return connect.NewResponse(&controllerv1.HeartbeatResponse{LeaseTtlMs: int32(leaseTTL / time.Millisecond)}), nil
}

func (lc *leaseController) WatchMetadata(ctx context.Context, _ *connect.Request[controllerv1.WatchMetadataRequest], stream *connect.ServerStream[controllerv1.WatchMetadataResponse]) error {
	if err := stream.Send(&controllerv1.WatchMetadataResponse{Version: 1, Change: &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: &controllerv1.MetadataSnapshot{}}}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// set changes the controller's behaviour and returns how many heartbeats
// it had answered.
func (lc *leaseController) set(fn func()) int {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	fn()
	return lc.answered
}

// waitAnswered waits until more than n heartbeats have been answered.
func (lc *leaseController) waitAnswered(t *testing.T, n int) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		lc.mu.Lock()
		got, ch := lc.answered, lc.changed
		lc.mu.Unlock()
		if got > n {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no heartbeat answered after %d", n)
		}
	}
}

// The node's own lease (Fenced) is measured on the monotonic clock from
// the moment each heartbeat was sent: a wall clock stepped back does not
// keep a node that lost the controller accepting writes, a wall clock
// stepped forward does not fence a node whose heartbeats go through, and a
// slow answer does not stretch the lease past the controller's.
func TestLeaseUsesMonotonicTimeFromHeartbeatSend(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lc := &leaseController{clk: clk, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle(controllerv1connect.NewControllerServiceHandler(lc))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := New(Config{NodeID: 1, Address: "http://127.0.0.1:1", Controllers: []string{srv.URL}, Clock: clk,
		Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, func(*metaview.View) {})
	}()
	defer func() { cancel(); <-done }()

	lc.waitAnswered(t, lc.set(func() {}))
	if c.Fenced() {
		t.Fatal("fenced right after a heartbeat was accepted")
	}

	// The controller becomes unreachable and the wall clock is stepped
	// back an hour while the lease runs out: the node must fence itself.
	n := lc.set(func() { lc.down = true })
	lc.waitAnswered(t, n+1) // a failed heartbeat: no renewal in flight
	clk.StepWall(-time.Hour)
	clk.Advance(leaseTTL + time.Second)
	if !c.Fenced() {
		t.Error("a node whose lease ran out while the wall clock was stepped back still accepts writes")
	}

	// Heartbeats go through again, and the wall clock jumps a day ahead:
	// the node is healthy and must not fence itself.
	n = lc.set(func() { lc.down = false })
	lc.waitAnswered(t, n+1)
	clk.StepWall(24 * time.Hour)
	if c.Fenced() {
		t.Error("a wall clock stepped forward fenced a node whose heartbeats are accepted")
	}

	// A heartbeat whose answer takes 6 s: the controller renewed the lease
	// when the request arrived, so 5 s after the answer (11 s after the
	// renewal) the lease is over on the controller and must be on the node.
	n = lc.set(func() { lc.slowOnce = 6 * time.Second })
	lc.waitAnswered(t, n+1) // the slow one, then a failed one, so the slow answer was applied
	clk.Advance(5 * time.Second)
	if !c.Fenced() {
		t.Error("the node's lease outlives the controller's: measured from the heartbeat's answer, not its sending")
	}
}

// silentController takes heartbeats and never answers them, as a
// controller cut off from its peers may, until the call gives up.
type silentController struct {
	*leaseController
	held chan struct{} // gets a value per heartbeat held
}

func (sc *silentController) Heartbeat(ctx context.Context, _ *connect.Request[controllerv1.HeartbeatRequest]) (*connect.Response[controllerv1.HeartbeatResponse], error) {
	select {
	case sc.held <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A controller that takes a heartbeat and never answers does not hold the
// node's heartbeats: each attempt has a deadline, and the next controller
// renews the lease.
func TestHeartbeatMovesOnFromASilentController(t *testing.T) {
	serve := func(h controllerv1connect.ControllerServiceHandler) string {
		mux := http.NewServeMux()
		mux.Handle(controllerv1connect.NewControllerServiceHandler(h))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	silent := &silentController{leaseController: &leaseController{clk: clk, changed: make(chan struct{})}, held: make(chan struct{}, 1)}
	healthy := &leaseController{clk: clk, changed: make(chan struct{})}
	c := New(Config{NodeID: 1, Address: "http://127.0.0.1:1", Controllers: []string{serve(silent), serve(healthy)}, Clock: clk,
		Logger: slog.New(slog.DiscardHandler), AttemptTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, func(*metaview.View) {})
	}()
	defer func() { cancel(); <-done }()

	<-silent.held // registered with the first controller, which then holds a heartbeat
	n := healthy.set(func() {})
	healthy.waitAnswered(t, n+1)
	if c.Fenced() {
		t.Error("fenced while the second controller renews the lease")
	}
}
