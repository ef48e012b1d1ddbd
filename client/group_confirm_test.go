package client

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	"github.com/strata-mq/strata/lib/testwait"
)

// TestConfirmMembership: ConfirmMembership answers with the coordinator's
// answer to a heartbeat sent for it: the member's assignment while it
// belongs to the group, ErrFenced when the coordinator fenced it, and the context's
// error while the coordinator cannot be reached.
func TestConfirmMembership(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	co := &scriptedCoordinator{topic: "t", parts: 1, committed: map[int32]int64{}}
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(co))
	var down atomic.Bool
	fc.SetCoordinator(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	ctx := ctxT(t)
	gc, err := NewGroupConsumer(fc.GatewayURL(), "g", []string{"t"},
		GroupConsumerOptions(RetryBackoff(5*time.Millisecond), MaxRetryBackoff(20*time.Millisecond), FetchMaxWait(50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close(context.Background())
	testwait.Until(t, 20*time.Second, "the member to join", func() error {
		if gc.Epoch() == 0 {
			return errors.New("not joined")
		}
		return nil
	})
	if tps, err := gc.ConfirmMembership(ctx); err != nil || !slices.Equal(tps, []TopicPartition{{"t", 0}}) {
		t.Fatalf("ConfirmMembership of a member = %v, %v; want [t-0], nil", tps, err)
	}
	// Fenced for good: a heartbeat already in flight, which does not
	// count, must not take the only fenced answer and leave a rejoin's
	// success to the heartbeat that does (it did on a busy machine).
	co.FenceFromNowOn()
	if _, err := gc.ConfirmMembership(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("ConfirmMembership of a fenced member = %v; want ErrFenced", err)
	}
	down.Store(true)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := gc.ConfirmMembership(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ConfirmMembership with the coordinator unreachable = %v; want the context's deadline", err)
	}
}
