package server

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
	"github.com/strata-mq/strata/lib/kafkawire/brokerid"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/testwait"
)

// registryController is a controller that streams one snapshot and keeps
// the coordinator registrations it is sent; its second heartbeat answers
// NOT_FOUND, as after a lapsed lease.
type registryController struct {
	controllerv1connect.UnimplementedControllerServiceHandler

	mu           sync.Mutex
	registered   []*controllerv1.CoordinatorRegistration
	heartbeats   []int64 // registration ids
	unregistered []int64
}

func (f *registryController) WatchMetadata(ctx context.Context, _ *connect.Request[controllerv1.WatchMetadataRequest], s *connect.ServerStream[controllerv1.WatchMetadataResponse]) error {
	if err := s.Send(&controllerv1.WatchMetadataResponse{Version: 1, Change: &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: &controllerv1.MetadataSnapshot{ClusterId: "c"}}}); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

func (f *registryController) RegisterCoordinator(_ context.Context, req *connect.Request[controllerv1.RegisterCoordinatorRequest]) (*connect.Response[controllerv1.RegisterCoordinatorResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registered = append(f.registered, req.Msg.GetCoordinator())
	return connect.NewResponse(&controllerv1.RegisterCoordinatorResponse{RegistrationId: int64(100 + len(f.registered)), HeartbeatIntervalMs: 10, LeaseTtlMs: 30}), nil
}

func (f *registryController) CoordinatorHeartbeat(_ context.Context, req *connect.Request[controllerv1.CoordinatorHeartbeatRequest]) (*connect.Response[controllerv1.CoordinatorHeartbeatResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heartbeats = append(f.heartbeats, req.Msg.GetRegistrationId())
	if len(f.heartbeats) == 2 {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("registration is gone; register again"))
	}
	return connect.NewResponse(&controllerv1.CoordinatorHeartbeatResponse{LeaseTtlMs: 30}), nil
}

func (f *registryController) UnregisterCoordinator(_ context.Context, req *connect.Request[controllerv1.UnregisterCoordinatorRequest]) (*connect.Response[controllerv1.UnregisterCoordinatorResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unregistered = append(f.unregistered, req.Msg.GetRegistrationId())
	return connect.NewResponse(&controllerv1.UnregisterCoordinatorResponse{}), nil
}

// With --controller the instance registers its address, its Kafka listener
// and its broker id, heartbeats, registers again when the registration is
// gone, and unregisters when it closes.
func TestRegistersWithTheController(t *testing.T) {
	fc := &registryController{}
	mux := http.NewServeMux()
	mux.Handle(controllerv1connect.NewControllerServiceHandler(fc))
	ctl := httptest.NewServer(mux)
	t.Cleanup(ctl.Close)
	s := openStore(t, "sqlite")
	t.Cleanup(func() { s.Close() })
	cfg := &Config{InstanceID: "coordinator-reg", AdvertiseURL: "http://coord:9094", Gateway: ctl.URL, Controller: ctl.URL,
		SessionTimeout: time.Minute, OwnershipLease: time.Minute, LagInterval: time.Hour,
		listeners: []serve.Listener{{Name: serve.KafkaListenerName, URL: "kafka://coord:9098"}}}
	c, err := Start(context.Background(), cfg, "127.0.0.1:0", Options{Store: s, HTTPClient: ctl.Client(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, "ready", func() error { return c.Ready(context.Background()) })
	state := func() (regs []*controllerv1.CoordinatorRegistration, hbs, unregs []int64) {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		return append(regs, fc.registered...), append(hbs, fc.heartbeats...), append(unregs, fc.unregistered...)
	}
	testwait.Until(t, 30*time.Second, "a registration again after the registration was gone, and its heartbeat", func() error {
		regs, hbs, _ := state()
		return testwait.True(len(regs) >= 2 && len(hbs) >= 3)
	})
	regs, hbs, _ := state()
	r := regs[0]
	if r.GetCoordinatorId() != "coordinator-reg" || r.GetKafkaNodeId() != brokerid.Coordinator("coordinator-reg") ||
		r.GetAddress() != "http://coord:9094" || len(r.GetListeners()) != 1 || r.GetListeners()[0].GetAddress() != "kafka://coord:9098" || r.GetIncarnationId() == "" {
		t.Fatalf("registration %v", r)
	}
	if regs[1].GetIncarnationId() != r.GetIncarnationId() {
		t.Errorf("registered again as another incarnation: %v", regs[1])
	}
	if hbs[0] != 101 || hbs[2] != 102 {
		t.Errorf("heartbeats for registrations %v; want 101, 101 (gone), then 102", hbs)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	regs, _, unregs := state()
	if len(unregs) != 1 || unregs[0] != int64(100+len(regs)) {
		t.Fatalf("unregistered %v after %d registrations; want the last one", unregs, len(regs))
	}
}
