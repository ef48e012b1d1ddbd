package metaview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/testwait"
)

// scriptedController answers each WatchMetadata with the next queued list
// of messages, then ends the stream UNAVAILABLE (or, with none queued,
// holds it open until the client goes away). It records every request.
type scriptedController struct {
	controllerv1connect.UnimplementedControllerServiceHandler
	streams chan []*controllerv1.WatchMetadataResponse

	mu   sync.Mutex
	reqs []*controllerv1.WatchMetadataRequest
}

func (s *scriptedController) WatchMetadata(ctx context.Context, req *connect.Request[controllerv1.WatchMetadataRequest], stream *connect.ServerStream[controllerv1.WatchMetadataResponse]) error {
	s.mu.Lock()
	s.reqs = append(s.reqs, req.Msg)
	s.mu.Unlock()
	select {
	case msgs := <-s.streams:
		for _, m := range msgs {
			if err := stream.Send(m); err != nil {
				return err
			}
		}
		return connect.NewError(connect.CodeUnavailable, errors.New("metadata watch lost"))
	default:
		<-ctx.Done()
		return ctx.Err()
	}
}

func (s *scriptedController) requests() []*controllerv1.WatchMetadataRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*controllerv1.WatchMetadataRequest(nil), s.reqs...)
}

func startScripted(t *testing.T, streams ...[]*controllerv1.WatchMetadataResponse) (*scriptedController, controllerv1connect.ControllerServiceClient) {
	t.Helper()
	s := &scriptedController{streams: make(chan []*controllerv1.WatchMetadataResponse, len(streams))}
	for _, m := range streams {
		s.streams <- m
	}
	mux := http.NewServeMux()
	mux.Handle(controllerv1connect.NewControllerServiceHandler(s))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return s, controllerv1connect.NewControllerServiceClient(srv.Client(), srv.URL)
}

// runWatch runs Watch until the test ends and returns the versions Notify
// saw.
func runWatch(t *testing.T, c *Cache, cfg WatchConfig) func() []int64 {
	t.Helper()
	var mu sync.Mutex
	var seen []int64
	cfg.Notify = func(v *View) {
		mu.Lock()
		seen = append(seen, v.Version)
		mu.Unlock()
	}
	cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(ctx, c, cfg)
	}()
	t.Cleanup(func() {
		cancel()
		<-done // Watch returns once ctx ends
	})
	return func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return append([]int64(nil), seen...)
	}
}

func TestWatchResumesFromTheLastAppliedVersion(t *testing.T) {
	s, client := startScripted(t,
		[]*controllerv1.WatchMetadataResponse{snap(5), delta(6, &controllerv1.MetadataDelta{})},
		// The resumed stream repeats 6, then moves on.
		[]*controllerv1.WatchMetadataResponse{delta(6, &controllerv1.MetadataDelta{}), delta(7, &controllerv1.MetadataDelta{})},
	)
	c := NewCache()
	seen := runWatch(t, c, WatchConfig{Controllers: []controllerv1connect.ControllerServiceClient{client}, NodeID: 3, Resume: true})
	testwait.Until(t, 30*time.Second, "version 7 and a third stream", func() error {
		if v := c.Load(); v == nil || v.Version != 7 || len(s.requests()) < 3 {
			return fmt.Errorf("view %+v, %d requests", v, len(s.requests()))
		}
		return nil
	})
	reqs := s.requests()
	for i, want := range []int64{0, 6, 7} {
		if reqs[i].GetFromVersion() != want || reqs[i].GetNodeId() != 3 {
			t.Errorf("request %d: from_version %d node_id %d; want %d and 3", i, reqs[i].GetFromVersion(), reqs[i].GetNodeId(), want)
		}
	}
	if got := fmt.Sprint(seen()); got != "[5 6 6 7]" {
		t.Errorf("Notify saw versions %s; want [5 6 6 7] (the repeated delta notifies with the view unchanged)", got)
	}
}

func TestWatchAsksForAFreshSnapshotByDefault(t *testing.T) {
	s, client := startScripted(t,
		[]*controllerv1.WatchMetadataResponse{snap(5), delta(6, &controllerv1.MetadataDelta{})},
		[]*controllerv1.WatchMetadataResponse{snap(4)},
	)
	c := NewCache()
	runWatch(t, c, WatchConfig{Controllers: []controllerv1connect.ControllerServiceClient{client}, NodeID: NotANode})
	testwait.Until(t, 30*time.Second, "the second snapshot and a third stream", func() error {
		if v := c.Load(); v == nil || v.Version != 4 || len(s.requests()) < 3 {
			return fmt.Errorf("view %+v, %d requests", v, len(s.requests()))
		}
		return nil
	})
	for i, r := range s.requests() {
		if r.GetFromVersion() != 0 || r.GetNodeId() != -1 {
			t.Errorf("request %d: from_version %d node_id %d; want 0 and -1", i, r.GetFromVersion(), r.GetNodeId())
		}
	}
}

// A stream whose first message is a delta (nothing to apply it to) is
// dropped, and the next one is asked for a snapshot.
func TestWatchReconnectsAfterAMessageItCannotApply(t *testing.T) {
	s, client := startScripted(t,
		[]*controllerv1.WatchMetadataResponse{delta(3, &controllerv1.MetadataDelta{}), snap(9)},
		[]*controllerv1.WatchMetadataResponse{snap(8)},
	)
	c := NewCache()
	seen := runWatch(t, c, WatchConfig{Controllers: []controllerv1connect.ControllerServiceClient{client}, Resume: true})
	testwait.Until(t, 30*time.Second, "the second stream's snapshot", func() error {
		if v := c.Load(); v == nil || v.Version != 8 {
			return fmt.Errorf("view %+v", v)
		}
		return nil
	})
	if got := fmt.Sprint(seen()); got != "[8]" {
		t.Errorf("Notify saw %s; want [8]: the first stream ends at its bad first message", got)
	}
	if r := s.requests()[1]; r.GetFromVersion() != 0 {
		t.Errorf("second request from_version %d; want 0 (nothing applied yet)", r.GetFromVersion())
	}
}

func TestWatchMovesOnToTheNextController(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	_, live := startScripted(t, []*controllerv1.WatchMetadataResponse{snap(5)})
	c := NewCache()
	runWatch(t, c, WatchConfig{
		Controllers: []controllerv1connect.ControllerServiceClient{controllerv1connect.NewControllerServiceClient(http.DefaultClient, dead), live},
		Names:       []string{dead, "live"},
	})
	select {
	case <-c.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("no snapshot from the second controller")
	}
}

func TestWatchWithoutControllersReturns(t *testing.T) {
	Watch(context.Background(), NewCache(), WatchConfig{}) // must not block
}

// Changed is closed by a snapshot or a delta that moves the view, and not
// by a progress notice, which leaves it as it is.
func TestCacheChanged(t *testing.T) {
	c := NewCache()
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ch := c.Changed()
	if err := c.Apply(&controllerv1.WatchMetadataResponse{Version: 1, Change: &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: &controllerv1.MetadataSnapshot{}}}); err != nil {
		t.Fatal(err)
	}
	if !closed(ch) {
		t.Fatal("the first snapshot did not close Changed")
	}
	ch = c.Changed()
	if err := c.Apply(&controllerv1.WatchMetadataResponse{Version: 1, Change: &controllerv1.WatchMetadataResponse_Delta{Delta: &controllerv1.MetadataDelta{}}}); err != nil {
		t.Fatal(err)
	}
	if closed(ch) {
		t.Fatal("a progress notice closed Changed")
	}
	if err := c.Apply(&controllerv1.WatchMetadataResponse{Version: 2, Change: &controllerv1.WatchMetadataResponse_Delta{Delta: &controllerv1.MetadataDelta{}}}); err != nil {
		t.Fatal(err)
	}
	if !closed(ch) {
		t.Fatal("a newer delta did not close Changed")
	}
	if closed(c.Changed()) {
		t.Fatal("the next Changed is already closed")
	}
}
