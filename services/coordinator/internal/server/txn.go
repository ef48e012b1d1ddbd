package server

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/services/coordinator/internal/classic"
	"github.com/strata-mq/strata/services/coordinator/internal/group"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
	"github.com/strata-mq/strata/services/coordinator/internal/txn"
)

// The transaction coordinator's RPCs (docs/design/transactions.md): each
// is one step of the state machine (package txn) run by transitionLocked
// under the transactional id's fence (txnowner.go). Authorization, until
// Strata's ACLs have a transactional-id resource (transactions.md,
// "Authorization"): write on each topic added, read on each group whose
// offsets are committed, describe on the cluster to describe and list;
// InitTransactionalProducer and EndTxn ask only for an authenticated
// principal, the producer id and epoch being what EndTxn must hold.

// txnErr maps the state machine's answers to API errors.
func txnErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, txn.ErrInvalidMapping):
		return apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_PRODUCER_ID_MAPPING, "%v; initialize the producer again", err)
	case errors.Is(err, txn.ErrProducerFenced):
		return apierr.New(connect.CodeAborted, commonv1.Reason_REASON_PRODUCER_FENCED,
			"%v: another producer with this transactional id started, or the transaction timed out and was aborted", err)
	case errors.Is(err, txn.ErrConcurrent):
		return apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_CONCURRENT_TRANSACTIONS, "%v; retry", err)
	case errors.Is(err, txn.ErrInvalidState):
		return apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_INVALID_TXN_STATE, "%v", err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// producerArgs checks a request's producer id and epoch.
func producerArgs(pid int64, epoch int32) (int16, error) {
	if pid < 0 || epoch < 0 || epoch > math.MaxInt16 {
		return 0, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "producer id %d or epoch %d out of range", pid, epoch)
	}
	return int16(epoch), nil
}

// InitTransactionalProducer implements CoordinatorService.
func (c *Coordinator) InitTransactionalProducer(ctx context.Context, req *connect.Request[coordinatorv1.InitTransactionalProducerRequest]) (*connect.Response[coordinatorv1.InitTransactionalProducerResponse], error) {
	m := req.Msg
	if err := c.authorizeTxn(ctx, acl.Write, m.GetTransactionalId()); err != nil {
		return nil, err
	}
	max := c.cfg.TransactionMaxTimeout
	if t := m.GetTransactionTimeoutMs(); t <= 0 || time.Duration(t)*time.Millisecond > max {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_INVALID_TRANSACTION_TIMEOUT,
			"transaction timeout %d ms is not within 1..%d ms (--transaction-max-timeout)", t, max.Milliseconds())
	}
	pid, epoch := m.GetProducerId(), int16(-1)
	if pid >= 0 || m.GetProducerEpoch() >= 0 {
		var err error
		if epoch, err = producerArgs(pid, m.GetProducerEpoch()); err != nil {
			return nil, err
		}
	} else {
		pid = txn.NoProducerID
	}
	ot, err := c.acquireTxn(ctx, m.GetTransactionalId())
	if err != nil {
		return nil, err
	}
	defer ot.mu.Unlock()
	newPID := int64(txn.NoProducerID)
	for {
		out, err := c.transitionLocked(ctx, ot, func(cur *offsetstore.Txn) txn.Outcome {
			return txn.Init(cur, m.GetTransactionalId(), m.GetTransactionTimeoutMs(), pid, epoch, newPID, time.Now())
		})
		if err != nil {
			return nil, err
		}
		if errors.Is(out.Answer, txn.ErrNeedProducerID) && newPID < 0 {
			if newPID, err = c.nextProducerID(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if out.Markers {
			c.startMarkersLocked(ot) // the fenced producer's transaction is aborted
		}
		if out.Answer != nil {
			return nil, txnErr(out.Answer)
		}
		return connect.NewResponse(&coordinatorv1.InitTransactionalProducerResponse{ProducerId: out.ProducerID, ProducerEpoch: int32(out.ProducerEpoch)}), nil
	}
}

// nextProducerID takes a producer id from the controller's blocks, as
// the gateways do for idempotent producers (one id space).
func (c *Coordinator) nextProducerID(ctx context.Context) (int64, error) {
	if c.pids == nil {
		return 0, apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED,
			"transactional producers need producer ids from the controller, and this coordinator has no --controller")
	}
	id, err := c.pids.Next(ctx)
	if err != nil {
		return 0, apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "cannot obtain a producer id from the controller: %v", err)
	}
	return id, nil
}

// AddPartitionsToTxn implements CoordinatorService.
func (c *Coordinator) AddPartitionsToTxn(ctx context.Context, req *connect.Request[coordinatorv1.AddPartitionsToTxnRequest]) (*connect.Response[coordinatorv1.AddPartitionsToTxnResponse], error) {
	m := req.Msg
	if err := c.authorizeTxn(ctx, acl.Write, m.GetTransactionalId()); err != nil {
		return nil, err
	}
	epoch, err := producerArgs(m.GetProducerId(), m.GetProducerEpoch())
	if err != nil {
		return nil, err
	}
	var topics []string
	for _, t := range m.GetPartitions() {
		topics = append(topics, t.GetTopic())
	}
	md, missing := c.meta.resolve(ctx, topics)
	denied := c.topicRefusals(ctx, acl.Write)
	out := &coordinatorv1.AddPartitionsToTxnResponse{}
	var parts []offsetstore.TxnPartition
	refused := false
	for _, t := range m.GetPartitions() {
		for _, p := range t.GetPartitions() {
			r := &coordinatorv1.TxnPartitionResult{Topic: t.GetTopic(), Partition: p}
			switch tm := md[t.GetTopic()]; {
			case denied.of(t.GetTopic()) != nil:
				r.Error = denied.of(t.GetTopic())
			case missing[t.GetTopic()], tm != nil && (p < 0 || int(p) >= len(tm.GetPartitions())):
				r.Error = apierr.Detail(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "partition %s-%d does not exist", t.GetTopic(), p)
			case tm == nil:
				return nil, apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "cannot read the metadata of topic %s; retry", t.GetTopic())
			default:
				parts = append(parts, offsetstore.TxnPartition{Topic: t.GetTopic(), Partition: p})
			}
			refused = refused || r.Error != nil
			out.Partitions = append(out.Partitions, r)
		}
	}
	if refused { // all or none, as Kafka's
		for _, r := range out.Partitions {
			if r.Error == nil {
				r.Error = apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_OPERATION_NOT_ATTEMPTED, "not added: other partitions of the request were refused")
			}
		}
		return connect.NewResponse(out), nil
	}
	ot, err := c.acquireTxn(ctx, m.GetTransactionalId())
	if err != nil {
		return nil, err
	}
	defer ot.mu.Unlock()
	res, err := c.transitionLocked(ctx, ot, func(cur *offsetstore.Txn) txn.Outcome {
		return txn.AddPartitions(cur, m.GetProducerId(), epoch, parts, time.Now())
	})
	if err != nil {
		return nil, err
	}
	if err := txnErr(res.Answer); err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// AddOffsetsToTxn implements CoordinatorService.
func (c *Coordinator) AddOffsetsToTxn(ctx context.Context, req *connect.Request[coordinatorv1.AddOffsetsToTxnRequest]) (*connect.Response[coordinatorv1.AddOffsetsToTxnResponse], error) {
	m := req.Msg
	if err := c.authorizeTxn(ctx, acl.Write, m.GetTransactionalId()); err != nil {
		return nil, err
	}
	epoch, err := producerArgs(m.GetProducerId(), m.GetProducerEpoch())
	if err != nil {
		return nil, err
	}
	if m.GetGroupId() == "" {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "group_id is empty")
	}
	if err := c.authorizeGroup(ctx, acl.Read, m.GetGroupId()); err != nil {
		return nil, err
	}
	ot, err := c.acquireTxn(ctx, m.GetTransactionalId())
	if err != nil {
		return nil, err
	}
	defer ot.mu.Unlock()
	res, err := c.transitionLocked(ctx, ot, func(cur *offsetstore.Txn) txn.Outcome {
		return txn.AddGroup(cur, m.GetProducerId(), epoch, m.GetGroupId(), time.Now())
	})
	if err != nil {
		return nil, err
	}
	if err := txnErr(res.Answer); err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordinatorv1.AddOffsetsToTxnResponse{}), nil
}

// TxnOffsetCommit implements CoordinatorService. It is served by the
// group's owner, which checks the member as OffsetCommit does (KIP-447)
// and stages the offsets in one database transaction that also checks
// the transaction (txn.CheckStage) with its row locked, so they cannot be
// staged after the transaction was decided.
func (c *Coordinator) TxnOffsetCommit(ctx context.Context, req *connect.Request[coordinatorv1.TxnOffsetCommitRequest]) (*connect.Response[coordinatorv1.TxnOffsetCommitResponse], error) {
	m := req.Msg
	epoch, err := producerArgs(m.GetProducerId(), m.GetProducerEpoch())
	if err != nil {
		return nil, err
	}
	if m.GetTransactionalId() == "" {
		return nil, apierr.New(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "transactional_id is empty")
	}
	if err := c.authorizeTxn(ctx, acl.Write, m.GetTransactionalId()); err != nil {
		return nil, err
	}
	if err := c.authorizeGroup(ctx, acl.Read, m.GetGroupId()); err != nil {
		return nil, err
	}
	og, err := c.acquire(ctx, m.GetGroupId())
	if err != nil {
		return nil, err
	}
	defer og.mu.Unlock()
	refused := make([]error, len(m.GetPartitions()))
	if m.GetMemberId() != "" || m.GetMemberEpoch() >= 0 {
		// A producer that names the consumer's member is checked as its
		// commit would be; one that names none (before KIP-447) is not,
		// as in Kafka.
		if og.cg != nil {
			if code := og.cg.CheckCommit(m.GetMemberId(), m.GetMemberEpoch(), time.Now()); code != classic.ErrNone {
				return nil, classicCommitErr(code)
			}
		} else {
			list := make([]group.CommitPartition, len(m.GetPartitions()))
			for i, p := range m.GetPartitions() {
				list[i] = group.CommitPartition{TP: group.TP{Topic: p.GetTopic(), Partition: p.GetPartition()}}
			}
			if refused, err = og.g.CheckCommit(m.GetMemberId(), m.GetMemberEpoch(), list); err != nil {
				return nil, groupErr(err)
			}
		}
	}
	denied := c.topicRefusals(ctx, acl.Read)
	out := &coordinatorv1.TxnOffsetCommitResponse{}
	var offs []offsetstore.Offset
	for i, p := range m.GetPartitions() {
		r := &coordinatorv1.TxnPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition()}
		switch d := denied.of(p.GetTopic()); {
		case d != nil:
			r.Error = d
		case p.GetCommittedOffset() < 0:
			r.Error = apierr.Detail(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "committed offset %d is negative", p.GetCommittedOffset())
		case len(p.GetMetadata()) > maxMetadataBytes:
			r.Error = apierr.Detail(connect.CodeInvalidArgument, commonv1.Reason_REASON_UNSPECIFIED, "metadata is longer than %d bytes", maxMetadataBytes)
		case refused[i] != nil:
			r.Error = apierr.Detail(connect.CodeAborted, commonv1.Reason_REASON_FENCED_MEMBER_EPOCH, "commit refused: %v", refused[i])
		default:
			offs = append(offs, offsetstore.Offset{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: p.GetCommittedOffset(),
				LeaderEpoch: p.GetCommittedLeaderEpoch(), Metadata: p.GetMetadata()})
		}
		out.Partitions = append(out.Partitions, r)
	}
	if len(offs) == 0 {
		return connect.NewResponse(out), nil
	}
	var answer error
	err = c.store.StageTxnOffsets(ctx, og.fence, m.GetTransactionalId(), func(cur *offsetstore.Txn) error {
		answer = txn.CheckStage(cur, m.GetProducerId(), epoch, m.GetGroupId())
		return answer
	}, offs)
	switch {
	case answer != nil:
		return nil, txnErr(answer)
	case err != nil:
		return nil, c.fenceErr(ctx, og, err)
	}
	return connect.NewResponse(out), nil
}

// EndTxn implements CoordinatorService: answered once the decision is
// durable; the markers follow (markers.go).
func (c *Coordinator) EndTxn(ctx context.Context, req *connect.Request[coordinatorv1.EndTxnRequest]) (*connect.Response[coordinatorv1.EndTxnResponse], error) {
	m := req.Msg
	if err := c.authorizeTxn(ctx, acl.Write, m.GetTransactionalId()); err != nil {
		return nil, err
	}
	epoch, err := producerArgs(m.GetProducerId(), m.GetProducerEpoch())
	if err != nil {
		return nil, err
	}
	ot, err := c.acquireTxn(ctx, m.GetTransactionalId())
	if err != nil {
		return nil, err
	}
	defer ot.mu.Unlock()
	out, err := c.transitionLocked(ctx, ot, func(cur *offsetstore.Txn) txn.Outcome {
		return txn.End(cur, m.GetProducerId(), epoch, m.GetCommit(), time.Now())
	})
	if err != nil {
		return nil, err
	}
	if out.Markers {
		c.startMarkersLocked(ot)
	}
	if err := txnErr(out.Answer); err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordinatorv1.EndTxnResponse{}), nil
}

// txnStates maps the stored states to the API's and back.
var txnStates = map[offsetstore.TxnState]coordinatorv1.TransactionState{
	offsetstore.TxnEmpty:          coordinatorv1.TransactionState_TRANSACTION_STATE_EMPTY,
	offsetstore.TxnOngoing:        coordinatorv1.TransactionState_TRANSACTION_STATE_ONGOING,
	offsetstore.TxnPrepareCommit:  coordinatorv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT,
	offsetstore.TxnPrepareAbort:   coordinatorv1.TransactionState_TRANSACTION_STATE_PREPARE_ABORT,
	offsetstore.TxnCompleteCommit: coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT,
	offsetstore.TxnCompleteAbort:  coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_ABORT,
}

// DescribeTransactions implements CoordinatorService: any instance
// answers from the database. Each id needs describe on it (Kafka's
// DescribeTransactions), a refusal is that id's error, and the partitions
// of topics the caller may not describe are left out, as Kafka leaves
// them.
func (c *Coordinator) DescribeTransactions(ctx context.Context, req *connect.Request[coordinatorv1.DescribeTransactionsRequest]) (*connect.Response[coordinatorv1.DescribeTransactionsResponse], error) {
	out := &coordinatorv1.DescribeTransactionsResponse{}
	now := time.Now()
	for _, id := range req.Msg.GetTransactionalIds() {
		d := &coordinatorv1.TransactionDescription{TransactionalId: id}
		out.Transactions = append(out.Transactions, d)
		if err := c.authorizeTxn(ctx, acl.Describe, id); err != nil {
			d.Error = apierr.AsDetail(err)
			continue
		}
		t, ok, err := c.store.LoadTxn(ctx, id)
		if err != nil {
			return nil, errDatabase(err)
		}
		if !ok {
			d.Error = apierr.Detail(connect.CodeNotFound, commonv1.Reason_REASON_TRANSACTIONAL_ID_NOT_FOUND, "transactional id %q does not exist", id)
			continue
		}
		d.State, d.ProducerId, d.ProducerEpoch, d.TransactionTimeoutMs = txnStates[t.State], t.ProducerID, int32(t.ProducerEpoch), t.TimeoutMs
		d.TransactionStartTimeMs, d.LastUpdateTimeMs, d.GroupIds = -1, t.Updated.UnixMilli(), t.Groups
		if !t.Started.IsZero() {
			d.TransactionStartTimeMs = t.Started.UnixMilli()
		}
		for _, p := range t.Partitions {
			if !c.guard.Allowed(ctx, acl.Describe, acl.Topic, p.Topic) {
				continue
			}
			if n := len(d.Partitions); n == 0 || d.Partitions[n-1].GetTopic() != p.Topic {
				d.Partitions = append(d.Partitions, &commonv1.TopicPartitions{Topic: p.Topic})
			}
			last := d.Partitions[len(d.Partitions)-1]
			last.Partitions = append(last.Partitions, p.Partition)
		}
		if o, ok, err := c.store.TxnOwner(ctx, id); err == nil && ok && o.Live(now) {
			d.CoordinatorId = o.OwnerID
		}
	}
	return connect.NewResponse(out), nil
}

// ListTransactions implements CoordinatorService: any instance answers
// from the database, listing the ids the caller may describe (Kafka's
// ListTransactions).
func (c *Coordinator) ListTransactions(ctx context.Context, req *connect.Request[coordinatorv1.ListTransactionsRequest]) (*connect.Response[coordinatorv1.ListTransactionsResponse], error) {
	var states []offsetstore.TxnState
	for _, s := range req.Msg.GetStates() {
		for k, v := range txnStates {
			if v == s {
				states = append(states, k)
			}
		}
	}
	if len(req.Msg.GetStates()) > 0 && len(states) == 0 {
		return connect.NewResponse(&coordinatorv1.ListTransactionsResponse{}), nil // only unspecified states asked for
	}
	rows, err := c.store.ListTxns(ctx, states...)
	if err != nil {
		return nil, errDatabase(err)
	}
	out := &coordinatorv1.ListTransactionsResponse{}
	for _, t := range rows {
		if pids := req.Msg.GetProducerIds(); len(pids) > 0 && !slices.Contains(pids, t.ProducerID) {
			continue
		}
		if !c.guard.Allowed(ctx, acl.Describe, acl.TransactionalID, t.ID) {
			continue
		}
		out.Transactions = append(out.Transactions, &coordinatorv1.TransactionListing{TransactionalId: t.ID, ProducerId: t.ProducerID, State: txnStates[t.State]})
	}
	return connect.NewResponse(out), nil
}

// locateTxn is LocateGroup for a transactional id (key type
// TRANSACTION): the live owner, or this instance once it claimed the id.
func (c *Coordinator) locateTxn(ctx context.Context, id, listener string) (*connect.Response[coordinatorv1.LocateGroupResponse], error) {
	ot, err := c.acquireTxn(ctx, id)
	if err == nil {
		epoch := ot.fence.OwnerEpoch
		ot.mu.Unlock()
		return connect.NewResponse(&coordinatorv1.LocateGroupResponse{
			CoordinatorId: c.id, Address: c.listenerAddress(listener), OwnerEpoch: epoch, ListenerResolved: true,
		}), nil
	}
	if apierr.ReasonOf(err) == commonv1.Reason_REASON_NOT_COORDINATOR {
		o, _, oerr := c.store.TxnOwner(ctx, id)
		if oerr != nil {
			return nil, errDatabase(oerr)
		}
		return connect.NewResponse(&coordinatorv1.LocateGroupResponse{CoordinatorId: o.OwnerID, Address: o.OwnerAddress, OwnerEpoch: o.OwnerEpoch}), nil
	}
	return nil, err
}
