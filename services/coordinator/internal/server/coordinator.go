// Package server is the coordinator: CoordinatorService on top of the
// group state machine (package group) and the offsets database (package
// offsetstore). See docs/design/coordinator.md.
//
// Ownership: an instance serves a group only while it holds the group's
// lease in the database (offsetstore.Claim), renewed every third of
// --ownership-lease. Every write about the group carries the lease's fence,
// so when another instance has claimed the group the write fails, the
// instance drops the group and answers NOT_COORDINATOR naming the new
// owner. The group's state is saved after every change and loaded by the
// next owner.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/lib/pidblock"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/coordinator/internal/assignor"
	"github.com/strata-mq/strata/services/coordinator/internal/classic"
	"github.com/strata-mq/strata/services/coordinator/internal/group"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
	"github.com/strata-mq/strata/services/kafka"
)

// Coordinator serves CoordinatorService. Safe for concurrent use.
type Coordinator struct {
	coordinatorv1connect.UnimplementedCoordinatorServiceHandler

	cfg     *Config
	id      string
	address string
	store   offsetstore.Store
	meta    *metaSource
	log     *slog.Logger
	guard   *guard.Guard
	view    *metaview.Cache // the controllers' metadata, for its security state; nil without --controller
	reg     *registrar      // registration with the controllers (register.go); nil without --controller

	claimMu sync.Mutex // serializes claims, so one instance never claims a group or transactional id twice at once
	mu      sync.Mutex
	groups  map[string]*owned

	owned txnOwnership        // transactional ids (txnowner.go)
	pids  *pidblock.Allocator // transactional producer ids; nil without a source (txn.go)

	lagMu sync.Mutex
	lag   map[lagKey]int64

	loopCtx context.Context // ends at Close: the loops and marker writers run until it does
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
	closing atomic.Bool // Close has begun; Ready fails from then on
}

type lagKey struct {
	group, topic string
	partition    int32
}

// owned is a group this instance holds the lease of.
type owned struct {
	mu      sync.Mutex
	fence   offsetstore.Fence
	expires time.Time // local view of the lease end
	g       *group.Group
	// cg is the group's classic state while it is a classic group
	// (classic.go); nil for a KIP-848 group.
	cg      *classic.Group
	dropped bool
}

// Options are the coordinator's dependencies.
type Options struct {
	Store offsetstore.Store
	// HTTPClient makes every call the coordinator sends (gateway metadata,
	// storage ListOffsets, the controllers' metadata stream);
	// strata-coordinator gives the process's, which presents its
	// certificate (mutual TLS) when TLS is on. Required.
	HTTPClient connect.HTTPClient
	ClientOpts []connect.ClientOption
	Logger     *slog.Logger
	Meter      metric.Meter // nil: no metrics
	// Guard authorizes requests (security.go); the coordinator keeps it
	// current from the controllers' metadata stream when Config.Controller
	// is set. strata-coordinator gives the process's (lib/serve). Default a
	// guard that does not enforce: everything allowed.
	Guard *guard.Guard
	// ProducerIDs fetches blocks of producer ids for transactional
	// producers. Default: the controllers' AllocateProducerIds when
	// Config.Controller is set; without either, InitTransactionalProducer
	// of a new transactional id answers UNAVAILABLE.
	ProducerIDs pidblock.FetchFunc
}

// Setup is the serve.SetupFunc of strata-coordinator.
func Setup(cfg *Config) serve.SetupFunc {
	return func(ctx context.Context, p *serve.Process) (http.Handler, error) {
		var store offsetstore.Store
		var err error
		if cfg.DSN != "" {
			store, err = offsetstore.OpenPostgres(ctx, cfg.DSN)
		} else {
			store, err = offsetstore.OpenSQLite(ctx, filepath.Join(cfg.DataDir, "offsets.db"))
		}
		if err != nil {
			return nil, err
		}
		p.OnShutdown("offsets database", func(context.Context) error { return store.Close() })
		if cfg.AdvertiseURL == "" {
			cfg.AdvertiseURL = p.URL()
		}
		// The Kafka listener is bound first so that LocateGroup answers
		// its address under the listener named "kafka", as storage nodes
		// register theirs: Kafka's FindCoordinator names it.
		kl, err := kafka.Listen(cfg.Kafka)
		if err != nil {
			return nil, err
		}
		if kl != nil {
			cfg.listeners = append(cfg.listeners, serve.Listener{Name: serve.KafkaListenerName, URL: serve.KafkaScheme + kl.Advertise()})
		}
		c, err := Start(ctx, cfg, p.Addr().String(), Options{
			Store: store, HTTPClient: p.HTTPClient(), ClientOpts: []connect.ClientOption{p.ConnectOption()},
			Logger: p.Logger(), Meter: p.Telemetry().Meter("github.com/strata-mq/strata/services/coordinator"),
			Guard: p.Guard(),
		})
		if err != nil {
			return nil, err
		}
		p.OnShutdown("coordinator", func(context.Context) error { return c.Close() })
		p.AddReadinessCheck("coordinator", c.Ready)
		if kl != nil {
			err := kl.Serve(p, kafka.Config{
				Gateway: gatewayv1connect.NewGatewayServiceClient(p.HTTPClient(), cfg.Gateway, p.ConnectOption()),
				View:    c.metadataView,
				// Storage nodes verify transactional batches with the
				// coordinator (KIP-890), so the listener offers them.
				Transactions: true,
			})
			if err != nil {
				return nil, err
			}
		}
		mux := http.NewServeMux()
		mux.Handle(c.Handler(p.HandlerOption()))
		return mux, nil
	}
}

// Start builds the coordinator and starts its background loops (lease
// renewal, session expiry, lag, and the controllers' metadata stream when
// cfg.Controller is set), which run until ctx ends or Close.
func Start(ctx context.Context, cfg *Config, listenAddr string, opts Options) (*Coordinator, error) {
	if opts.Store == nil || opts.HTTPClient == nil {
		return nil, errors.New("coordinator: Options.Store and Options.HTTPClient are required")
	}
	controllers, err := serve.ParseURLs(cfg.Controller)
	if err != nil {
		return nil, fmt.Errorf("coordinator: --controller: %w", err)
	}
	// A Config built in code (not from flags) gets the flags' defaults.
	cfg.TransactionMaxTimeout = orDur(cfg.TransactionMaxTimeout, DefaultTransactionMaxTimeout)
	cfg.TransactionAbortInterval = orDur(cfg.TransactionAbortInterval, DefaultTransactionAbortInterval)
	cfg.TransactionalIDExpiration = orDur(cfg.TransactionalIDExpiration, DefaultTransactionalIDExpiration)
	cfg.TransactionalIDExpirationInterval = orDur(cfg.TransactionalIDExpirationInterval, DefaultTransactionalIDExpirationInterval)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	g := opts.Guard
	if g == nil {
		if g, err = guard.New(ctx, guard.Config{Logger: log}); err != nil {
			return nil, fmt.Errorf("coordinator: %w", err)
		}
	}
	addr := cfg.AdvertiseURL
	if addr == "" {
		addr = "http://" + listenAddr
	}
	c := &Coordinator{
		cfg: cfg, id: cfg.instanceID(listenAddr), address: addr, store: opts.Store,
		meta: newMetaSource(cfg.Gateway, opts.HTTPClient, opts.ClientOpts), log: log, guard: g,
		groups: map[string]*owned{}, lag: map[lagKey]int64{},
		owned: txnOwnership{txns: map[string]*ownedTxn{}},
	}
	if opts.ProducerIDs == nil && len(controllers) > 0 {
		opts.ProducerIDs = c.controllerProducerIDs(controllers, opts.HTTPClient, opts.ClientOpts)
	}
	if opts.ProducerIDs != nil {
		c.pids = pidblock.New(opts.ProducerIDs)
	}
	if len(controllers) > 0 {
		c.view = metaview.NewCache()
		c.reg = &registrar{names: controllers}
		for _, u := range controllers {
			c.reg.clients = append(c.reg.clients, controllerv1connect.NewControllerServiceClient(opts.HTTPClient, u, opts.ClientOpts...))
		}
	}
	if opts.Meter != nil {
		if _, err := opts.Meter.Int64ObservableGauge("strata.coordinator.group.lag",
			metric.WithDescription("Records between a group's committed offset and the partition's high watermark."),
			metric.WithUnit("{record}"),
			metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
				c.lagMu.Lock()
				defer c.lagMu.Unlock()
				for k, v := range c.lag {
					o.Observe(v, metric.WithAttributes(attribute.String("group", k.group), attribute.String("topic", k.topic), attribute.Int("partition", int(k.partition))))
				}
				return nil
			})); err != nil {
			return nil, err
		}
	}
	log.Info("coordinator started", "instance_id", c.id, "address", c.address)
	ctx, c.cancel = context.WithCancel(serve.Untraced(ctx)) // the loops start no traces
	c.loopCtx = ctx
	c.loop(ctx, c.cfg.OwnershipLease/3, c.renew)
	c.loop(ctx, c.cfg.TransactionAbortInterval, c.sweepTxns)           // txnsweep.go
	c.loop(ctx, c.cfg.TransactionalIDExpirationInterval, c.expireTxns) // txnsweep.go
	c.loop(ctx, min(c.cfg.SessionTimeout/10, 500*time.Millisecond), c.expire)
	c.loop(ctx, c.cfg.LagInterval, c.refreshLag)
	if c.view != nil {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.watchSecurity(ctx, controllers, opts.HTTPClient, opts.ClientOpts) // security.go
		}()
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.keepRegistered(ctx, c.reg) // register.go
		}()
	}
	return c, nil
}

// listenerAddress is this instance's address on the named listener
// (--advertise-listeners), or its default address when name is empty or
// not one of its listeners.
func (c *Coordinator) listenerAddress(name string) string {
	for _, l := range c.cfg.listeners {
		if l.Name == name {
			return l.URL
		}
	}
	return c.address
}

// Handler returns the CoordinatorService path and handler.
func (c *Coordinator) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	opts = append(opts[:len(opts):len(opts)], connect.WithInterceptors(rules.Interceptor()))
	return coordinatorv1connect.NewCoordinatorServiceHandler(c, opts...)
}

// ID is this instance's id.
func (c *Coordinator) ID() string { return c.id }

// Ready is the readiness check: nil once the first metadata snapshot has
// arrived and the controller has answered a registration (with
// --controller: the ACLs to enforce come with the snapshot, and gateways
// list the instance once registered) and until Close begins. The offsets database is not asked; a call that needs it
// fails with UNAVAILABLE when it is down. It does no I/O.
func (c *Coordinator) Ready(context.Context) error {
	if c.closing.Load() {
		return errors.New("coordinator: closing")
	}
	if c.view != nil && !c.view.Ready() {
		return errors.New("coordinator: waiting for the first metadata snapshot from the controller")
	}
	if c.reg != nil && !c.reg.answered.Load() {
		return errors.New("coordinator: waiting to register with the controller")
	}
	return nil
}

// Close stops the loops and releases every lease so other instances can
// take the groups over at once. A release that fails is logged and not
// returned: the lease expires after --ownership-lease anyway, so the
// shutdown is still clean. Safe to call twice; it returns nil.
func (c *Coordinator) Close() error {
	c.once.Do(func() {
		c.closing.Store(true)
		c.owned.mu.Lock()
		c.owned.closed = true // no marker writer starts after the Wait below
		c.owned.mu.Unlock()
		c.cancel()
		c.wg.Wait()
		c.mu.Lock()
		groups := c.groups
		c.groups = map[string]*owned{}
		c.mu.Unlock()
		// Bounded like every shutdown hook (--drain-timeout).
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout())
		defer cancel()
		for _, og := range groups {
			og.mu.Lock()
			if !og.dropped {
				og.dropped = true
				if og.cg != nil {
					og.cg.Wake() // waiting classic calls give up
				}
				if err := c.store.Release(ctx, og.fence); err != nil && !errors.Is(err, offsetstore.ErrNotOwner) {
					c.log.Warn("release group", "group", og.fence.GroupID, "err", err)
				}
			}
			og.mu.Unlock()
		}
		c.releaseTxns(ctx) // txnowner.go
	})
	return nil
}

func (c *Coordinator) loop(ctx context.Context, every time.Duration, fn func(context.Context)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn(ctx)
			}
		}
	}()
}

func (c *Coordinator) snapshot() []*owned {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*owned, 0, len(c.groups))
	for _, og := range c.groups {
		out = append(out, og)
	}
	return out
}

// renew extends the lease of every owned group and transactional id; one
// whose lease was taken is dropped.
func (c *Coordinator) renew(ctx context.Context) {
	defer c.renewTxns(ctx) // txnowner.go
	for _, og := range c.snapshot() {
		og.mu.Lock()
		if og.dropped {
			og.mu.Unlock()
			continue
		}
		at := time.Now()
		err := c.store.Renew(ctx, og.fence, c.cfg.OwnershipLease)
		switch {
		case err == nil:
			og.expires = at.Add(c.cfg.OwnershipLease)
		case errors.Is(err, offsetstore.ErrNotOwner):
			c.dropLocked(og, "lease taken by another instance")
		default:
			c.log.Warn("renew group lease", "group", og.fence.GroupID, "err", err)
		}
		og.mu.Unlock()
	}
}

// expire removes members whose session ended.
func (c *Coordinator) expire(ctx context.Context) {
	now := time.Now()
	for _, og := range c.snapshot() {
		og.mu.Lock()
		if !og.dropped && og.cg != nil {
			_ = c.tickClassicLocked(ctx, og, now) // classic.go; a fenced save drops the group
		}
		if og.dropped || len(og.g.Members) == 0 {
			og.mu.Unlock()
			continue
		}
		parts := c.meta.partitionCounts(ctx, subscribed(og.g))
		if gone := og.g.Expire(parts, now); len(gone) > 0 {
			c.log.Info("members expired", "group", og.fence.GroupID, "members", gone, "group_epoch", og.g.Epoch)
			_ = c.saveLocked(ctx, og)
		}
		og.mu.Unlock()
	}
}

func subscribed(g *group.Group) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range g.Members {
		for _, t := range m.Topics {
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	sort.Strings(out)
	return out
}

// dropLocked forgets a group whose lease is gone. og.mu is held.
func (c *Coordinator) dropLocked(og *owned, why string) {
	if og.dropped {
		return
	}
	og.dropped = true
	if og.cg != nil {
		og.cg.Wake() // waiting classic calls give up
	}
	c.mu.Lock()
	if c.groups[og.fence.GroupID] == og {
		delete(c.groups, og.fence.GroupID)
	}
	c.mu.Unlock()
	c.log.Info("group dropped", "group", og.fence.GroupID, "owner_epoch", og.fence.OwnerEpoch, "why", why)
}

// saveLocked persists og's state under its fence. og.mu is held. On
// ErrNotOwner the group is dropped and NOT_COORDINATOR returned.
func (c *Coordinator) saveLocked(ctx context.Context, og *owned) error {
	save := offsetstore.Group{GroupID: og.fence.GroupID, State: og.g.State(), MemberCount: len(og.g.Members)}
	var err error
	if og.cg != nil {
		save.State, save.MemberCount, save.ProtocolType = classicState(og.cg.State), len(og.cg.Members), og.cg.ProtocolType
		if save.ProtocolType == "" {
			save.ProtocolType = "consumer" // a classic group that never had a member
		}
		save.Data, err = og.cg.Marshal()
	} else {
		save.Data, err = og.g.Marshal()
	}
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	err = c.store.SaveGroup(ctx, og.fence, save)
	return c.fenceErr(ctx, og, err)
}

// fenceErr turns a store error into the answer: NOT_COORDINATOR (and the
// group dropped) for ErrNotOwner, UNAVAILABLE otherwise.
func (c *Coordinator) fenceErr(ctx context.Context, og *owned, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, offsetstore.ErrNotOwner) {
		c.dropLocked(og, "fenced by a newer owner")
		o, _, _ := c.store.Owner(ctx, og.fence.GroupID)
		return errNotCoordinator(og.fence.GroupID, o.OwnerID, o.OwnerAddress)
	}
	return errDatabase(err)
}

// acquire returns the group with its lock held, claiming it when no live
// instance owns it, or NOT_COORDINATOR naming the owner.
func (c *Coordinator) acquire(ctx context.Context, id string) (*owned, error) {
	if id == "" {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "group_id is empty")
	}
	for {
		c.mu.Lock()
		og := c.groups[id]
		c.mu.Unlock()
		if og != nil {
			og.mu.Lock()
			if !og.dropped && time.Now().Before(og.expires) {
				return og, nil
			}
			// The lease ran out without renewal: claim again (a new epoch).
			c.dropLocked(og, "lease expired locally")
			og.mu.Unlock()
		}
		og, err := c.claim(ctx, id)
		if err != nil || og != nil {
			if og != nil {
				og.mu.Lock()
				if og.dropped {
					og.mu.Unlock()
					continue
				}
			}
			return og, err
		}
	}
}

// claim takes the lease of a group this instance does not hold and loads
// its state.
func (c *Coordinator) claim(ctx context.Context, id string) (*owned, error) {
	c.claimMu.Lock()
	defer c.claimMu.Unlock()
	c.mu.Lock()
	og := c.groups[id]
	c.mu.Unlock()
	if og != nil {
		return og, nil // claimed while we waited
	}
	o, ok, err := c.store.Owner(ctx, id)
	if err != nil {
		return nil, errDatabase(err)
	}
	if ok && o.OwnerID != c.id && o.Live(time.Now()) {
		return nil, errNotCoordinator(id, o.OwnerID, o.OwnerAddress)
	}
	at := time.Now()
	o, claimed, err := c.store.Claim(ctx, id, c.id, c.address, c.cfg.OwnershipLease)
	if err != nil {
		return nil, errDatabase(err)
	}
	if !claimed {
		return nil, errNotCoordinator(id, o.OwnerID, o.OwnerAddress)
	}
	g := group.New(id, c.cfg.SessionTimeout)
	saved, found, err := c.store.LoadGroup(ctx, id)
	if err != nil {
		_ = c.store.Release(ctx, o.Fence())
		return nil, errDatabase(err)
	}
	var cg *classic.Group
	if found && len(saved.Data) > 0 && saved.ProtocolType != "" {
		if cg, err = classic.Unmarshal(saved.Data, time.Now()); err != nil {
			_ = c.store.Release(ctx, o.Fence())
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		cg.ID = id
	} else if found && len(saved.Data) > 0 {
		if g, err = group.Unmarshal(saved.Data, c.cfg.SessionTimeout, time.Now()); err != nil {
			_ = c.store.Release(ctx, o.Fence())
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		g.ID = id
	}
	og = &owned{fence: o.Fence(), expires: at.Add(c.cfg.OwnershipLease), g: g, cg: cg}
	c.mu.Lock()
	c.groups[id] = og
	c.mu.Unlock()
	c.log.Info("group claimed", "group", id, "owner_epoch", o.OwnerEpoch, "members", len(g.Members))
	return og, nil
}

// refreshLag recomputes the lag metric of the owned groups.
func (c *Coordinator) refreshLag(ctx context.Context) {
	lag := map[lagKey]int64{}
	for _, og := range c.snapshot() {
		og.mu.Lock()
		id, topics := og.fence.GroupID, subscribed(og.g)
		dropped := og.dropped
		og.mu.Unlock()
		if dropped {
			continue
		}
		rows, err := c.lagRows(ctx, id, topics, nil)
		if err != nil {
			continue
		}
		for _, r := range rows {
			if r.GetLag() >= 0 {
				lag[lagKey{id, r.GetTopic(), r.GetPartition()}] = r.GetLag()
			}
		}
	}
	c.lagMu.Lock()
	c.lag = lag
	c.lagMu.Unlock()
}

// tps converts protocol partitions to the state machine's.
func tps(in []*commonv1.TopicPartitions) []group.TP {
	var out []group.TP
	for _, t := range in {
		for _, p := range t.GetPartitions() {
			out = append(out, group.TP{Topic: t.GetTopic(), Partition: p})
		}
	}
	return out
}

// fromTPs groups partitions by topic, sorted.
func fromTPs(in []group.TP) []*commonv1.TopicPartitions {
	l := append([]group.TP(nil), in...)
	sort.Slice(l, func(i, j int) bool { return assignor.Less(l[i], l[j]) })
	var out []*commonv1.TopicPartitions
	for _, tp := range l {
		if len(out) == 0 || out[len(out)-1].Topic != tp.Topic {
			out = append(out, &commonv1.TopicPartitions{Topic: tp.Topic})
		}
		last := out[len(out)-1]
		last.Partitions = append(last.Partitions, tp.Partition)
	}
	return out
}
