package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/pidblock"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
	"github.com/strata-mq/strata/services/coordinator/internal/txn"
)

// Ownership of transactional ids: the same leases, epochs and fencing as
// groups (coordinator.go), on the TxnKey rows of the offsets database
// (docs/design/transactions.md, "Where it lives"). An instance serves a
// transactional id only while it holds its lease; every state change is
// one database transaction under the lease's fence, so once another
// instance has claimed the id the old owner's writes fail, it drops the
// id and answers NOT_COORDINATOR naming the new owner. The owner epoch is
// the coordinator epoch the markers carry: a leader refuses a marker from
// an ownership older than the last it saw for the producer.
//
// Nothing of a transaction is kept in memory but the lease and whether a
// marker writer runs for it: each call reads the row, locked, in the
// database transaction that changes it.

// ownedTxn is a transactional id this instance holds the lease of.
type ownedTxn struct {
	mu      sync.Mutex // serializes this instance's changes to the id
	fence   offsetstore.Fence
	expires time.Time // local view of the lease end
	dropped bool
	// writing is set while a marker writer runs for the id (markers.go);
	// kick asks a writer about to stop to look at the row again.
	writing, kick bool
}

// txnOwnership is the instance's set of owned transactional ids.
type txnOwnership struct {
	mu     sync.Mutex
	txns   map[string]*ownedTxn
	closed bool // Close began: no marker writer starts any more
}

func errNotTxnCoordinator(id, ownerID, addr string) *connect.Error {
	return apierr.Error(&commonv1.ErrorDetail{
		Code: commonv1.Code_CODE_FAILED_PRECONDITION, Reason: commonv1.Reason_REASON_NOT_COORDINATOR,
		Message: fmt.Sprintf("this coordinator does not own transactional id %q; %s does", id, or(ownerID, "another instance")),
		Hint:    &commonv1.ErrorDetail_Coordinator{Coordinator: &commonv1.CoordinatorHint{TransactionalId: id, CoordinatorId: ownerID, Address: addr}},
	})
}

// acquireTxn returns the transactional id with its lock held, claiming it
// when no live instance owns it, or NOT_COORDINATOR naming the owner.
func (c *Coordinator) acquireTxn(ctx context.Context, id string) (*ownedTxn, error) {
	if id == "" {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "transactional_id is empty")
	}
	for {
		c.owned.mu.Lock()
		ot := c.owned.txns[id]
		c.owned.mu.Unlock()
		if ot != nil {
			ot.mu.Lock()
			if !ot.dropped && time.Now().Before(ot.expires) {
				return ot, nil
			}
			c.dropTxnLocked(ot, "lease expired locally")
			ot.mu.Unlock()
		}
		ot, err := c.claimTxn(ctx, id)
		if err != nil {
			return nil, err
		}
		ot.mu.Lock()
		if !ot.dropped {
			return ot, nil
		}
		ot.mu.Unlock()
	}
}

// claimTxn takes the lease of a transactional id this instance does not
// hold. A transaction the previous owner decided but did not complete
// (Prepare*) gets its markers written from here on: the recovery of
// docs/design/transactions.md, "Failure cases".
func (c *Coordinator) claimTxn(ctx context.Context, id string) (*ownedTxn, error) {
	c.claimMu.Lock()
	defer c.claimMu.Unlock()
	c.owned.mu.Lock()
	ot := c.owned.txns[id]
	c.owned.mu.Unlock()
	if ot != nil {
		return ot, nil // claimed while we waited
	}
	o, ok, err := c.store.TxnOwner(ctx, id)
	if err != nil {
		return nil, errDatabase(err)
	}
	if ok && o.OwnerID != c.id && o.Live(time.Now()) {
		return nil, errNotTxnCoordinator(id, o.OwnerID, o.OwnerAddress)
	}
	at := time.Now()
	o, claimed, err := c.store.ClaimTxn(ctx, id, c.id, c.address, c.cfg.OwnershipLease)
	if err != nil {
		return nil, errDatabase(err)
	}
	if !claimed {
		return nil, errNotTxnCoordinator(id, o.OwnerID, o.OwnerAddress)
	}
	row, found, err := c.store.LoadTxn(ctx, id)
	if err != nil {
		_ = c.store.Release(ctx, o.Fence())
		return nil, errDatabase(err)
	}
	ot = &ownedTxn{fence: o.Fence(), expires: at.Add(c.cfg.OwnershipLease)}
	c.owned.mu.Lock()
	c.owned.txns[id] = ot
	c.owned.mu.Unlock()
	state := row.State
	if !found {
		state = "none"
	}
	c.log.Info("transactional id claimed", "transactional_id", id, "owner_epoch", o.OwnerEpoch, "state", state)
	if found && txn.Prepared(row.State) {
		ot.mu.Lock()
		c.startMarkersLocked(ot) // markers.go
		ot.mu.Unlock()
	}
	return ot, nil
}

// dropTxnLocked forgets a transactional id whose lease is gone; its
// marker writer stops at its next step. ot.mu is held.
func (c *Coordinator) dropTxnLocked(ot *ownedTxn, why string) {
	if ot.dropped {
		return
	}
	ot.dropped = true
	c.owned.mu.Lock()
	if c.owned.txns[ot.fence.GroupID] == ot {
		delete(c.owned.txns, ot.fence.GroupID)
	}
	c.owned.mu.Unlock()
	c.log.Info("transactional id dropped", "transactional_id", ot.fence.GroupID, "owner_epoch", ot.fence.OwnerEpoch, "why", why)
}

// txnFenceErr turns a store error into the answer: NOT_COORDINATOR (and
// the id dropped) for ErrNotOwner, UNAVAILABLE otherwise. ot.mu is held.
func (c *Coordinator) txnFenceErr(ctx context.Context, ot *ownedTxn, err error) error {
	if errors.Is(err, offsetstore.ErrNotOwner) {
		c.dropTxnLocked(ot, "fenced by a newer owner")
		o, _, _ := c.store.TxnOwner(ctx, ot.fence.GroupID)
		return errNotTxnCoordinator(ot.fence.GroupID, o.OwnerID, o.OwnerAddress)
	}
	return errDatabase(err)
}

// transitionLocked runs one step of the state machine on the id's row in
// one database transaction under its fence, and returns its outcome. The
// step's answer (Outcome.Answer) is the caller's to return: a step may
// write and still answer an error. ot.mu is held.
func (c *Coordinator) transitionLocked(ctx context.Context, ot *ownedTxn, step func(cur *offsetstore.Txn) txn.Outcome) (txn.Outcome, error) {
	var out txn.Outcome
	err := c.store.UpdateTxn(ctx, ot.fence, func(cur *offsetstore.Txn) (offsetstore.TxnWrite, error) {
		out = step(cur)
		return offsetstore.TxnWrite{Row: out.Write, Staged: out.Staged, Delete: out.Delete}, nil
	})
	if err != nil {
		return txn.Outcome{}, c.txnFenceErr(ctx, ot, err)
	}
	return out, nil
}

func (c *Coordinator) ownedTxns() []*ownedTxn {
	c.owned.mu.Lock()
	defer c.owned.mu.Unlock()
	out := make([]*ownedTxn, 0, len(c.owned.txns))
	for _, ot := range c.owned.txns {
		out = append(out, ot)
	}
	return out
}

// renewTxns extends the lease of every owned transactional id; one whose
// lease was taken is dropped.
func (c *Coordinator) renewTxns(ctx context.Context) {
	for _, ot := range c.ownedTxns() {
		ot.mu.Lock()
		if ot.dropped {
			ot.mu.Unlock()
			continue
		}
		at := time.Now()
		err := c.store.Renew(ctx, ot.fence, c.cfg.OwnershipLease)
		switch {
		case err == nil:
			ot.expires = at.Add(c.cfg.OwnershipLease)
		case errors.Is(err, offsetstore.ErrNotOwner):
			c.dropTxnLocked(ot, "lease taken by another instance")
		default:
			c.log.Warn("renew transactional id lease", "transactional_id", ot.fence.GroupID, "err", err)
		}
		ot.mu.Unlock()
	}
}

// releaseTxns ends every owned transactional id's lease at Close, so
// another instance takes them over at once; a failure is logged, the
// lease then expires.
func (c *Coordinator) releaseTxns(ctx context.Context) {
	c.owned.mu.Lock()
	txns := c.owned.txns
	c.owned.txns = map[string]*ownedTxn{}
	c.owned.mu.Unlock()
	for _, ot := range txns {
		ot.mu.Lock()
		if !ot.dropped {
			ot.dropped = true
			if err := c.store.Release(ctx, ot.fence); err != nil && !errors.Is(err, offsetstore.ErrNotOwner) {
				c.log.Warn("release transactional id", "transactional_id", ot.fence.GroupID, "err", err)
			}
		}
		ot.mu.Unlock()
	}
}

// controllerProducerIDs fetches producer-id blocks from the controllers'
// AllocateProducerIds, trying each in turn.
func (c *Coordinator) controllerProducerIDs(urls []string, httpc connect.HTTPClient, opts []connect.ClientOption) pidblock.FetchFunc {
	clients := make([]controllerv1connect.ControllerServiceClient, len(urls))
	for i, u := range urls {
		clients[i] = controllerv1connect.NewControllerServiceClient(httpc, u, opts...)
	}
	return func(ctx context.Context) (int64, int32, error) {
		var last error
		for _, cl := range clients {
			resp, err := cl.AllocateProducerIds(ctx, connect.NewRequest(&controllerv1.AllocateProducerIdsRequest{Requester: "coordinator/" + c.id}))
			if err == nil {
				return resp.Msg.GetFirstProducerId(), resp.Msg.GetCount(), nil
			}
			last = err
		}
		return 0, 0, last
	}
}
