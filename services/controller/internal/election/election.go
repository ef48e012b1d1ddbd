// Package election chooses the one active controller through an etcd
// election (client/v3/concurrency) and tells every controller who it is.
//
// Each controller holds an etcd session (a lease kept alive by the
// client). Under that lease it announces itself at
// metastore.ControllerKey(id) and campaigns on metastore.ElectionPrefix
// with a commonv1.ControllerHint (id and Connect address) as the value.
// The candidate with the oldest key is active until its session ends:
// on Close it resigns and revokes the lease, so another takes over at
// once; on a crash, within the session TTL.
package election

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/services/controller/internal/metastore"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/protobuf/proto"
)

// DefaultSessionTTL is the default session TTL: how long a crashed active
// controller stays active.
const DefaultSessionTTL = 5 * time.Second

// Config describes one candidate.
type Config struct {
	// ID is the controller id.
	ID string
	// Address is the controller's Connect base URL.
	Address string
	// SessionTTL is the session lease TTL; 0 means DefaultSessionTTL.
	SessionTTL time.Duration
	// Logger receives state changes; nil means slog.Default().
	Logger *slog.Logger
}

// ActiveFunc is the work of the active controller. ctx ends when this
// controller stops being active; guard holds in an etcd transaction only
// while it is active.
type ActiveFunc func(ctx context.Context, guard clientv3.Cmp) error

// Elector campaigns and observes. Its methods are safe for concurrent use;
// Close is safe to call twice.
type Elector struct {
	cl     *clientv3.Client
	cfg    Config
	log    *slog.Logger
	run    ActiveFunc
	active atomic.Pointer[commonv1.ControllerHint]
	isMe   atomic.Bool

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start begins campaigning in the background and calls run whenever this
// controller becomes active.
func Start(cl *clientv3.Client, cfg Config, run ActiveFunc) *Elector {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	e := &Elector{cl: cl, cfg: cfg, run: run, log: cfg.Logger, done: make(chan struct{})}
	if e.log == nil {
		e.log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go e.loop(ctx)
	return e
}

// Active returns the active controller as last observed, or nil.
func (e *Elector) Active() *commonv1.ControllerHint { return e.active.Load() }

// IsActive reports whether this controller is the active one.
func (e *Elector) IsActive() bool { return e.isMe.Load() }

// Close resigns, revokes the session and waits for the loop to end.
func (e *Elector) Close() {
	e.once.Do(func() {
		e.cancel()
		<-e.done
	})
}

func (e *Elector) loop(ctx context.Context) {
	defer close(e.done)
	hint, _ := proto.Marshal(&commonv1.ControllerHint{ControllerId: e.cfg.ID, Address: e.cfg.Address})
	member, _ := proto.Marshal(&controllerv1.ControllerMember{ControllerId: e.cfg.ID, Address: e.cfg.Address})
	ttl := int((e.cfg.SessionTTL + time.Second - 1) / time.Second)
	// A term that fails (etcd unreachable, the session not granted) is
	// tried again after a wait that grows while etcd keeps failing and
	// starts short again after a term that ran.
	bo := &backoff.ExponentialBackOff{
		InitialInterval:     100 * time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         2 * time.Second,
	}
	for ctx.Err() == nil {
		err := e.term(ctx, ttl, string(hint), string(member))
		if err == nil {
			bo.Reset()
			continue
		}
		if ctx.Err() != nil {
			return
		}
		wait := bo.NextBackOff()
		e.log.Warn("controller election", slog.String("err", err.Error()), slog.Duration("retry_in", wait))
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// term runs one session: announce, observe, campaign, lead until the
// session or ctx ends.
func (e *Elector) term(ctx context.Context, ttl int, hint, member string) error {
	sess, err := concurrency.NewSession(e.cl, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer func() {
		// Revoke even when ctx is done, so that others take over at once.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		e.cl.Revoke(rctx, sess.Lease())
		sess.Orphan()
	}()
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-tctx.Done():
		}
	}()
	if _, err := e.cl.Put(tctx, metastore.ControllerKey(e.cfg.ID), member, clientv3.WithLease(sess.Lease())); err != nil {
		return err
	}
	el := concurrency.NewElection(sess, metastore.ElectionPrefix)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for resp := range el.Observe(tctx) {
			if len(resp.Kvs) == 0 {
				continue
			}
			h := &commonv1.ControllerHint{}
			if proto.Unmarshal(resp.Kvs[0].Value, h) == nil {
				e.active.Store(h)
			}
		}
	}()
	if err := el.Campaign(tctx, hint); err != nil {
		return err
	}
	e.isMe.Store(true)
	e.active.Store(&commonv1.ControllerHint{ControllerId: e.cfg.ID, Address: e.cfg.Address})
	e.log.Info("became active controller", slog.String("id", e.cfg.ID))
	guard := clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())
	err = e.run(tctx, guard)
	e.isMe.Store(false)
	e.log.Info("no longer active controller", slog.String("id", e.cfg.ID))
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	el.Resign(rctx)
	if errors.Is(err, context.Canceled) || errors.Is(err, metastore.ErrNotActive) {
		return nil
	}
	return err
}
