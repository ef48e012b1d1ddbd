package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
)

// Transactions (docs/design/transactions.md, "Clients"): a producer made
// with TransactionalID writes records and group offsets that commit or
// abort together, as Kafka's transactional producer (KIP-98, KIP-447).
//
// The call sequence is Kafka's TransactionManager's, against the
// coordinator instance that owns the transactional id (found with the
// gateway's FindCoordinator, key type TRANSACTION):
//
//   - InitTransactionalProducer once, for the producer id and epoch every
//     batch is written under (InitTransactions, or the first call that
//     needs it). It fences any earlier producer with the same id.
//   - AddPartitionsToTxn before the first batch of a transaction to each
//     partition: every partition produced to and not added yet goes in
//     one call, made by the first partition sender that needs it; the
//     others wait for it (franz-go and Java batch them likewise).
//   - AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator,
//     for SendOffsetsToTransaction.
//   - EndTxn when the transaction is committed or aborted, after every
//     record of it has been answered; skipped when nothing was added.
//
// A record of the transaction that fails (after its retries) makes the
// transaction abortable only: CommitTransaction refuses with
// ErrAbortRequired, and AbortTransaction bumps the producer epoch after
// the abort (KIP-360: InitTransactionalProducer with the current id and
// epoch) so every partition starts its sequences again. PRODUCER_FENCED,
// or a leader refusing the epoch, is final (ErrProducerFenced).
//
// BeginTransaction, SendOffsetsToTransaction, CommitTransaction and
// AbortTransaction are meant to be called from one goroutine, one after
// the other, as Kafka's are; Produce may be called from any goroutine
// while the transaction is open. The state below is safe for concurrent
// use either way.

// txnPhase is where the producer is in its transaction's life.
type txnPhase int

const (
	txnIdle   txnPhase = iota // no transaction: produce fails with ErrNoTransaction
	txnOpen                   // BeginTransaction called: records and offsets go in
	txnEnding                 // CommitTransaction or AbortTransaction running
)

// txnState is a transactional producer's transaction; nil on a producer
// without TransactionalID. Its mutex is never held over a call.
type txnState struct {
	id   string
	link *coordinatorLink // to the transactional id's owner

	mu         sync.Mutex
	phase      txnPhase
	aborting   bool                        // AbortTransaction is running: unsent batches fail
	fatal      error                       // matches ErrProducerFenced; final
	failed     error                       // the transaction's first failure: it must abort
	bumpEpoch  bool                        // a failure may have broken a sequence chain: bump after the abort
	started    bool                        // the coordinator holds something of it: EndTxn is due
	added      map[topicPartition]bool     // in the transaction at the coordinator
	pending    map[topicPartition]bool     // produced to, not yet in an AddPartitionsToTxn
	adding     *addCall                    // the AddPartitionsToTxn in flight, if any
	groups     map[string]bool             // added with AddOffsetsToTxn
	groupLinks map[string]*coordinatorLink // to each group's coordinator, kept across transactions
}

// addCall is one AddPartitionsToTxn: its partitions, and its outcome once
// done is closed.
type addCall struct {
	tps  map[topicPartition]bool
	done chan struct{}
	err  error
}

func newTxnState(cl *cluster, cfg *config) *txnState {
	return &txnState{
		id:    cfg.transactionalID,
		link:  newCoordinatorLink(cl, cfg, cfg.transactionalID, coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION),
		added: map[topicPartition]bool{}, pending: map[topicPartition]bool{},
		groups: map[string]bool{}, groupLinks: map[string]*coordinatorLink{},
	}
}

// GroupMetadata identifies the consumer group (and the member in it) whose
// offsets SendOffsetsToTransaction commits with a transaction, as Kafka's
// ConsumerGroupMetadata (KIP-447). With MemberID set, the group's
// coordinator checks the member and its epoch as it checks a commit, so a
// member fenced out of the group (a zombie) cannot commit offsets for
// partitions that moved on; GroupConsumer.GroupMetadata fills it in.
// With MemberID empty, only the group is named and no member is checked.
type GroupMetadata struct {
	// GroupID is the consumer group; required.
	GroupID string
	// MemberID is the member's id, or "" to skip the member check.
	MemberID string
	// MemberEpoch is the member epoch (or a classic group's generation);
	// ignored when MemberID is empty.
	MemberEpoch int32
}

// GroupMetadata returns the group, member id and current member epoch,
// for SendOffsetsToTransaction.
func (g *GroupConsumer) GroupMetadata() GroupMetadata {
	return GroupMetadata{GroupID: g.group, MemberID: g.memberID, MemberEpoch: g.Epoch()}
}

// NextOffsets returns, per partition, the offset after the last of recs
// (the highest per partition): what a consume-transform-produce loop
// commits with SendOffsetsToTransaction for the records it processed.
func NextOffsets(recs []*Record) map[TopicPartition]int64 {
	out := map[TopicPartition]int64{}
	for _, r := range recs {
		tp := TopicPartition{r.Topic, r.Partition}
		if n, ok := out[tp]; !ok || r.Offset+1 > n {
			out[tp] = r.Offset + 1
		}
	}
	return out
}

// InitTransactions gets the transactional producer's id and epoch from
// the transaction coordinator (Kafka's initTransactions): it fences every
// earlier producer with the same TransactionalID, and aborts a transaction
// such a producer left open, waiting (with backoff, within ctx) until that
// abort is complete. Calling it is optional: the first call that needs the
// producer id makes it. Calling it again does nothing. It fails with
// ErrNoTransaction on a producer without TransactionalID.
func (p *Producer) InitTransactions(ctx context.Context) error {
	if p.txn == nil {
		return fmt.Errorf("%w: the producer has no TransactionalID", ErrNoTransaction)
	}
	_, err := p.producerID(ctx)
	return err
}

// BeginTransaction starts a transaction: records produced from now on,
// and offsets sent with SendOffsetsToTransaction, commit or abort
// together. It makes no call (the coordinator learns of the transaction
// with its first partition or group). It fails with ErrNoTransaction on a
// producer without TransactionalID, when a transaction is already open,
// and with the fence once the producer is fenced.
func (p *Producer) BeginTransaction() error {
	t := p.txn
	if t == nil {
		return fmt.Errorf("%w: the producer has no TransactionalID", ErrNoTransaction)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.fatal != nil:
		return t.fatal
	case t.phase != txnIdle:
		return errors.New("client: a transaction is already in progress")
	}
	t.phase, t.failed = txnOpen, nil
	return nil
}

// SendOffsetsToTransaction commits the group's offsets with the
// transaction (Kafka's sendOffsetsToTransaction, KIP-447): offsets maps
// each partition to the next offset to consume (NextOffsets), committed
// with leader epoch -1 and no metadata. It adds the group to the
// transaction (AddOffsetsToTxn to the transaction coordinator), then
// stages the offsets at the group's coordinator (TxnOffsetCommit, with the
// member id and epoch when gm names a member); they become the group's
// committed offsets if and only if the transaction commits. Retries as
// CommitTransaction's, within ctx. A failure (a fenced member: an error
// matching ErrFenced) makes the transaction abortable; ErrProducerFenced
// is final. When ctx ends first the offsets may or may not be staged:
// call it again before committing, or abort.
func (p *Producer) SendOffsetsToTransaction(ctx context.Context, gm GroupMetadata, offsets map[TopicPartition]int64) error {
	t := p.txn
	if err := t.check(txnOpen); err != nil {
		return err
	}
	if gm.GroupID == "" {
		return errors.New("client: SendOffsetsToTransaction needs a group id")
	}
	pid, err := p.producerID(ctx)
	if err != nil {
		return err
	}
	err = p.sendOffsets(ctx, pid, gm, offsets)
	if err != nil && ctx.Err() != nil {
		// The caller's context ended: the call may be made again, or the
		// transaction aborted; the caller decides.
		return err
	}
	return t.failure(err)
}

func (p *Producer) sendOffsets(ctx context.Context, pid producerID, gm GroupMetadata, offsets map[TopicPartition]int64) error {
	t := p.txn
	t.mu.Lock()
	known := t.groups[gm.GroupID]
	t.mu.Unlock()
	if !known {
		err := t.link.call(ctx, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) error {
			_, err := c.AddOffsetsToTxn(ctx, connect.NewRequest(&coordinatorv1.AddOffsetsToTxnRequest{
				TransactionalId: t.id, ProducerId: pid.id, ProducerEpoch: int32(pid.epoch), GroupId: gm.GroupID}))
			return err
		})
		if err != nil {
			return fmt.Errorf("client: add group %q to the transaction: %w", gm.GroupID, err)
		}
		t.mu.Lock()
		t.groups[gm.GroupID], t.started = true, true
		t.mu.Unlock()
	}
	if len(offsets) == 0 {
		return nil
	}
	req := &coordinatorv1.TxnOffsetCommitRequest{TransactionalId: t.id, GroupId: gm.GroupID,
		ProducerId: pid.id, ProducerEpoch: int32(pid.epoch), MemberId: gm.MemberID, MemberEpoch: -1}
	if gm.MemberID != "" {
		req.MemberEpoch = gm.MemberEpoch
	}
	for _, tp := range sortedTPs(offsets) {
		req.Partitions = append(req.Partitions, &coordinatorv1.TxnOffsetCommitPartition{
			Topic: tp.Topic, Partition: tp.Partition, CommittedOffset: offsets[tp], CommittedLeaderEpoch: -1})
	}
	var resp *coordinatorv1.TxnOffsetCommitResponse
	err := t.groupLink(p, gm.GroupID).call(ctx, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) error {
		r, err := c.TxnOffsetCommit(ctx, connect.NewRequest(req))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		if r := ReasonOf(err); r == commonv1.Reason_REASON_FENCED_MEMBER_EPOCH || r == commonv1.Reason_REASON_UNKNOWN_MEMBER_ID {
			return fmt.Errorf("%w: transactional offset commit of group %q: %w", ErrFenced, gm.GroupID, err)
		}
		return fmt.Errorf("client: transactional offset commit of group %q: %w", gm.GroupID, err)
	}
	var errs []error
	for _, r := range resp.GetPartitions() {
		if d := r.GetError(); d != nil {
			errs = append(errs, fmt.Errorf("client: transactional offset commit %s-%d: %w", r.GetTopic(), r.GetPartition(), fromDetail(d)))
		}
	}
	return errors.Join(errs...)
}

// CommitTransaction commits the transaction: it sends every record
// produced in it without waiting for Linger and waits for all their
// answers (as Flush), then asks the coordinator to commit (EndTxn), which
// answers once the decision is durable; read_committed consumers see the
// records once the coordinator has written the commit markers. Calls that
// fail because the coordinator moved, is unavailable or is finishing the
// previous transaction are retried with backoff within ctx.
//
// When a record or an offset of the transaction failed, it commits
// nothing and returns an error matching ErrAbortRequired: call
// AbortTransaction. When ctx ends first the transaction stays open:
// CommitTransaction (or AbortTransaction) may be called again. Once the
// producer is fenced every call returns an error matching
// ErrProducerFenced.
func (p *Producer) CommitTransaction(ctx context.Context) error {
	t := p.txn
	if err := t.check(txnOpen); err != nil {
		return err
	}
	t.setPhase(txnEnding)
	if err := p.Flush(ctx); err != nil {
		t.setPhase(txnOpen)
		return err
	}
	t.mu.Lock()
	fatal, failed, started := t.fatal, t.failed, t.started
	t.mu.Unlock()
	switch {
	case fatal != nil:
		return fatal
	case failed != nil:
		t.setPhase(txnOpen)
		return fmt.Errorf("%w: %w", ErrAbortRequired, failed)
	}
	if started {
		if err := p.endTxn(ctx, true); err != nil {
			t.setPhase(txnOpen)
			return err
		}
	}
	t.reset()
	return nil
}

// AbortTransaction aborts the transaction: records of it not yet sent
// fail with ErrTransactionAborted, those in flight are waited for, and the
// coordinator is asked to abort (EndTxn), so read_committed consumers
// never see the transaction's records and its offsets are dropped. After
// a failure in the transaction the producer's epoch is bumped too, so
// every partition starts its sequences afresh. Retries as
// CommitTransaction's, within ctx; when ctx ends first it may be called
// again.
func (p *Producer) AbortTransaction(ctx context.Context) error {
	t := p.txn
	if err := t.check(txnOpen); err != nil {
		return err
	}
	t.mu.Lock()
	t.phase, t.aborting = txnEnding, true
	t.mu.Unlock()
	if err := p.Flush(ctx); err != nil {
		t.setPhase(txnOpen)
		return err
	}
	t.mu.Lock()
	fatal, started, bump := t.fatal, t.started, t.bumpEpoch
	t.mu.Unlock()
	if fatal != nil {
		return fatal
	}
	if started {
		if err := p.endTxn(ctx, false); err != nil {
			t.setPhase(txnOpen)
			return err
		}
	}
	if bump {
		if err := p.bumpEpoch(ctx); err != nil {
			t.setPhase(txnOpen)
			return err
		}
	}
	t.reset()
	return nil
}

// check returns why the producer cannot act in phase want: not
// transactional, fenced, or in another phase. An AbortTransaction that
// did not finish may be called again.
func (t *txnState) check(want txnPhase) error {
	if t == nil {
		return fmt.Errorf("%w: the producer has no TransactionalID", ErrNoTransaction)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.fatal != nil:
		return t.fatal
	case t.phase != want:
		return ErrNoTransaction
	}
	return nil
}

func (t *txnState) setPhase(ph txnPhase) {
	t.mu.Lock()
	t.phase = ph
	if ph == txnOpen {
		t.aborting = false
	}
	t.mu.Unlock()
}

// reset ends the transaction on the producer's side.
func (t *txnState) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.phase, t.aborting, t.failed, t.bumpEpoch, t.started = txnIdle, false, nil, false, false
	clear(t.added)
	clear(t.pending)
	clear(t.groups)
}

// accept says whether a record produced now may join the transaction,
// and notes its partition for the next AddPartitionsToTxn.
func (t *txnState) accept(tp topicPartition) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.fatal != nil:
		return t.fatal
	case t.phase != txnOpen:
		return fmt.Errorf("%w: a transactional producer produces only between BeginTransaction and CommitTransaction or AbortTransaction", ErrNoTransaction)
	case t.failed != nil:
		return fmt.Errorf("%w: %w", ErrAbortRequired, t.failed)
	}
	if !t.added[tp] {
		t.pending[tp] = true
	}
	return nil
}

// fence returns the producer's fence, or nil.
func (t *txnState) fence() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.fatal
}

// isAborting reports whether batches not yet sent must fail.
func (t *txnState) isAborting() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.aborting || t.fatal != nil
}

// failure notes err, a failure of the transaction: the producer's fence
// (final), or any other (the transaction must abort). It returns the
// error to report.
func (t *txnState) failure(err error) error {
	if err == nil || t == nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.fatal != nil:
		return t.fatal
	case fenced(err):
		if !errors.Is(err, ErrProducerFenced) {
			err = fmt.Errorf("%w: %w", ErrProducerFenced, err)
		}
		t.fatal = err
	case errors.Is(err, ErrTransactionAborted), errors.Is(err, ErrNoTransaction), errors.Is(err, ErrAbortRequired):
		// Not a new failure: the transaction is already ending or failed.
	default:
		// Any record that failed, a delivery timeout included: committing
		// without it would lose it silently.
		if t.failed == nil {
			t.failed = err
		}
		t.bumpEpoch = true
	}
	return err
}

// fenced reports whether err says another producer holds the
// transactional id now: PRODUCER_FENCED from a coordinator, or a leader
// refusing the producer's epoch (INVALID_PRODUCER_EPOCH), which Kafka's
// transactional producer treats alike.
func fenced(err error) bool {
	switch ReasonOf(err) {
	case commonv1.Reason_REASON_PRODUCER_FENCED, commonv1.Reason_REASON_INVALID_PRODUCER_EPOCH:
		return true
	}
	return errors.Is(err, ErrProducerFenced)
}

// groupLink is the link to a group's coordinator, for TxnOffsetCommit.
func (t *txnState) groupLink(p *Producer, group string) *coordinatorLink {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.groupLinks[group]
	if l == nil {
		l = newCoordinatorLink(p.cl, &p.cfg, group, coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP)
		t.groupLinks[group] = l
	}
	return l
}

// ensureAdded returns once tp is in the transaction at the coordinator,
// adding it with every other partition produced to and not added yet in
// one AddPartitionsToTxn (or waiting for the call in flight). Called by
// the partition's sink before it sends a batch; ctx is the batch's
// delivery deadline.
func (p *Producer) ensureAdded(ctx context.Context, tp topicPartition) error {
	t := p.txn
	t.mu.Lock()
	for {
		switch {
		case t.fatal != nil:
			t.mu.Unlock()
			return t.fatal
		case t.added[tp]:
			t.mu.Unlock()
			return nil
		}
		call := t.adding
		if call == nil {
			t.pending[tp] = true
			call = &addCall{tps: t.pending, done: make(chan struct{})}
			t.pending, t.adding = map[topicPartition]bool{}, call
			t.mu.Unlock()
			call.err = t.failure(p.addPartitions(ctx, call.tps))
			t.mu.Lock()
			if call.err == nil {
				for tp := range call.tps {
					t.added[tp] = true
				}
				t.started = true
			}
			t.adding = nil
			close(call.done)
		} else {
			t.mu.Unlock()
			select {
			case <-call.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			t.mu.Lock()
		}
		if call.err != nil && call.tps[tp] {
			t.mu.Unlock()
			return call.err
		}
	}
}

// addPartitions sends one AddPartitionsToTxn for tps.
func (p *Producer) addPartitions(ctx context.Context, tps map[topicPartition]bool) error {
	t := p.txn
	pid, err := p.producerID(ctx)
	if err != nil {
		return err
	}
	req := &coordinatorv1.AddPartitionsToTxnRequest{TransactionalId: t.id, ProducerId: pid.id, ProducerEpoch: int32(pid.epoch)}
	byTopic := map[string]*commonv1.TopicPartitions{}
	for _, tp := range sortedTPs(publicTPs(tps)) {
		e := byTopic[tp.Topic]
		if e == nil {
			e = &commonv1.TopicPartitions{Topic: tp.Topic}
			byTopic[tp.Topic] = e
			req.Partitions = append(req.Partitions, e)
		}
		e.Partitions = append(e.Partitions, tp.Partition)
	}
	var resp *coordinatorv1.AddPartitionsToTxnResponse
	err = t.link.call(ctx, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) error {
		r, err := c.AddPartitionsToTxn(ctx, connect.NewRequest(req))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("client: add partitions to the transaction: %w", err)
	}
	// All or none: report the refused partition, not those the coordinator
	// did not attempt because of it.
	var notAttempted error
	for _, r := range resp.GetPartitions() {
		d := r.GetError()
		if d == nil {
			continue
		}
		e := fmt.Errorf("client: add %s-%d to the transaction: %w", r.GetTopic(), r.GetPartition(), fromDetail(d))
		if d.GetReason() != commonv1.Reason_REASON_OPERATION_NOT_ATTEMPTED {
			return e
		}
		notAttempted = e
	}
	return notAttempted
}

func publicTPs(tps map[topicPartition]bool) map[TopicPartition]bool {
	out := make(map[TopicPartition]bool, len(tps))
	for tp := range tps {
		out[TopicPartition{tp.topic, tp.partition}] = true
	}
	return out
}

// endTxn asks the coordinator to commit or abort.
func (p *Producer) endTxn(ctx context.Context, commit bool) error {
	t := p.txn
	pid, err := p.producerID(ctx)
	if err != nil {
		return err
	}
	err = t.link.call(ctx, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) error {
		_, err := c.EndTxn(ctx, connect.NewRequest(&coordinatorv1.EndTxnRequest{
			TransactionalId: t.id, ProducerId: pid.id, ProducerEpoch: int32(pid.epoch), Commit: commit}))
		return err
	})
	if err != nil {
		what := "abort"
		if commit {
			what = "commit"
		}
		err = fmt.Errorf("client: %s the transaction: %w", what, err)
		if fenced(err) {
			return t.failure(err)
		}
	}
	return err
}

// initTxnProducer asks the transaction coordinator for the producer id
// and epoch: a first one (old not valid), or old's next epoch (KIP-360).
// The caller holds pidMu.
func (p *Producer) initTxnProducer(ctx context.Context, old producerID) (producerID, error) {
	t := p.txn
	req := &coordinatorv1.InitTransactionalProducerRequest{TransactionalId: t.id,
		TransactionTimeoutMs: int32(p.cfg.transactionTimeout.Milliseconds()), ProducerId: -1, ProducerEpoch: -1}
	if old.valid {
		req.ProducerId, req.ProducerEpoch = old.id, int32(old.epoch)
	}
	var resp *coordinatorv1.InitTransactionalProducerResponse
	err := t.link.call(ctx, func(ctx context.Context, c coordinatorv1connect.CoordinatorServiceClient) error {
		r, err := c.InitTransactionalProducer(ctx, connect.NewRequest(req))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		err = fmt.Errorf("client: init transactional producer %q: %w", t.id, err)
		if fenced(err) {
			return producerID{}, t.failure(err)
		}
		return producerID{}, err
	}
	return producerID{id: resp.GetProducerId(), epoch: int16(resp.GetProducerEpoch()), valid: true}, nil
}

// bumpEpoch moves the producer to its next epoch after an abort, so that
// partitions whose sequences a failure may have broken start afresh
// (each sink adopts the new epoch at its next batch, sink.newChain).
func (p *Producer) bumpEpoch(ctx context.Context) error {
	p.pidMu.Lock()
	defer p.pidMu.Unlock()
	pid, err := p.initTxnProducer(ctx, p.pid)
	if err != nil {
		return err
	}
	p.pid = pid
	return nil
}

// currentPID is the transactional producer's id and epoch now.
func (p *Producer) currentPID() producerID {
	p.pidMu.Lock()
	defer p.pidMu.Unlock()
	return p.pid
}

// errTxnChainBroken fails a batch of a transaction whose partition's
// sequence chain broke: only an abort (and its epoch bump) mends it.
var errTxnChainBroken = errors.New("client: an earlier batch of the partition failed in this transaction")
