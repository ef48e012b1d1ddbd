package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/strata-mq/strata/services/controller/internal/metastore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BalanceConfig configures what the active controller does on its own to
// keep the cluster balanced. The zero value turns everything off; the
// controller binary's flags set the defaults named on each field.
type BalanceConfig struct {
	// AutoLeaderBalance moves leadership back to preferred replicas
	// (Kafka's auto.leader.rebalance.enable). Flag default true.
	AutoLeaderBalance bool
	// LeaderBalanceInterval is how often leaders are checked. Flag default
	// 30s; 0 means 30s.
	LeaderBalanceInterval time.Duration
	// LeaderImbalancePct is the share of a node's preferred partitions led
	// elsewhere, in percent, above which they move back
	// (leader.imbalance.per.broker.percentage). Flag default 10.
	LeaderImbalancePct int
	// AutoRebalance plans and starts moves when a node joins, is drained or
	// is undrained. Flag default true.
	AutoRebalance bool
	// RebalanceDelay is how long the set of live, undrained nodes must stay
	// the same before an automatic rebalance plans, so nodes joining
	// together are balanced in one plan. Flag default 10s; 0 means 10s.
	RebalanceDelay time.Duration
	// RebalanceThrottle is the replication throttle of moves the
	// controller starts on its own, bytes per second per node; 0 none.
	RebalanceThrottle int64
}

// runActiveLoops runs reconcile and the balancing loops together; the
// first to return ErrNotActive (or any error other than ctx's end) ends
// them all.
func (c *Controller) runActiveLoops(ctx context.Context, guard clientv3.Cmp, reconcile func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loops := []func(context.Context) error{
		reconcile,
		func(ctx context.Context) error { return c.stepMovesLoop(ctx, guard) },
	}
	if c.cfg.Balance.AutoLeaderBalance {
		loops = append(loops, func(ctx context.Context) error { return c.leaderBalanceLoop(ctx, guard) })
	}
	if c.cfg.Balance.AutoRebalance {
		loops = append(loops, func(ctx context.Context) error { return c.autoRebalanceLoop(ctx, guard) })
	}
	errs := make(chan error, len(loops))
	var wg sync.WaitGroup
	for _, loop := range loops {
		wg.Go(func() {
			err := loop(ctx)
			errs <- err
			cancel()
		})
	}
	wg.Wait()
	close(errs)
	var first error
	for err := range errs {
		if errors.Is(err, metastore.ErrNotActive) {
			return err
		}
		if first == nil && err != nil && !errors.Is(err, context.Canceled) {
			first = err
		}
	}
	if first != nil {
		return first
	}
	return ctx.Err()
}

// stepMovesLoop takes the steps of running partition moves (and moves
// leaders off drained nodes) whenever a partition, a node's liveness or a
// drain mark changes, and every second as a safety net.
func (c *Controller) stepMovesLoop(ctx context.Context, guard clientv3.Cmp) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	cl := c.store.Client()
	watch := func() clientv3.WatchChan { return cl.Watch(wctx, metastore.Prefix, clientv3.WithPrefix()) }
	w := watch()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		n, err := c.store.StepReassignments(ctx, guard)
		if errors.Is(err, metastore.ErrNotActive) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn("partition move step failed; retrying", slog.String("err", err.Error()))
		}
		if n > 0 {
			c.log.Info("partition moves stepped", slog.Int("partitions", n))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case resp, ok := <-w:
			if !ok || resp.Err() != nil {
				w = watch()
			}
			// Coalesce a burst of changes into one step.
			for drained := false; !drained; {
				select {
				case _, ok := <-w:
					if !ok {
						w = watch()
						drained = true
					}
				default:
					drained = true
				}
			}
		}
	}
}

// leaderBalanceLoop is the automatic preferred-leader election.
func (c *Controller) leaderBalanceLoop(ctx context.Context, guard clientv3.Cmp) error {
	every := c.cfg.Balance.LeaderBalanceInterval
	if every <= 0 {
		every = 30 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		n, err := c.store.BalanceLeaders(ctx, guard, c.cfg.Balance.LeaderImbalancePct)
		if errors.Is(err, metastore.ErrNotActive) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn("leader balance failed", slog.String("err", err.Error()))
		}
		if n > 0 {
			c.log.Info("leaders moved back to preferred replicas", slog.Int("partitions", n))
		}
	}
}

// autoRebalanceLoop starts a rebalance when a node joins (a live,
// undrained node the last automatic rebalance did not count) or a counted
// node is drained, once the node set has been stable for RebalanceDelay
// and no move runs. The set it ran for is recorded in etcd with the moves,
// so a failover neither repeats nor forgets it. The first time (nothing
// recorded) it only records the set: a new cluster's first nodes are not a
// change to balance.
func (c *Controller) autoRebalanceLoop(ctx context.Context, guard clientv3.Cmp) error {
	delay := c.cfg.Balance.RebalanceDelay
	if delay <= 0 {
		delay = 10 * time.Second
	}
	tick := time.NewTicker(min(delay/4, time.Second))
	defer tick.Stop()
	var seen string
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		// The node set alone every tick; the partitions only when it has
		// stayed changed for the delay.
		m, err := c.store.LoadNodeSet(ctx)
		if err != nil {
			continue
		}
		cur := m.EligibleNodes()
		if cur != seen {
			seen, since = cur, time.Now()
		}
		if time.Since(since) < delay || cur == "" || (m.BalancedNodesRev != 0 && !m.RebalanceDue()) {
			continue
		}
		if all, err := c.store.Load(ctx); err != nil || all.MovesRunning() > 0 {
			continue
		}
		if m.BalancedNodesRev == 0 {
			// Nothing recorded yet: a new cluster's first nodes are not a
			// change to balance.
			err := c.store.RecordBalancedNodes(ctx, m, guard)
			if errors.Is(err, metastore.ErrNotActive) {
				return err
			}
			continue
		}
		res, err := c.store.Rebalance(ctx, metastore.PlanOptions{
			OnlyIfNodesChanged: true, Guard: &guard, Throttle: c.cfg.Balance.RebalanceThrottle,
			Sizes: c.partitionSizes(ctx, m),
		})
		if errors.Is(err, metastore.ErrNotActive) {
			return err
		}
		if err != nil {
			c.log.Warn("automatic rebalance failed; retrying", slog.String("err", err.Error()))
			continue
		}
		c.log.Info("automatic rebalance", slog.String("nodes", cur), slog.Int("moves", len(res.GetMoves())))
	}
}
