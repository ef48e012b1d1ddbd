package client

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/fakecluster"
)

// scriptedTxnCoordinator is a transaction coordinator for one
// transactional id that records every call in order ("Init", "Add",
// "AddOffsets", "TxnOffsetCommit", "Commit", "Abort") and answers each
// method's next scripted error first, if any. It checks the producer id
// and epoch as the real one does (PRODUCER_FENCED for another epoch).
type scriptedTxnCoordinator struct {
	coordinatorv1connect.UnimplementedCoordinatorServiceHandler

	mu     sync.Mutex
	epoch  int32
	calls  []string
	adds   [][]string // partitions of each AddPartitionsToTxn, "topic-partition"
	inits  []*coordinatorv1.InitTransactionalProducerRequest
	staged []*coordinatorv1.TxnOffsetCommitRequest
	script map[string][]error
}

const scriptedPID = 7

func newScriptedTxn(t *testing.T, fc *fakecluster.Cluster) *scriptedTxnCoordinator {
	co := &scriptedTxnCoordinator{script: map[string][]error{}}
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(co))
	fc.SetCoordinator(mux)
	return co
}

// fail makes the next calls of method answer errs, in order.
func (s *scriptedTxnCoordinator) fail(method string, errs ...error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script[method] = append(s.script[method], errs...)
}

// take records a call and returns its scripted error, or the fence when
// epoch is not the current one (-1: not checked).
func (s *scriptedTxnCoordinator) take(method string, epoch int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, method)
	if q := s.script[method]; len(q) > 0 {
		s.script[method] = q[1:]
		return q[0]
	}
	if epoch >= 0 && epoch != s.epoch {
		return apierr.New(connect.CodeAborted, commonv1.Reason_REASON_PRODUCER_FENCED, "epoch %d is not the current %d", epoch, s.epoch)
	}
	return nil
}

func (s *scriptedTxnCoordinator) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Bump fences the producer, as another producer's init would.
func (s *scriptedTxnCoordinator) Bump() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch++
}

func (s *scriptedTxnCoordinator) InitTransactionalProducer(_ context.Context, req *connect.Request[coordinatorv1.InitTransactionalProducerRequest]) (*connect.Response[coordinatorv1.InitTransactionalProducerResponse], error) {
	if err := s.take("Init", -1); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inits = append(s.inits, req.Msg)
	if req.Msg.GetProducerEpoch() >= 0 {
		if req.Msg.GetProducerEpoch() != s.epoch {
			return nil, apierr.New(connect.CodeAborted, commonv1.Reason_REASON_PRODUCER_FENCED, "fenced")
		}
		s.epoch++
	}
	return connect.NewResponse(&coordinatorv1.InitTransactionalProducerResponse{ProducerId: scriptedPID, ProducerEpoch: s.epoch}), nil
}

func (s *scriptedTxnCoordinator) AddPartitionsToTxn(_ context.Context, req *connect.Request[coordinatorv1.AddPartitionsToTxnRequest]) (*connect.Response[coordinatorv1.AddPartitionsToTxnResponse], error) {
	if err := s.take("Add", req.Msg.GetProducerEpoch()); err != nil {
		return nil, err
	}
	resp := &coordinatorv1.AddPartitionsToTxnResponse{}
	var names []string
	for _, tp := range req.Msg.GetPartitions() {
		for _, p := range tp.GetPartitions() {
			names = append(names, TopicPartition{tp.GetTopic(), p}.String())
			resp.Partitions = append(resp.Partitions, &coordinatorv1.TxnPartitionResult{Topic: tp.GetTopic(), Partition: p})
		}
	}
	s.mu.Lock()
	s.adds = append(s.adds, names)
	s.mu.Unlock()
	return connect.NewResponse(resp), nil
}

func (s *scriptedTxnCoordinator) AddOffsetsToTxn(_ context.Context, req *connect.Request[coordinatorv1.AddOffsetsToTxnRequest]) (*connect.Response[coordinatorv1.AddOffsetsToTxnResponse], error) {
	if err := s.take("AddOffsets", req.Msg.GetProducerEpoch()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordinatorv1.AddOffsetsToTxnResponse{}), nil
}

func (s *scriptedTxnCoordinator) TxnOffsetCommit(_ context.Context, req *connect.Request[coordinatorv1.TxnOffsetCommitRequest]) (*connect.Response[coordinatorv1.TxnOffsetCommitResponse], error) {
	if err := s.take("TxnOffsetCommit", req.Msg.GetProducerEpoch()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.staged = append(s.staged, req.Msg)
	s.mu.Unlock()
	resp := &coordinatorv1.TxnOffsetCommitResponse{}
	for _, p := range req.Msg.GetPartitions() {
		resp.Partitions = append(resp.Partitions, &coordinatorv1.TxnPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition()})
	}
	return connect.NewResponse(resp), nil
}

func (s *scriptedTxnCoordinator) EndTxn(_ context.Context, req *connect.Request[coordinatorv1.EndTxnRequest]) (*connect.Response[coordinatorv1.EndTxnResponse], error) {
	method := "Abort"
	if req.Msg.GetCommit() {
		method = "Commit"
	}
	if err := s.take(method, req.Msg.GetProducerEpoch()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordinatorv1.EndTxnResponse{}), nil
}

func newTxnProducerT(t *testing.T, fc *fakecluster.Cluster, opts ...ProducerOpt) *Producer {
	return newProducer(t, fc, append([]ProducerOpt{TransactionalID("tx"), ManualPartitioning()}, opts...)...)
}

// TestTransactionCallSequence: one init, the partitions of a transaction
// added in one call before their batches, offsets added then staged with
// the member named, and one EndTxn; records of the next transaction go to
// a partition added again.
func TestTransactionCallSequence(t *testing.T) {
	fc := newFake(t, 2, "t", 3)
	co := newScriptedTxn(t, fc)
	ctx := ctxT(t)
	p := newTxnProducerT(t, fc, Linger(time.Minute))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	gm := GroupMetadata{GroupID: "g", MemberID: "m", MemberEpoch: 4}
	if err := p.SendOffsetsToTransaction(ctx, gm, map[TopicPartition]int64{{"in", 0}: 10}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		p.Produce(ctx, &Record{Topic: "t", Partition: int32(i % 3), Value: []byte("v")}, func(_ *Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	p.Produce(ctx, &Record{Topic: "t", Partition: 1, Value: []byte("w")}, func(_ *Record, err error) {
		if err != nil {
			t.Errorf("produce: %v", err)
		}
	})
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"Init", "AddOffsets", "TxnOffsetCommit", "Add", "Commit", "Add", "Commit"}
	if got := co.Calls(); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if want := [][]string{{"t-0", "t-1", "t-2"}, {"t-1"}}; !slices.EqualFunc(co.adds, want, slices.Equal[[]string]) {
		t.Errorf("AddPartitionsToTxn partitions %v, want %v", co.adds, want)
	}
	st := co.staged[0]
	if st.GetGroupId() != "g" || st.GetMemberId() != "m" || st.GetMemberEpoch() != 4 || st.GetPartitions()[0].GetCommittedOffset() != 10 {
		t.Errorf("TxnOffsetCommit %v", st)
	}
	if in := co.inits[0]; in.GetTransactionTimeoutMs() != 60000 || in.GetProducerId() != -1 {
		t.Errorf("init %v, want a new producer with the 60 s default timeout", in)
	}
}

// TestTransactionRetriesCoordinatorErrors: CONCURRENT_TRANSACTIONS,
// NOT_COORDINATOR and an unavailable coordinator are retried, each
// reported to OnRetry.
func TestTransactionRetriesCoordinatorErrors(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	co := newScriptedTxn(t, fc)
	ctx := ctxT(t)
	var mu sync.Mutex
	var reasons []RetryReason
	p := newTxnProducerT(t, fc, OnRetry(func(ev RetryEvent) {
		mu.Lock()
		reasons = append(reasons, ev.Reason)
		mu.Unlock()
	}))
	co.fail("Init", apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_CONCURRENT_TRANSACTIONS, "previous transaction completing"))
	notCoord := apierr.Detail(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_COORDINATOR, "not the coordinator")
	// A hint without an address: the producer asks the gateway again.
	notCoord.Hint = &commonv1.ErrorDetail_Coordinator{Coordinator: &commonv1.CoordinatorHint{TransactionalId: "tx"}}
	co.fail("Add", apierr.Error(notCoord))
	co.fail("Commit", connect.NewError(connect.CodeUnavailable, errors.New("draining")))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"Init", "Init", "Add", "Add", "Commit", "Commit"}
	if got := co.Calls(); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []RetryReason{RetryConcurrentTransactions, RetryCoordinatorUnavailable, RetryCoordinatorUnavailable}; !slices.Equal(reasons, want) {
		t.Errorf("retries %v, want %v", reasons, want)
	}
}

// TestTransactionFencedIsFinal: once the coordinator answers
// PRODUCER_FENCED, every call fails with ErrProducerFenced.
func TestTransactionFencedIsFinal(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	co := newScriptedTxn(t, fc)
	ctx := ctxT(t)
	p := newTxnProducerT(t, fc)
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	co.Bump()
	if err := p.CommitTransaction(ctx); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("commit: %v, want ErrProducerFenced", err)
	}
	if err := p.BeginTransaction(); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("begin: %v, want ErrProducerFenced", err)
	}
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v")}); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("produce: %v, want ErrProducerFenced", err)
	}
	if err := p.AbortTransaction(ctx); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("abort: %v, want ErrProducerFenced", err)
	}
}

// TestTransactionFailedSendRequiresAbort: a record refused for good makes
// the commit fail with ErrAbortRequired and send nothing; the abort ends
// the transaction and bumps the epoch (KIP-360), and the next transaction
// writes under the new epoch from sequence 0.
func TestTransactionFailedSendRequiresAbort(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	co := newScriptedTxn(t, fc)
	ctx := ctxT(t)
	p := newTxnProducerT(t, fc)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, Count: 1,
		Code: connect.CodeInvalidArgument, Reason: commonv1.Reason_REASON_INVALID_RECORD})
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("bad")}); err == nil {
		t.Fatal("the refused record succeeded")
	}
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("after")}); !errors.Is(err, ErrAbortRequired) {
		t.Fatalf("produce after a failure: %v, want ErrAbortRequired", err)
	}
	if err := p.CommitTransaction(ctx); !errors.Is(err, ErrAbortRequired) {
		t.Fatalf("commit after a failure: %v, want ErrAbortRequired", err)
	}
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("good")}); err != nil {
		t.Fatal(err)
	}
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"Init", "Add", "Abort", "Init", "Add", "Commit"}
	if got := co.Calls(); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if bump := co.inits[1]; bump.GetProducerId() != scriptedPID || bump.GetProducerEpoch() != 0 {
		t.Errorf("the abort's init %v, want the bump of producer %d epoch 0", bump, scriptedPID)
	}
}

// TestTransactionAbortFailsUnsentRecords: records still lingering when the
// transaction aborts fail with ErrTransactionAborted, and nothing reaches
// the coordinator.
func TestTransactionAbortFailsUnsentRecords(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	co := newScriptedTxn(t, fc)
	ctx := ctxT(t)
	p := newTxnProducerT(t, fc, Linger(time.Minute))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	p.Produce(ctx, &Record{Topic: "t", Value: []byte("v")}, func(_ *Record, err error) { errc <- err })
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrTransactionAborted) {
		t.Fatalf("lingering record: %v, want ErrTransactionAborted", err)
	}
	if got := co.Calls(); len(got) != 0 {
		t.Errorf("calls %v, want none", got)
	}
}

// TestTransactionalProducerMisuse: a transactional producer produces only
// inside a transaction, and cannot be made without idempotence.
func TestTransactionalProducerMisuse(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	newScriptedTxn(t, fc)
	ctx := ctxT(t)
	p := newTxnProducerT(t, fc)
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v")}); !errors.Is(err, ErrNoTransaction) {
		t.Errorf("produce outside a transaction: %v, want ErrNoTransaction", err)
	}
	if err := p.CommitTransaction(ctx); !errors.Is(err, ErrNoTransaction) {
		t.Errorf("commit outside a transaction: %v, want ErrNoTransaction", err)
	}
	if err := newProducer(t, fc).BeginTransaction(); !errors.Is(err, ErrNoTransaction) {
		t.Errorf("BeginTransaction without TransactionalID: %v, want ErrNoTransaction", err)
	}
	for _, o := range []ProducerOpt{Idempotent(false), WithAcks(AcksLeader)} {
		if _, err := NewProducer(fc.GatewayURL(), TransactionalID("tx"), o); err == nil {
			t.Errorf("TransactionalID with %v: no validation error", o)
		}
	}
}

// TestTransactionDeliveryTimeoutRequiresAbort: a record whose delivery
// timeout passed (its leader never answered) fails the transaction too;
// committing without it would lose it silently.
func TestTransactionDeliveryTimeoutRequiresAbort(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	co := newScriptedTxn(t, fc)
	ctx := ctxT(t)
	p := newTxnProducerT(t, fc, DeliveryTimeout(300*time.Millisecond), RequestTimeout(100*time.Millisecond))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	hang := fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, Hang: true})
	if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v")}); !errors.Is(err, ErrDeliveryTimeout) {
		t.Fatalf("produce to a silent leader: %v, want ErrDeliveryTimeout", err)
	}
	fc.RemoveFault(hang)
	if err := p.CommitTransaction(ctx); !errors.Is(err, ErrAbortRequired) || !errors.Is(err, ErrDeliveryTimeout) {
		t.Fatalf("commit after a delivery timeout: %v, want ErrAbortRequired wrapping ErrDeliveryTimeout", err)
	}
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if got := co.Calls(); !slices.Equal(got, []string{"Init", "Add", "Abort", "Init"}) {
		t.Errorf("calls %v, want the abort and its epoch bump", got)
	}
}
