package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
)

// The transaction coordinator's tests: the handlers on SQLite and on
// PostgreSQL, against a gateway whose every partition is led by one fake
// storage node that answers WriteTxnMarkers.

// markerLeader is a storage node that records the markers it is sent and
// refuses them while refuse says so.
type markerLeader struct {
	storagev1connect.UnimplementedStorageServiceHandler
	mu     sync.Mutex
	got    []writtenMarker
	refuse func(topic string, partition int32) *commonv1.ErrorDetail // nil: take everything
}

// writtenMarker is one partition's marker as the leader took it.
type writtenMarker struct {
	topic      string
	partition  int32
	pid        int64
	epoch      int32
	commit     bool
	coordEpoch int32
}

func (l *markerLeader) WriteTxnMarkers(_ context.Context, req *connect.Request[storagev1.WriteTxnMarkersRequest]) (*connect.Response[storagev1.WriteTxnMarkersResponse], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := &storagev1.WriteTxnMarkersResponse{}
	for _, mk := range req.Msg.GetMarkers() {
		res := &storagev1.TxnMarkerResult{ProducerId: mk.GetProducerId()}
		for _, tp := range mk.GetPartitions() {
			for _, p := range tp.GetPartitions() {
				pr := &storagev1.TxnMarkerPartitionResult{Topic: tp.GetTopic(), Partition: p, Offset: -1}
				if l.refuse != nil {
					pr.Error = l.refuse(tp.GetTopic(), p)
				}
				if pr.Error == nil {
					pr.Offset = int64(len(l.got))
					l.got = append(l.got, writtenMarker{tp.GetTopic(), p, mk.GetProducerId(), mk.GetProducerEpoch(), mk.GetCommit(), mk.GetCoordinatorEpoch()})
				}
				res.Partitions = append(res.Partitions, pr)
			}
		}
		out.Markers = append(out.Markers, res)
	}
	return connect.NewResponse(out), nil
}

func (l *markerLeader) setRefuse(f func(string, int32) *commonv1.ErrorDetail) {
	l.mu.Lock()
	l.refuse = f
	l.mu.Unlock()
}

// markers returns the markers taken for producer pid.
func (l *markerLeader) markers(pid int64) []writtenMarker {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []writtenMarker
	for _, m := range l.got {
		if m.pid == pid {
			out = append(out, m)
		}
	}
	return out
}

// leaderGateway answers Metadata with every partition led by node 1.
type leaderGateway struct {
	gatewayv1connect.UnimplementedGatewayServiceHandler
	parts   map[string]int32
	storage string
}

func (g *leaderGateway) Metadata(_ context.Context, req *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	out := &gatewayv1.MetadataResponse{Nodes: []*commonv1.Node{{NodeId: 1, Address: g.storage}}}
	for _, name := range req.Msg.GetTopics() {
		n, ok := g.parts[name]
		if !ok {
			out.UnknownTopics = append(out.UnknownTopics, name)
			continue
		}
		md := &commonv1.TopicMetadata{Name: name}
		for p := range n {
			md.Partitions = append(md.Partitions, &commonv1.PartitionMetadata{Partition: p, LeaderId: 1, LeaderEpoch: 1})
		}
		out.Topics = append(out.Topics, md)
	}
	return connect.NewResponse(out), nil
}

// txnRig is a coordinator's surroundings: its gateway, the storage node
// leading every partition and the producer ids handed out.
type txnRig struct {
	leader  *markerLeader
	gateway string
	httpc   connect.HTTPClient
	mu      sync.Mutex
	nextPID int64
}

func newTxnRig(t *testing.T) *txnRig {
	r := &txnRig{leader: &markerLeader{}, nextPID: 1000}
	smux := http.NewServeMux()
	smux.Handle(storagev1connect.NewStorageServiceHandler(r.leader))
	st := httptest.NewServer(smux)
	t.Cleanup(st.Close)
	gmux := http.NewServeMux()
	gmux.Handle(gatewayv1connect.NewGatewayServiceHandler(&leaderGateway{parts: map[string]int32{"orders": 3, "audit": 1}, storage: st.URL}))
	gw := httptest.NewServer(gmux)
	t.Cleanup(gw.Close)
	r.gateway, r.httpc = gw.URL, gw.Client()
	return r
}

// start starts a coordinator instance on s; the store is closed by the
// first instance's cleanup (a second Close is harmless).
func (r *txnRig) start(t *testing.T, s offsetstore.Store, instance string, abortEvery time.Duration, tweak ...func(*Config)) *Coordinator {
	t.Helper()
	cfg := &Config{InstanceID: instance, Gateway: r.gateway, SessionTimeout: time.Minute, OwnershipLease: time.Minute,
		LagInterval: time.Hour, TransactionAbortInterval: abortEvery}
	for _, f := range tweak {
		f(cfg)
	}
	c, err := Start(context.Background(), cfg, "127.0.0.1:0", Options{Store: s, HTTPClient: r.httpc, Logger: slog.New(slog.DiscardHandler),
		ProducerIDs: func(context.Context) (int64, int32, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			first := r.nextPID
			r.nextPID += 10
			return first, 10, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = s.Close()
	})
	return c
}

// forEachTxnStore runs fn with a rig and a coordinator on a fresh SQLite
// file and on a fresh Postgres database (failing when Postgres is absent).
func forEachTxnStore(t *testing.T, fn func(t *testing.T, r *txnRig, s offsetstore.Store, c *Coordinator)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			r := newTxnRig(t)
			s := openStore(t, kind)
			fn(t, r, s, r.start(t, s, "coordinator-a", time.Hour))
		})
	}
}

func bg() context.Context { return context.Background() }

// initProducer initializes transactional id id with a 60 s timeout.
func initProducer(t *testing.T, c *Coordinator, id string) (int64, int32) {
	t.Helper()
	resp, err := c.InitTransactionalProducer(bg(), connect.NewRequest(&coordinatorv1.InitTransactionalProducerRequest{
		TransactionalId: id, TransactionTimeoutMs: 60000, ProducerId: -1, ProducerEpoch: -1}))
	if err != nil {
		t.Fatalf("InitTransactionalProducer(%s): %v", id, err)
	}
	return resp.Msg.GetProducerId(), resp.Msg.GetProducerEpoch()
}

func addPartitions(c *Coordinator, id string, pid int64, epoch int32, topic string, parts ...int32) (*coordinatorv1.AddPartitionsToTxnResponse, error) {
	resp, err := c.AddPartitionsToTxn(bg(), connect.NewRequest(&coordinatorv1.AddPartitionsToTxnRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: epoch,
		Partitions: []*commonv1.TopicPartitions{{Topic: topic, Partitions: parts}}}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func endTxn(c *Coordinator, id string, pid int64, epoch int32, commit bool) error {
	_, err := c.EndTxn(bg(), connect.NewRequest(&coordinatorv1.EndTxnRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: epoch, Commit: commit}))
	return err
}

func describeTxn(t *testing.T, c *Coordinator, id string) *coordinatorv1.TransactionDescription {
	t.Helper()
	resp, err := c.DescribeTransactions(bg(), connect.NewRequest(&coordinatorv1.DescribeTransactionsRequest{TransactionalIds: []string{id}}))
	if err != nil {
		t.Fatalf("DescribeTransactions(%s): %v", id, err)
	}
	return resp.Msg.GetTransactions()[0]
}

// waitState waits until id is in state.
func waitState(t *testing.T, c *Coordinator, id string, state coordinatorv1.TransactionState) *coordinatorv1.TransactionDescription {
	t.Helper()
	var d *coordinatorv1.TransactionDescription
	testwait.Until(t, 10*time.Second, fmt.Sprintf("%s %s", id, state), func() error {
		if d = describeTxn(t, c, id); d.GetState() != state {
			return fmt.Errorf("state %s, partitions %v", d.GetState(), d.GetPartitions())
		}
		return nil
	})
	return d
}

// wantReason fails unless err carries reason.
func wantReason(t *testing.T, what string, err error, reason commonv1.Reason) {
	t.Helper()
	if got := apierr.ReasonOf(err); got != reason {
		t.Errorf("%s: %v; want %s", what, err, reason)
	}
}

func txnCommitted(t *testing.T, c *Coordinator, group string) map[int32]int64 {
	t.Helper()
	resp, err := c.OffsetFetch(bg(), connect.NewRequest(&coordinatorv1.OffsetFetchRequest{GroupId: group}))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for _, o := range resp.Msg.GetOffsets() {
		out[o.GetPartition()] = o.GetCommittedOffset()
	}
	return out
}

func stage(c *Coordinator, id, group string, pid int64, epoch int32, offsets map[int32]int64) error {
	req := &coordinatorv1.TxnOffsetCommitRequest{TransactionalId: id, GroupId: group, ProducerId: pid, ProducerEpoch: epoch, MemberEpoch: -1}
	for _, p := range slices.Sorted(func(yield func(int32) bool) {
		for p := range offsets {
			if !yield(p) {
				return
			}
		}
	}) {
		req.Partitions = append(req.Partitions, &coordinatorv1.TxnOffsetCommitPartition{Topic: "orders", Partition: p, CommittedOffset: offsets[p], CommittedLeaderEpoch: -1})
	}
	_, err := c.TxnOffsetCommit(bg(), connect.NewRequest(req))
	return err
}

// A committed transaction: partitions and a group added, offsets staged
// (invisible until the commit), EndTxn answered once PrepareCommit is
// durable with the offsets committed in it, then a commit marker on every
// partition with the producer's id and epoch and the owner's epoch, and
// CompleteCommit without partitions. The next transaction of the same
// producer starts from CompleteCommit.
func TestTxnCommit(t *testing.T) {
	forEachTxnStore(t, func(t *testing.T, r *txnRig, _ offsetstore.Store, c *Coordinator) {
		pid, epoch := initProducer(t, c, "tx")
		if pid != 1000 || epoch != 0 {
			t.Fatalf("first producer: id %d epoch %d; want the block's first id, epoch 0", pid, epoch)
		}
		if d := describeTxn(t, c, "tx"); d.GetState() != coordinatorv1.TransactionState_TRANSACTION_STATE_EMPTY || d.GetTransactionTimeoutMs() != 60000 ||
			d.GetCoordinatorId() != "coordinator-a" || d.GetTransactionStartTimeMs() != -1 {
			t.Fatalf("after init: %v", d)
		}
		if _, err := addPartitions(c, "tx", pid, epoch, "orders", 0, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := addPartitions(c, "tx", pid, epoch, "audit", 0); err != nil {
			t.Fatal(err)
		}
		if _, err := c.AddOffsetsToTxn(bg(), connect.NewRequest(&coordinatorv1.AddOffsetsToTxnRequest{TransactionalId: "tx", ProducerId: pid, ProducerEpoch: epoch, GroupId: "g"})); err != nil {
			t.Fatal(err)
		}
		if err := stage(c, "tx", "g", pid, epoch, map[int32]int64{0: 10, 1: 20}); err != nil {
			t.Fatalf("TxnOffsetCommit: %v", err)
		}
		d := describeTxn(t, c, "tx")
		if d.GetState() != coordinatorv1.TransactionState_TRANSACTION_STATE_ONGOING || len(d.GetPartitions()) != 2 ||
			!slices.Equal(d.GetGroupIds(), []string{"g"}) || d.GetTransactionStartTimeMs() <= 0 {
			t.Fatalf("Ongoing: %v", d)
		}
		if got := txnCommitted(t, c, "g"); len(got) != 0 {
			t.Fatalf("staged offsets visible before the commit: %v", got)
		}
		// require_stable (KIP-447): the staged partitions are not
		// answered while the transaction is open; the others are.
		stable := func() map[int32]commonv1.Reason {
			t.Helper()
			res, err := c.OffsetFetch(bg(), connect.NewRequest(&coordinatorv1.OffsetFetchRequest{GroupId: "g", RequireStable: true,
				Topics: []*commonv1.TopicPartitions{{Topic: "orders", Partitions: []int32{0, 1, 2}}}}))
			if err != nil {
				t.Fatalf("OffsetFetch require_stable: %v", err)
			}
			out := map[int32]commonv1.Reason{}
			for _, o := range res.Msg.GetOffsets() {
				out[o.GetPartition()] = o.GetError().GetReason()
			}
			return out
		}
		if got := stable(); got[0] != commonv1.Reason_REASON_UNSTABLE_OFFSET_COMMIT || got[1] != commonv1.Reason_REASON_UNSTABLE_OFFSET_COMMIT || got[2] != 0 {
			t.Fatalf("require_stable while staged: %v; want 0 and 1 unstable, 2 answered", got)
		}
		if err := endTxn(c, "tx", pid, epoch, true); err != nil {
			t.Fatalf("EndTxn commit: %v", err)
		}
		if got := stable(); got[0] != 0 || got[1] != 0 {
			t.Fatalf("require_stable after the commit: %v; want every partition answered", got)
		}
		if got := txnCommitted(t, c, "g"); got[0] != 10 || got[1] != 20 {
			t.Fatalf("after EndTxn: committed %v; want 0:10 1:20", got)
		}
		d = waitState(t, c, "tx", coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT)
		if len(d.GetPartitions()) != 0 || len(d.GetGroupIds()) != 0 {
			t.Errorf("CompleteCommit keeps %v %v", d.GetPartitions(), d.GetGroupIds())
		}
		got := r.leader.markers(pid)
		slices.SortFunc(got, func(a, b writtenMarker) int { return compareTP(a.topic, a.partition, b.topic, b.partition) })
		want := []writtenMarker{{"audit", 0, pid, 0, true, 1}, {"orders", 0, pid, 0, true, 1}, {"orders", 2, pid, 0, true, 1}}
		if !slices.Equal(got, want) {
			t.Fatalf("markers %+v; want %+v", got, want)
		}
		// A retried commit is answered success; an abort now is not.
		if err := endTxn(c, "tx", pid, epoch, true); err != nil {
			t.Errorf("retried EndTxn commit: %v", err)
		}
		wantReason(t, "EndTxn abort after the commit", endTxn(c, "tx", pid, epoch, false), commonv1.Reason_REASON_INVALID_TXN_STATE)
		// The next transaction.
		if _, err := addPartitions(c, "tx", pid, epoch, "orders", 1); err != nil {
			t.Fatal(err)
		}
		if d := describeTxn(t, c, "tx"); d.GetState() != coordinatorv1.TransactionState_TRANSACTION_STATE_ONGOING ||
			len(d.GetPartitions()) != 1 || !slices.Equal(d.GetPartitions()[0].GetPartitions(), []int32{1}) {
			t.Fatalf("the next transaction: %v", d)
		}
		list, err := c.ListTransactions(bg(), connect.NewRequest(&coordinatorv1.ListTransactionsRequest{
			States: []coordinatorv1.TransactionState{coordinatorv1.TransactionState_TRANSACTION_STATE_ONGOING}}))
		if err != nil || len(list.Msg.GetTransactions()) != 1 || list.Msg.GetTransactions()[0].GetProducerId() != pid {
			t.Fatalf("ListTransactions(Ongoing) = %v, %v", list, err)
		}
		list, err = c.ListTransactions(bg(), connect.NewRequest(&coordinatorv1.ListTransactionsRequest{ProducerIds: []int64{pid + 1}}))
		if err != nil || len(list.Msg.GetTransactions()) != 0 {
			t.Fatalf("ListTransactions(another producer) = %v, %v", list, err)
		}
	})
}

func compareTP(t1 string, p1 int32, t2 string, p2 int32) int {
	if t1 != t2 {
		if t1 < t2 {
			return -1
		}
		return 1
	}
	return int(p1 - p2)
}

// An abort drops the staged offsets and writes abort markers. A second
// InitTransactionalProducer fences the first producer (PRODUCER_FENCED on
// its next call); one while a transaction is Ongoing aborts it under the
// bumped epoch and answers CONCURRENT_TRANSACTIONS until the markers are
// written, after which the retry bumps again. Producer ids and epochs
// that are not the transactional id's are refused with Kafka's errors.
func TestTxnAbortAndFencing(t *testing.T) {
	forEachTxnStore(t, func(t *testing.T, r *txnRig, _ offsetstore.Store, c *Coordinator) {
		pid, e0 := initProducer(t, c, "tx")
		wantReason(t, "EndTxn with no transaction", endTxn(c, "tx", pid, e0, true), commonv1.Reason_REASON_INVALID_TXN_STATE)
		if _, err := addPartitions(c, "tx", pid, e0, "orders", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := c.AddOffsetsToTxn(bg(), connect.NewRequest(&coordinatorv1.AddOffsetsToTxnRequest{TransactionalId: "tx", ProducerId: pid, ProducerEpoch: e0, GroupId: "g"})); err != nil {
			t.Fatal(err)
		}
		if err := stage(c, "tx", "g", pid, e0, map[int32]int64{1: 7}); err != nil {
			t.Fatal(err)
		}
		if err := endTxn(c, "tx", pid, e0, false); err != nil {
			t.Fatalf("EndTxn abort: %v", err)
		}
		wantReason(t, "EndTxn commit after the abort", endTxn(c, "tx", pid, e0, true), commonv1.Reason_REASON_INVALID_TXN_STATE)
		waitState(t, c, "tx", coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_ABORT)
		if got := txnCommitted(t, c, "g"); len(got) != 0 {
			t.Fatalf("an aborted transaction committed %v", got)
		}
		if m := r.leader.markers(pid); len(m) != 1 || m[0].commit || m[0].epoch != e0 {
			t.Fatalf("abort markers %+v", m)
		}

		// A new producer fences the old one.
		pid2, e1 := initProducer(t, c, "tx")
		if pid2 != pid || e1 != e0+1 {
			t.Fatalf("second init: %d/%d; want %d/%d", pid2, e1, pid, e0+1)
		}
		_, err := addPartitions(c, "tx", pid, e0, "orders", 0)
		wantReason(t, "AddPartitionsToTxn of the fenced producer", err, commonv1.Reason_REASON_PRODUCER_FENCED)
		_, err = addPartitions(c, "tx", pid+5, e1, "orders", 0)
		wantReason(t, "AddPartitionsToTxn of another producer id", err, commonv1.Reason_REASON_INVALID_PRODUCER_ID_MAPPING)
		_, err = addPartitions(c, "nope", pid, e1, "orders", 0)
		wantReason(t, "AddPartitionsToTxn of an unknown transactional id", err, commonv1.Reason_REASON_INVALID_PRODUCER_ID_MAPPING)

		// Init while Ongoing: the transaction is aborted under e1+1.
		if _, err := addPartitions(c, "tx", pid, e1, "orders", 0, 2); err != nil {
			t.Fatal(err)
		}
		r.leader.setRefuse(func(string, int32) *commonv1.ErrorDetail {
			return &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNAVAILABLE, Reason: commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS}
		})
		_, err = c.InitTransactionalProducer(bg(), connect.NewRequest(&coordinatorv1.InitTransactionalProducerRequest{
			TransactionalId: "tx", TransactionTimeoutMs: 60000, ProducerId: -1, ProducerEpoch: -1}))
		wantReason(t, "init while Ongoing", err, commonv1.Reason_REASON_CONCURRENT_TRANSACTIONS)
		d := describeTxn(t, c, "tx")
		if d.GetState() != coordinatorv1.TransactionState_TRANSACTION_STATE_PREPARE_ABORT || d.GetProducerEpoch() != e1+1 || len(d.GetPartitions()) != 1 {
			t.Fatalf("after the fencing init: %v; want PrepareAbort at epoch %d waiting on orders 0 and 2", d, e1+1)
		}
		_, err = c.InitTransactionalProducer(bg(), connect.NewRequest(&coordinatorv1.InitTransactionalProducerRequest{
			TransactionalId: "tx", TransactionTimeoutMs: 60000, ProducerId: -1, ProducerEpoch: -1}))
		wantReason(t, "init while the abort's markers wait", err, commonv1.Reason_REASON_CONCURRENT_TRANSACTIONS)
		wantReason(t, "EndTxn of the fenced producer", endTxn(c, "tx", pid, e1, true), commonv1.Reason_REASON_PRODUCER_FENCED)
		r.leader.setRefuse(nil)
		waitState(t, c, "tx", coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_ABORT)
		if _, e3 := initProducer(t, c, "tx"); e3 != e1+2 {
			t.Fatalf("init after the abort: epoch %d, want %d", e3, e1+2)
		}
		for _, m := range r.leader.markers(pid)[1:] {
			if m.commit || m.epoch != e1+1 {
				t.Errorf("marker of the fenced transaction %+v; want abort at epoch %d", m, e1+1)
			}
		}

		// KIP-360: the producer names its own id and epoch.
		resp, err := c.InitTransactionalProducer(bg(), connect.NewRequest(&coordinatorv1.InitTransactionalProducerRequest{
			TransactionalId: "tx", TransactionTimeoutMs: 60000, ProducerId: pid, ProducerEpoch: e1 + 2}))
		if err != nil || resp.Msg.GetProducerEpoch() != e1+3 {
			t.Fatalf("init naming the current epoch: %v %v; want epoch %d", resp, err, e1+3)
		}
		_, err = c.InitTransactionalProducer(bg(), connect.NewRequest(&coordinatorv1.InitTransactionalProducerRequest{
			TransactionalId: "tx", TransactionTimeoutMs: 60000, ProducerId: pid, ProducerEpoch: e0}))
		wantReason(t, "init naming an old epoch", err, commonv1.Reason_REASON_PRODUCER_FENCED)
		_, err = c.InitTransactionalProducer(bg(), connect.NewRequest(&coordinatorv1.InitTransactionalProducerRequest{
			TransactionalId: "tx", TransactionTimeoutMs: int32((16 * time.Minute).Milliseconds()), ProducerId: -1, ProducerEpoch: -1}))
		wantReason(t, "a timeout over the maximum", err, commonv1.Reason_REASON_INVALID_TRANSACTION_TIMEOUT)
	})
}

// AddPartitionsToTxn is all or none: an unknown partition is refused and
// the others are not attempted, the transaction untouched. TxnOffsetCommit
// needs the group added to an Ongoing transaction of the producer, and
// checks a named member as a commit.
func TestTxnRefusals(t *testing.T) {
	forEachTxnStore(t, func(t *testing.T, _ *txnRig, _ offsetstore.Store, c *Coordinator) {
		pid, epoch := initProducer(t, c, "tx")
		resp, err := c.AddPartitionsToTxn(bg(), connect.NewRequest(&coordinatorv1.AddPartitionsToTxnRequest{TransactionalId: "tx", ProducerId: pid, ProducerEpoch: epoch,
			Partitions: []*commonv1.TopicPartitions{{Topic: "orders", Partitions: []int32{0, 9}}, {Topic: "missing", Partitions: []int32{0}}}}))
		if err != nil {
			t.Fatal(err)
		}
		var reasons []commonv1.Reason
		for _, p := range resp.Msg.GetPartitions() {
			reasons = append(reasons, p.GetError().GetReason())
		}
		if !slices.Equal(reasons, []commonv1.Reason{commonv1.Reason_REASON_OPERATION_NOT_ATTEMPTED,
			commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION}) {
			t.Fatalf("AddPartitionsToTxn with unknown partitions: %v", reasons)
		}
		if d := describeTxn(t, c, "tx"); d.GetState() != coordinatorv1.TransactionState_TRANSACTION_STATE_EMPTY {
			t.Fatalf("a refused AddPartitionsToTxn changed the state: %v", d)
		}
		wantReason(t, "TxnOffsetCommit with no transaction", stage(c, "tx", "g", pid, epoch, map[int32]int64{0: 1}), commonv1.Reason_REASON_INVALID_TXN_STATE)
		if _, err := addPartitions(c, "tx", pid, epoch, "orders", 0); err != nil {
			t.Fatal(err)
		}
		wantReason(t, "TxnOffsetCommit of a group not added", stage(c, "tx", "g", pid, epoch, map[int32]int64{0: 1}), commonv1.Reason_REASON_INVALID_TXN_STATE)
		wantReason(t, "TxnOffsetCommit of a fenced epoch", stage(c, "tx", "g", pid, epoch+1, map[int32]int64{0: 1}), commonv1.Reason_REASON_PRODUCER_FENCED)
		if _, err := c.AddOffsetsToTxn(bg(), connect.NewRequest(&coordinatorv1.AddOffsetsToTxnRequest{TransactionalId: "tx", ProducerId: pid, ProducerEpoch: epoch, GroupId: "g"})); err != nil {
			t.Fatal(err)
		}
		_, err = c.TxnOffsetCommit(bg(), connect.NewRequest(&coordinatorv1.TxnOffsetCommitRequest{TransactionalId: "tx", GroupId: "g", ProducerId: pid, ProducerEpoch: epoch,
			MemberId: "ghost", MemberEpoch: 3, Partitions: []*coordinatorv1.TxnOffsetCommitPartition{{Topic: "orders", Partition: 0, CommittedOffset: 1}}}))
		wantReason(t, "TxnOffsetCommit naming an unknown member", err, commonv1.Reason_REASON_UNKNOWN_MEMBER_ID)
		if err := stage(c, "tx", "g", pid, epoch, map[int32]int64{0: 1}); err != nil {
			t.Fatalf("TxnOffsetCommit without a member: %v", err)
		}
	})
}

// Markers the leader refuses (a leader change, too few replicas) are
// retried with backoff; meanwhile the transaction stays PrepareCommit and
// names the partitions still waiting, and EndTxn's retry is answered.
func TestTxnMarkersRetried(t *testing.T) {
	forEachTxnStore(t, func(t *testing.T, r *txnRig, _ offsetstore.Store, c *Coordinator) {
		pid, epoch := initProducer(t, c, "tx")
		if _, err := addPartitions(c, "tx", pid, epoch, "orders", 0, 1); err != nil {
			t.Fatal(err)
		}
		r.leader.setRefuse(func(_ string, p int32) *commonv1.ErrorDetail {
			if p == 1 {
				return &commonv1.ErrorDetail{Code: commonv1.Code_CODE_FAILED_PRECONDITION, Reason: commonv1.Reason_REASON_NOT_LEADER}
			}
			return nil
		})
		if err := endTxn(c, "tx", pid, epoch, true); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, "orders-0's marker written, orders-1's waiting", func() error {
			d := describeTxn(t, c, "tx")
			if d.GetState() != coordinatorv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT || len(d.GetPartitions()) != 1 ||
				!slices.Equal(d.GetPartitions()[0].GetPartitions(), []int32{1}) {
				return fmt.Errorf("%v", d)
			}
			return nil
		})
		if err := endTxn(c, "tx", pid, epoch, true); err != nil {
			t.Errorf("EndTxn retried while the markers wait: %v", err)
		}
		r.leader.setRefuse(nil)
		waitState(t, c, "tx", coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT)
		if m := r.leader.markers(pid); len(m) != 2 {
			t.Fatalf("markers %+v; want one per partition", m)
		}
	})
}

// An Ongoing transaction past its timeout is aborted by the sweep: the
// epoch is bumped (the producer's next call is PRODUCER_FENCED), abort
// markers carry the new epoch, and it ends CompleteAbort.
func TestTxnTimeoutAborts(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			r := newTxnRig(t)
			c := r.start(t, openStore(t, kind), "coordinator-a", 20*time.Millisecond)
			resp, err := c.InitTransactionalProducer(bg(), connect.NewRequest(&coordinatorv1.InitTransactionalProducerRequest{
				TransactionalId: "tx", TransactionTimeoutMs: 100, ProducerId: -1, ProducerEpoch: -1}))
			if err != nil {
				t.Fatal(err)
			}
			pid, epoch := resp.Msg.GetProducerId(), resp.Msg.GetProducerEpoch()
			if _, err := addPartitions(c, "tx", pid, epoch, "orders", 2); err != nil {
				t.Fatal(err)
			}
			d := waitState(t, c, "tx", coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_ABORT)
			if d.GetProducerEpoch() != epoch+1 {
				t.Errorf("after the timeout: epoch %d, want %d", d.GetProducerEpoch(), epoch+1)
			}
			if m := r.leader.markers(pid); len(m) != 1 || m[0].commit || m[0].epoch != epoch+1 || m[0].partition != 2 {
				t.Errorf("markers %+v; want one abort at epoch %d on orders-2", m, epoch+1)
			}
			wantReason(t, "EndTxn after the timeout", endTxn(c, "tx", pid, epoch, true), commonv1.Reason_REASON_PRODUCER_FENCED)
		})
	}
}

// A decided transaction whose owner stopped before its markers were
// written is completed by the next owner: once by the sweep, which claims
// a transactional id without a live owner, and once by a retried EndTxn,
// whose claim starts the markers. The new owner's markers carry its
// newer owner epoch.
func TestTxnRecoveryOfPrepared(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			r := newTxnRig(t)
			s := openStore(t, kind)
			a := r.start(t, s, "coordinator-a", time.Hour)
			refuseAll := func(string, int32) *commonv1.ErrorDetail {
				return &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNAVAILABLE, Reason: commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS}
			}
			r.leader.setRefuse(refuseAll)
			var pids [2]int64
			var epochs [2]int32
			for i, id := range []string{"by-sweep", "by-endtxn"} {
				pids[i], epochs[i] = initProducer(t, a, id)
				if _, err := addPartitions(a, id, pids[i], epochs[i], "orders", 0); err != nil {
					t.Fatal(err)
				}
				if err := endTxn(a, id, pids[i], epochs[i], i == 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Close(); err != nil { // releases the leases; the markers never got through
				t.Fatal(err)
			}
			r.leader.setRefuse(nil)
			if d := describeTxn(t, a, "by-sweep"); d.GetState() != coordinatorv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT {
				t.Fatalf("before the handover: %v", d)
			}

			b := r.start(t, s, "coordinator-b", 20*time.Millisecond)
			d := waitState(t, b, "by-sweep", coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT)
			if d.GetCoordinatorId() != "coordinator-b" {
				t.Errorf("completed by %q, want coordinator-b", d.GetCoordinatorId())
			}
			if m := r.leader.markers(pids[0]); len(m) != 1 || !m[0].commit || m[0].coordEpoch != 2 {
				t.Errorf("recovered markers %+v; want one commit at owner epoch 2", m)
			}
			if err := endTxn(b, "by-endtxn", pids[1], epochs[1], false); err != nil {
				t.Fatalf("EndTxn retried on the new owner: %v", err)
			}
			waitState(t, b, "by-endtxn", coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_ABORT)
			if m := r.leader.markers(pids[1]); len(m) != 1 || m[0].commit {
				t.Errorf("recovered abort markers %+v", m)
			}
		})
	}
}

// A transactional id is located, and fenced, apart from a group of the
// same name: each is claimed on its own, and a call to an instance that
// does not own the id answers NOT_COORDINATOR naming the owner.
func TestLocateTransaction(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			r := newTxnRig(t)
			s := openStore(t, kind)
			a := r.start(t, s, "coordinator-a", time.Hour)
			b := r.start(t, s, "coordinator-b", time.Hour)
			loc, err := a.LocateGroup(bg(), connect.NewRequest(&coordinatorv1.LocateGroupRequest{GroupId: "x",
				KeyType: coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION}))
			if err != nil || loc.Msg.GetCoordinatorId() != "coordinator-a" || loc.Msg.GetOwnerEpoch() != 1 || !loc.Msg.GetListenerResolved() {
				t.Fatalf("locate transactional id x on a: %v, %v", loc, err)
			}
			loc, err = b.LocateGroup(bg(), connect.NewRequest(&coordinatorv1.LocateGroupRequest{GroupId: "x"}))
			if err != nil || loc.Msg.GetCoordinatorId() != "coordinator-b" || loc.Msg.GetOwnerEpoch() != 1 {
				t.Fatalf("locate group x on b: %v, %v", loc, err)
			}
			loc, err = b.LocateGroup(bg(), connect.NewRequest(&coordinatorv1.LocateGroupRequest{GroupId: "x",
				KeyType: coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION}))
			if err != nil || loc.Msg.GetCoordinatorId() != "coordinator-a" || loc.Msg.GetListenerResolved() {
				t.Fatalf("locate transactional id x on b: %v, %v; want a named", loc, err)
			}
			_, err = b.InitTransactionalProducer(bg(), connect.NewRequest(&coordinatorv1.InitTransactionalProducerRequest{
				TransactionalId: "x", TransactionTimeoutMs: 1000, ProducerId: -1, ProducerEpoch: -1}))
			wantReason(t, "init on the instance that does not own the id", err, commonv1.Reason_REASON_NOT_COORDINATOR)
			if h := apierr.AsDetail(err).GetCoordinator(); h.GetTransactionalId() != "x" || h.GetCoordinatorId() != "coordinator-a" {
				t.Errorf("NOT_COORDINATOR hint %v; want transactional id x at coordinator-a", h)
			}
		})
	}
}

// A transactional id without a transaction that nobody used for
// --transactional-id-expiration is deleted: described, it is not found,
// and its next producer starts over with a new producer id. One with a
// transaction open is kept however old.
func TestTxnIdExpires(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			r := newTxnRig(t)
			c := r.start(t, openStore(t, kind), "coordinator-a", time.Hour, func(cfg *Config) {
				cfg.TransactionalIDExpiration, cfg.TransactionalIDExpirationInterval = 300*time.Millisecond, 20*time.Millisecond
			})
			pid, _ := initProducer(t, c, "idle")
			busyPID, busyEpoch := initProducer(t, c, "busy")
			if _, err := addPartitions(c, "busy", busyPID, busyEpoch, "orders", 0); err != nil {
				t.Fatal(err)
			}
			testwait.Until(t, 10*time.Second, "idle expired", func() error {
				if d := describeTxn(t, c, "idle"); d.GetError().GetReason() != commonv1.Reason_REASON_TRANSACTIONAL_ID_NOT_FOUND {
					return fmt.Errorf("%v", d)
				}
				return nil
			})
			if d := describeTxn(t, c, "busy"); d.GetState() != coordinatorv1.TransactionState_TRANSACTION_STATE_ONGOING {
				t.Fatalf("an Ongoing transaction expired: %v", d)
			}
			if again, _ := initProducer(t, c, "idle"); again == pid {
				t.Fatalf("the expired id's next producer got its old producer id %d", pid)
			}
		})
	}
}
