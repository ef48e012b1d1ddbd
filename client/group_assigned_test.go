package client

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	"github.com/strata-mq/strata/lib/testwait"
)

// shrinkingCoordinator assigns every partition on join, then, once shrink
// is called, only partition 0 (another member joined and took the rest),
// to a member that joins again too.
type shrinkingCoordinator struct {
	*scriptedCoordinator
	mu     sync.Mutex
	shrunk bool
	sent   chan struct{} // closed once the shrunk assignment was answered
}

func (s *shrinkingCoordinator) ConsumerGroupHeartbeat(ctx context.Context, req *connect.Request[coordinatorv1.ConsumerGroupHeartbeatRequest]) (*connect.Response[coordinatorv1.ConsumerGroupHeartbeatResponse], error) {
	resp, err := s.scriptedCoordinator.ConsumerGroupHeartbeat(ctx, req)
	if err != nil || req.Msg.GetMemberEpoch() < 0 {
		return resp, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shrunk {
		resp.Msg.Assignment = &coordinatorv1.Assignment{Partitions: []*commonv1.TopicPartitions{{Topic: s.topic, Partitions: []int32{0}}}}
		select {
		case <-s.sent:
		default:
			close(s.sent)
		}
	}
	return resp, nil
}

func (s *shrinkingCoordinator) shrink() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shrunk = true
}

// TestOnAssignedOnlyTakenPartitions: partitions revoked again while the
// member read their start offsets are never taken, and OnAssigned is not
// told of them (the coordinator, seeing the member no longer claim them,
// may already have given them to another member).
func TestOnAssignedOnlyTakenPartitions(t *testing.T) {
	fc := newFake(t, 1, "t", 4)
	co := &shrinkingCoordinator{scriptedCoordinator: &scriptedCoordinator{topic: "t", parts: 4, committed: map[int32]int64{}}, sent: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(co))
	fc.SetCoordinator(mux)

	var mu sync.Mutex
	var assigned []TopicPartition
	first := true
	var gc *GroupConsumer
	gc, err := NewGroupConsumer(fc.GatewayURL(), "g", []string{"t"},
		GroupConsumerOptions(RetryBackoff(5*time.Millisecond), MaxRetryBackoff(20*time.Millisecond), FetchMaxWait(50*time.Millisecond)),
		// The first start-offset lookup (all four partitions) has the
		// coordinator shrink the assignment to partition 0, and every
		// lookup waits until the heartbeat that carried it has updated
		// the member's target: a lookup whose call ended first (a loaded
		// machine) fails and is made again, and must not answer before.
		StartOffsets(func(ctx context.Context, _ int32, tps []TopicPartition) (map[TopicPartition]int64, error) {
			mu.Lock()
			shrink := first
			first = false
			mu.Unlock()
			if shrink {
				co.shrink()
			}
			for {
				gc.mu.Lock()
				shrunk := len(gc.target) == 1
				gc.mu.Unlock()
				if shrunk {
					break
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
			}
			return map[TopicPartition]int64{}, nil
		}),
		OnAssigned(func(_ context.Context, tps []TopicPartition) {
			mu.Lock()
			defer mu.Unlock()
			assigned = append(assigned, tps...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gc.Close(context.Background()) })
	ctx := ctxT(t)
	testwait.Until(t, 10*time.Second, "the member to own partition 0 alone", func() error {
		pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, _ = gc.Poll(pctx)
		if got := gc.Assignment(); !slices.Equal(got, []TopicPartition{{"t", 0}}) {
			return testwait.ErrNotYet
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, tp := range assigned {
		if tp.Partition != 0 {
			t.Fatalf("OnAssigned was told of %v (all: %v); only partition 0 was ever taken", tp, assigned)
		}
	}
}
