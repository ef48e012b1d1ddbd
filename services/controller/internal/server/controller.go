package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/services/controller/internal/election"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember"
	"github.com/strata-mq/strata/services/controller/internal/metastore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config is what a Controller needs beyond its etcd member's config.
type Config struct {
	// Member configures the embedded etcd member; Member.Name is the controller id.
	Member etcdmember.Config
	// Address is this controller's Connect base URL, published in the election.
	Address string
	// NodeSessionTimeout is the node lease TTL; 0 means metastore.DefaultNodeSessionTimeout.
	NodeSessionTimeout time.Duration
	// SessionTTL is the controller's election session TTL; 0 means election.DefaultSessionTTL.
	SessionTTL time.Duration
	// ReconcileInterval is the active controller's safety-net reconcile
	// period; 0 means 2 s.
	ReconcileInterval time.Duration
	// WatchKeepAlive is the progress-notice period of WatchMetadata; 0 means 5 s.
	WatchKeepAlive time.Duration
	// Balance configures the active controller's rebalancing (active.go).
	Balance BalanceConfig
	// HTTPClient and ClientOptions are for calls to storage nodes (partition
	// sizes for rebalance plans); nil means http.DefaultClient.
	HTTPClient    *http.Client
	ClientOptions []connect.ClientOption
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Controller is one controller process's state. Close is safe to call twice.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	member   *etcdmember.Member
	store    *metastore.Store
	elector  *election.Elector
	draining chan struct{}
	once     sync.Once
}

// Start starts the etcd member, waits until it is ready (or ctx ends),
// records the cluster id and starts campaigning.
func Start(ctx context.Context, cfg Config) (*Controller, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	mem, err := etcdmember.Start(cfg.Member)
	if err != nil {
		return nil, err
	}
	if err := mem.WaitReady(ctx); err != nil {
		mem.Close()
		return nil, err
	}
	c := &Controller{cfg: cfg, log: log, member: mem, store: metastore.New(mem.Client(), cfg.NodeSessionTimeout), draining: make(chan struct{})}
	if _, err := c.store.EnsureClusterID(ctx); err != nil {
		mem.Close()
		return nil, fmt.Errorf("server: cluster id: %w", err)
	}
	c.elector = election.Start(mem.Client(), election.Config{
		ID: cfg.Member.Name, Address: cfg.Address, SessionTTL: cfg.SessionTTL, Logger: log,
	}, c.runActive)
	c.registerMetrics() // telemetry.go
	return c, nil
}

// runActive is the active controller's work: the reaction to node
// liveness (Reconcile) and the balancing loops of active.go, until ctx
// ends or one of them finds the guard gone.
func (c *Controller) runActive(ctx context.Context, guard clientv3.Cmp) error {
	return c.runActiveLoops(ctx, guard, func(ctx context.Context) error {
		return c.store.RunActive(ctx, guard, c.cfg.ReconcileInterval,
			func(n int) { c.log.Info("partition leadership updated", slog.Int("partitions", n)) },
			func(err error) { c.log.Warn("reconcile failed; retrying", slog.String("err", err.Error())) })
	})
}

// Handler returns the Connect handler's path and http.Handler.
func (c *Controller) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return controllerv1connect.NewControllerServiceHandler(&Handler{c: c}, opts...)
}

// Store is the metadata store.
func (c *Controller) Store() *metastore.Store { return c.store }

// ID is the controller id.
func (c *Controller) ID() string { return c.cfg.Member.Name }

// IsActive reports whether this controller is the active one.
func (c *Controller) IsActive() bool { return c.elector.IsActive() }

// Active returns the active controller's id, or "" when unknown.
func (c *Controller) Active() string { return c.elector.Active().GetControllerId() }

// Ready reports nil when the etcd member is ready and the active
// controller is known.
func (c *Controller) Ready(context.Context) error {
	if !c.member.Ready() {
		return errors.New("etcd member not ready")
	}
	if c.elector.Active() == nil {
		return errors.New("no active controller known")
	}
	return nil
}

// Err delivers a fatal error of the etcd member.
func (c *Controller) Err() <-chan error { return c.member.Err() }

// Drain ends metadata streams (they tell clients to reconnect elsewhere).
func (c *Controller) Drain() {
	select {
	case <-c.draining:
	default:
		close(c.draining)
	}
}

// Close resigns (another controller takes over at once), then stops the
// etcd member. Safe to call twice; etcd reports no error on close, so it
// returns nil.
func (c *Controller) Close() error {
	c.once.Do(func() {
		c.Drain()
		c.elector.Close()
		c.member.Close()
	})
	return nil
}

// quorum lists controllers: those announced (healthy) and etcd members
// that are not (unhealthy).
func (c *Controller) quorum(ctx context.Context, m *metastore.Model) *controllerv1.ControllerQuorum {
	q := m.Quorum()
	resp, err := c.member.Client().MemberList(ctx)
	if err != nil {
		return q
	}
	have := map[string]bool{}
	for _, mm := range q.Members {
		have[mm.ControllerId] = true
	}
	for _, em := range resp.Members {
		if em.Name != "" && !have[em.Name] {
			q.Members = append(q.Members, &controllerv1.ControllerMember{ControllerId: em.Name})
		}
	}
	sortMembers(q.Members)
	return q
}

func sortMembers(ms []*controllerv1.ControllerMember) {
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && ms[j].ControllerId < ms[j-1].ControllerId; j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

func httpMux(c *Controller, opts ...connect.HandlerOption) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(c.Handler(opts...))
	return mux
}
