package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/guard"
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
	// Guard authenticates and authorizes the handler's requests
	// (lib/guard; the process's, from lib/serve). The controller keeps it
	// current from its own etcd member: every change of users, ACLs or
	// quotas is applied to it as soon as the member sees it, on every
	// controller, active or not. Nil means a guard that does not enforce
	// (everything allowed, as without --require-auth).
	Guard *guard.Guard
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
	guard    *guard.Guard
	draining chan struct{}
	once     sync.Once

	// The security watch (watchSecurity): stopSecurity ends it,
	// securityDone is closed when it has, securityLoaded is set once the
	// guard holds the state read from etcd.
	stopSecurity   context.CancelFunc
	securityDone   chan struct{}
	securityLoaded atomic.Bool

	quotas quotaShares // the storage nodes' quota traffic (quotashare.go)
}

// Start starts the etcd member, waits until it is ready (or ctx ends),
// records the cluster id, starts keeping the guard current from etcd
// (watchSecurity) and starts campaigning.
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
	c := &Controller{cfg: cfg, log: log, member: mem, store: metastore.New(mem.Client(), cfg.NodeSessionTimeout), guard: cfg.Guard, draining: make(chan struct{})}
	if _, err := c.store.EnsureClusterID(ctx); err != nil {
		mem.Close()
		return nil, fmt.Errorf("server: cluster id: %w", err)
	}
	if err := c.store.EnsureSCRAMMockSecret(ctx); err != nil {
		mem.Close()
		return nil, fmt.Errorf("server: SCRAM mock secret: %w", err)
	}
	if c.guard == nil {
		if c.guard, err = guard.New(ctx, guard.Config{Logger: log}); err != nil {
			mem.Close()
			return nil, fmt.Errorf("server: guard: %w", err)
		}
	}
	sctx, stop := context.WithCancel(context.Background())
	c.stopSecurity, c.securityDone = stop, make(chan struct{})
	go c.watchSecurity(sctx)
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

// watchSecurity applies the users, ACLs and quotas in etcd to the guard,
// at once and after every change, until ctx ends.
func (c *Controller) watchSecurity(ctx context.Context) {
	defer close(c.securityDone)
	c.store.WatchSecurity(ctx, func(st *commonv1.SecurityState) {
		c.guard.Apply(st)
		attrs := []any{slog.Int("users", len(st.GetUsers())), slog.Int("acls", len(st.GetAcls())), slog.Int("quotas", len(st.GetQuotas()))}
		if !c.securityLoaded.Swap(true) {
			c.log.Info("security state loaded", attrs...)
		} else {
			c.log.Debug("security state applied", attrs...)
		}
	}, func(err error) {
		c.log.Warn("security state watch failed; reading it again", slog.String("err", err.Error()))
	})
}

// Guard is the guard the handler asks, kept current from etcd.
func (c *Controller) Guard() *guard.Guard { return c.guard }

// Handler returns the Connect handler's path and http.Handler.
func (c *Controller) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	opts = append(opts[:len(opts):len(opts)], connect.WithInterceptors(rules.Interceptor()))
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

// Ready reports nil when the etcd member is ready, the security state is
// applied to the guard and the active controller is known.
func (c *Controller) Ready(context.Context) error {
	if !c.member.Ready() {
		return errors.New("etcd member not ready")
	}
	if !c.securityLoaded.Load() {
		return errors.New("security state not loaded yet")
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
		c.stopSecurity()
		<-c.securityDone
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
