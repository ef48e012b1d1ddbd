package server

import (
	"context"
	"time"

	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
	"github.com/strata-mq/strata/services/coordinator/internal/txn"
)

// sweepTxns runs every --transaction-abort-interval (Kafka's
// transaction.abort.timed.out.transaction.cleanup.interval.ms). It aborts
// every Ongoing transaction older than its timeout (Kafka's
// abortTimedOutTransactions: the epoch is bumped, which fences the
// producer, then PrepareAbort and the markers), and makes sure every
// decided transaction (Prepare*) has a marker writer. It takes both from
// the database, not from the ids this instance happens to own: a
// transactional id whose owner died is claimed here once its lease has
// expired, so an abandoned transaction is aborted, and a decided one
// completed, even when its producer never comes back. Ids another live
// instance owns are left to it.
func (c *Coordinator) sweepTxns(ctx context.Context) {
	rows, err := c.store.ListTxns(ctx, offsetstore.TxnOngoing, offsetstore.TxnPrepareCommit, offsetstore.TxnPrepareAbort)
	if err != nil {
		c.log.Warn("transaction sweep: list", "err", err)
		return
	}
	now := time.Now()
	for _, row := range rows {
		if ctx.Err() != nil {
			return
		}
		if row.State == offsetstore.TxnOngoing && !txn.TimedOut(&row, now) {
			continue
		}
		if !c.mayOwnTxn(ctx, row.ID, now) {
			continue
		}
		ot, err := c.acquireTxn(ctx, row.ID) // a claim starts the writer of a Prepare* row
		if err != nil {
			continue // another instance claimed it meanwhile, or the database is down
		}
		if txn.Prepared(row.State) {
			c.startMarkersLocked(ot) // markers.go; none if one runs
			ot.mu.Unlock()
			continue
		}
		out, err := c.transitionLocked(ctx, ot, func(cur *offsetstore.Txn) txn.Outcome {
			return txn.Timeout(cur, row.ProducerID, row.ProducerEpoch, time.Now())
		})
		if err == nil && out.Markers {
			c.log.Info("transaction timed out, aborting", "transactional_id", row.ID, "producer_id", row.ProducerID,
				"producer_epoch", out.Write.ProducerEpoch, "timeout_ms", row.TimeoutMs, "started", row.Started)
			c.startMarkersLocked(ot)
		}
		ot.mu.Unlock()
	}
}

// mayOwnTxn reports whether this instance owns the transactional id or
// may claim it (no live owner), without claiming it.
func (c *Coordinator) mayOwnTxn(ctx context.Context, id string, now time.Time) bool {
	c.owned.mu.Lock()
	_, mine := c.owned.txns[id]
	c.owned.mu.Unlock()
	if mine {
		return true
	}
	o, ok, err := c.store.TxnOwner(ctx, id)
	return err == nil && (!ok || o.OwnerID == c.id || !o.Live(now))
}

// expireTxns runs every --transactional-id-expiration-interval (Kafka's
// transaction.remove.expired.transaction.cleanup.interval.ms) and deletes
// the transactional ids without a transaction that nobody used for
// --transactional-id-expiration (Kafka's transactional.id.expiration.ms),
// claiming each as the sweep does; their ownership rows stay, so the owner
// epoch keeps growing. A producer that comes back after that starts over
// with a new producer id, as in Kafka.
func (c *Coordinator) expireTxns(ctx context.Context) {
	rows, err := c.store.ListTxns(ctx, offsetstore.TxnEmpty, offsetstore.TxnCompleteCommit, offsetstore.TxnCompleteAbort)
	if err != nil {
		c.log.Warn("transactional id expiry: list", "err", err)
		return
	}
	after := c.cfg.TransactionalIDExpiration
	now := time.Now()
	for _, row := range rows {
		if ctx.Err() != nil {
			return
		}
		if !txn.Expired(&row, after, now) || !c.mayOwnTxn(ctx, row.ID, now) {
			continue
		}
		ot, err := c.acquireTxn(ctx, row.ID)
		if err != nil {
			continue
		}
		out, err := c.transitionLocked(ctx, ot, func(cur *offsetstore.Txn) txn.Outcome {
			return txn.Expire(cur, row.ProducerID, row.ProducerEpoch, after, time.Now())
		})
		if err == nil && out.Delete {
			c.log.Info("transactional id expired", "transactional_id", row.ID, "producer_id", row.ProducerID, "last_update", row.Updated)
		}
		ot.mu.Unlock()
	}
}
