package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
	"github.com/strata-mq/strata/services/coordinator/internal/txn"
)

// Markers (docs/design/transactions.md, "Markers"): once a transaction's
// decision (PrepareCommit or PrepareAbort) is durable, its owner sends
// WriteTxnMarkers to the leader of each of its partitions, as Kafka's
// TransactionMarkerChannelManager does. Each leader answers once its
// marker is replicated; the partitions answered leave the row, and when
// none is left the transaction is recorded CompleteCommit or
// CompleteAbort. Everything else is retried with backoff: a leader change
// (the metadata is asked again), an unreachable node, a partition without
// enough replicas, the offsets database down. A partition whose topic the
// gateway says no longer exists needs no marker (Kafka skips them too).
//
// One writer runs per transactional id, and only while this instance
// owns it: it stops when the id is dropped, when the leaders answer that
// a newer ownership wrote there (TRANSACTION_COORDINATOR_FENCED) and the
// lease is indeed gone, and at Close.

const (
	markerBackoffMin = 50 * time.Millisecond
	markerBackoffMax = 5 * time.Second
	// markerTimeout bounds one WriteTxnMarkers call; the leader waits at
	// most markerReplicationTimeout for the marker's replication.
	markerTimeout            = 15 * time.Second
	markerReplicationTimeout = 10 * time.Second
)

// startMarkersLocked starts the marker writer of ot unless one runs; a
// writer about to stop looks at the row again. ot.mu is held.
func (c *Coordinator) startMarkersLocked(ot *ownedTxn) {
	if ot.dropped {
		return
	}
	if ot.writing {
		ot.kick = true
		return
	}
	c.owned.mu.Lock()
	defer c.owned.mu.Unlock()
	if c.owned.closed {
		return
	}
	ot.writing = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.writeMarkers(c.loopCtx, ot)
	}()
}

// writeMarkers writes the markers of ot's Prepare* transaction until it is
// complete, ot is dropped or ctx ends.
func (c *Coordinator) writeMarkers(ctx context.Context, ot *ownedTxn) {
	id := ot.fence.GroupID
	backoff := markerBackoffMin
	wait := func() bool {
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(2*backoff, markerBackoffMax)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	stop := func() {
		ot.mu.Lock()
		ot.writing = false
		ot.mu.Unlock()
	}
	for {
		ot.mu.Lock()
		fence, dropped := ot.fence, ot.dropped
		ot.kick = false
		ot.mu.Unlock()
		if dropped || ctx.Err() != nil {
			stop()
			return
		}
		row, found, err := c.store.LoadTxn(ctx, id)
		if err != nil {
			c.log.Warn("transaction markers: load", "transactional_id", id, "err", err)
			if !wait() {
				stop()
				return
			}
			continue
		}
		if !found || !txn.Prepared(row.State) {
			ot.mu.Lock()
			if !ot.kick { // nothing was decided since the load
				ot.writing = false
				ot.mu.Unlock()
				return
			}
			ot.mu.Unlock()
			continue
		}
		done, fenced := c.sendMarkers(ctx, &row, fence)
		if fenced {
			ot.mu.Lock()
			c.dropTxnLocked(ot, "a partition's leader took a marker from a newer owner")
			ot.writing = false
			ot.mu.Unlock()
			return
		}
		if len(done) == 0 && len(row.Partitions) > 0 {
			if !wait() {
				stop()
				return
			}
			continue
		}
		ot.mu.Lock()
		out, err := c.transitionLocked(ctx, ot, func(cur *offsetstore.Txn) txn.Outcome {
			return txn.MarkersWritten(cur, row.ProducerID, row.ProducerEpoch, row.State, done, time.Now())
		})
		ot.mu.Unlock()
		switch {
		case apierr.ReasonOf(err) == commonv1.Reason_REASON_NOT_COORDINATOR:
			stop() // dropped: the new owner writes them
			return
		case err != nil:
			c.log.Warn("transaction markers: record", "transactional_id", id, "err", err)
			if !wait() {
				stop()
				return
			}
		default:
			backoff = markerBackoffMin
			if w := out.Write; w != nil && !txn.Prepared(w.State) {
				c.log.Info("transaction complete", "transactional_id", id, "state", w.State,
					"producer_id", w.ProducerID, "producer_epoch", w.ProducerEpoch)
			}
		}
	}
}

// sendMarkers sends row's marker to the leader of each of its partitions
// and returns those done: answered, or of a topic that no longer exists.
// fenced is true when a leader refused the marker for a newer ownership
// and the lease is indeed gone.
func (c *Coordinator) sendMarkers(ctx context.Context, row *offsetstore.Txn, fence offsetstore.Fence) (done []offsetstore.TxnPartition, fenced bool) {
	var topics []string
	for _, p := range row.Partitions {
		if len(topics) == 0 || topics[len(topics)-1] != p.Topic {
			topics = append(topics, p.Topic)
		}
	}
	md, missing := c.meta.resolve(ctx, topics)
	byLeader := map[string][]offsetstore.TxnPartition{}
	for _, p := range row.Partitions {
		t := md[p.Topic]
		switch {
		case missing[p.Topic], t != nil && int(p.Partition) >= len(t.GetPartitions()):
			c.log.Info("transaction markers: partition gone, skipped", "transactional_id", row.ID, "topic", p.Topic, "partition", p.Partition)
			done = append(done, p)
		case t != nil:
			if addr, ok := c.meta.leader(t, p.Partition); ok {
				byLeader[addr] = append(byLeader[addr], p)
			}
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	refused := false
	for addr, parts := range byLeader {
		wg.Go(func() {
			ok, ref := c.sendMarker(ctx, addr, row, int32(fence.OwnerEpoch), parts)
			mu.Lock()
			done = append(done, ok...)
			refused = refused || ref
			mu.Unlock()
		})
	}
	wg.Wait()
	if refused {
		// A leader took a marker of a newer coordinator epoch for the
		// producer: either another instance owns the id now, or it did
		// and this one claimed it back (the epoch grew again); the lease
		// tells which.
		if err := c.store.Renew(ctx, fence, c.cfg.OwnershipLease); errors.Is(err, offsetstore.ErrNotOwner) {
			return nil, true
		}
	}
	return done, false
}

// sendMarker sends one leader its partitions' marker and returns those
// answered; refused is true when one was refused for a newer
// coordinator or producer epoch.
func (c *Coordinator) sendMarker(ctx context.Context, addr string, row *offsetstore.Txn, coordEpoch int32, parts []offsetstore.TxnPartition) (done []offsetstore.TxnPartition, refused bool) {
	mk := &storagev1.TxnMarker{ProducerId: row.ProducerID, ProducerEpoch: int32(row.ProducerEpoch),
		Commit: row.State == offsetstore.TxnPrepareCommit, CoordinatorEpoch: coordEpoch}
	for _, p := range parts {
		if n := len(mk.Partitions); n == 0 || mk.Partitions[n-1].GetTopic() != p.Topic {
			mk.Partitions = append(mk.Partitions, &commonv1.TopicPartitions{Topic: p.Topic})
		}
		last := mk.Partitions[len(mk.Partitions)-1]
		last.Partitions = append(last.Partitions, p.Partition)
	}
	cctx, cancel := context.WithTimeout(ctx, markerTimeout)
	defer cancel()
	resp, err := c.meta.storage(addr).WriteTxnMarkers(cctx, connect.NewRequest(&storagev1.WriteTxnMarkersRequest{
		Markers: []*storagev1.TxnMarker{mk}, TimeoutMs: int32(markerReplicationTimeout / time.Millisecond)}))
	if err != nil || len(resp.Msg.GetMarkers()) != 1 {
		c.log.Warn("transaction markers: leader unreachable", "transactional_id", row.ID, "leader", addr, "err", err)
		for _, p := range parts {
			c.meta.forget(p.Topic)
		}
		return nil, false
	}
	for _, pr := range resp.Msg.GetMarkers()[0].GetPartitions() {
		p := offsetstore.TxnPartition{Topic: pr.GetTopic(), Partition: pr.GetPartition()}
		switch d := pr.GetError(); d.GetReason() {
		case commonv1.Reason_REASON_UNSPECIFIED:
			if d == nil {
				done = append(done, p)
				continue
			}
		case commonv1.Reason_REASON_TRANSACTION_COORDINATOR_FENCED, commonv1.Reason_REASON_INVALID_PRODUCER_EPOCH:
			// The partition has seen this producer from a newer
			// ownership or at a newer epoch: this marker is moot there.
			// Done, unless the lease is gone (sendMarkers checks).
			c.log.Warn("transaction markers: refused as stale", "transactional_id", row.ID, "topic", p.Topic, "partition", p.Partition, "reason", d.GetReason())
			refused = true
			done = append(done, p)
			continue
		}
		c.log.Debug("transaction markers: retry", "transactional_id", row.ID, "topic", p.Topic, "partition", p.Partition, "err", pr.GetError().GetMessage())
		c.meta.forget(p.Topic)
	}
	return done, refused
}
