package tests

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// The transaction coordinator on real processes: a producer id from the
// controller's blocks, a commit and an abort decided by the coordinator,
// and their markers in the partitions' logs, appended by the leader
// through WriteTxnMarkers; in a secure cluster the coordinator calls the
// storage node under its own certificate, the only identity it accepts.
// Each transaction writes a record first: the leader verifies the
// partition with the coordinator (KIP-890 part 1) under the storage
// node's certificate, and refuses a partition the transaction did not add.
func TestTransactionMarkersReachTheLog(t *testing.T) {
	t.Parallel()
	plainAndSecure(t, testTransactionMarkers)
}

func testTransactionMarkers(t *testing.T, secure bool) {
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 1, Secure: secure})
	ctx := harness.Deadline(t, 100*time.Second)
	c.CreateTopic(ctx, "txn", 2, 1, nil)
	gs := harness.StartGroupServices(t, c, harness.GroupConfig{CoordinatorArgsFor: func(int, string) []string {
		if secure {
			return nil // the harness gives --controller in a secure cluster
		}
		return []string{"--controller", strings.Join(c.ControllerURLs(), ",")} // for producer ids
	}})
	co := coordinatorv1connect.NewCoordinatorServiceClient(c.HTTPClient(), gs.Coordinators[0].URL)

	init, err := co.InitTransactionalProducer(ctx, connect.NewRequest(&coordinatorv1.InitTransactionalProducerRequest{
		TransactionalId: "tx", TransactionTimeoutMs: 60000, ProducerId: -1, ProducerEpoch: -1}))
	if err != nil {
		t.Fatalf("InitTransactionalProducer: %s", describeErr(err))
	}
	pid, epoch := init.Msg.GetProducerId(), init.Msg.GetProducerEpoch()
	for i, commit := range []bool{true, false} {
		p := int32(i)
		if _, err := co.AddPartitionsToTxn(ctx, connect.NewRequest(&coordinatorv1.AddPartitionsToTxnRequest{TransactionalId: "tx", ProducerId: pid, ProducerEpoch: epoch,
			Partitions: []*commonv1.TopicPartitions{{Topic: "txn", Partitions: []int32{p}}}})); err != nil {
			t.Fatalf("AddPartitionsToTxn: %s", describeErr(err))
		}
		produce := func(partition int32) error {
			b, err := recordbatch.Build(recordbatch.BuildOptions{Idempotent: true, Transactional: true, ProducerID: pid, ProducerEpoch: int16(epoch)},
				[]recordbatch.Record{{Value: []byte(fmt.Sprint("v", partition)), Timestamp: time.Now().UnixMilli()}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Storage(1).StorageClient().Produce(ctx, connect.NewRequest(&storagev1.ProduceRequest{Topic: "txn", Partition: partition,
				LeaderEpoch: -1, Records: b, TimeoutMs: 10_000, TransactionalId: "tx"}))
			return err
		}
		if p == 0 { // partition 1 is not in this transaction
			if err := produce(1); apierr.ReasonOf(err) != commonv1.Reason_REASON_INVALID_TXN_STATE {
				t.Fatalf("produce to a partition not added: %s; want INVALID_TXN_STATE", describeErr(err))
			}
		}
		if err := produce(p); err != nil {
			t.Fatalf("transactional produce to txn-%d: %s", p, describeErr(err))
		}
		if _, err := co.EndTxn(ctx, connect.NewRequest(&coordinatorv1.EndTxnRequest{TransactionalId: "tx", ProducerId: pid, ProducerEpoch: epoch, Commit: commit})); err != nil {
			t.Fatalf("EndTxn: %s", describeErr(err))
		}
		want := coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_ABORT
		if commit {
			want = coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT
		}
		testwait.Until(t, 30*time.Second, fmt.Sprintf("tx %s", want), func() error {
			resp, err := co.DescribeTransactions(ctx, connect.NewRequest(&coordinatorv1.DescribeTransactionsRequest{TransactionalIds: []string{"tx"}}))
			if err != nil {
				return err
			}
			if d := resp.Msg.GetTransactions()[0]; d.GetState() != want {
				return fmt.Errorf("%v", d)
			}
			return nil
		})

		resp, err := c.Storage(1).StorageClient().Fetch(ctx, connect.NewRequest(&storagev1.FetchRequest{
			Partitions: []*storagev1.FetchPartition{{Topic: "txn", Partition: p, CurrentLeaderEpoch: -1}}}))
		if err != nil {
			t.Fatalf("fetch txn-%d: %s", p, describeErr(err))
		}
		res := resp.Msg.GetPartitions()[0]
		first, err := recordbatch.PeekSize(res.GetRecords())
		if err != nil || res.GetHighWatermark() != 2 || len(res.GetRecords()) <= first {
			t.Fatalf("txn-%d: %v, high watermark %d; want the record and the marker", p, err, res.GetHighWatermark())
		}
		h, m, err := recordbatch.ParseMarker(res.GetRecords()[first:])
		if err != nil {
			t.Fatalf("txn-%d: %v; want the marker after the record", p, err)
		}
		if h.ProducerID != pid || int32(h.ProducerEpoch) != epoch || m.Commit() != commit || m.CoordinatorEpoch != 1 {
			t.Fatalf("txn-%d: marker of producer %d epoch %d, commit %v, coordinator epoch %d; want %d, %d, %v, 1",
				p, h.ProducerID, h.ProducerEpoch, m.Commit(), m.CoordinatorEpoch, pid, epoch, commit)
		}
	}

	// The operator's view through the gateway: strata txn list and
	// describe, as the admin in a secure cluster.
	var cr harness.Credentials
	if secure {
		cr = c.UserCert("admin")
	}
	strata := harness.Binary(t, harness.StrataPkg)
	r := runCLI(t, strata, gs.Gateway.URL, cr, "", "txn", "list")
	if r.code != 0 || !regexp.MustCompile(`(?m)^tx +`+fmt.Sprint(pid)+` +complete-abort *$`).MatchString(r.stdout) {
		t.Fatalf("strata txn list: exit %d, stdout %q, stderr %q; want tx %d complete-abort", r.code, r.stdout, r.stderr, pid)
	}
	r = runCLI(t, strata, gs.Gateway.URL, cr, "", "txn", "describe", "tx", "--output", "json")
	var d struct {
		State      string `json:"state"`
		ProducerID string `json:"producer_id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); r.code != 0 || err != nil || d.State != "TRANSACTION_STATE_COMPLETE_ABORT" || d.ProducerID != fmt.Sprint(pid) {
		t.Fatalf("strata txn describe tx: exit %d, stdout %q, stderr %q (%v)", r.code, r.stdout, r.stderr, err)
	}
	r = runCLI(t, strata, gs.Gateway.URL, cr, "", "txn", "describe", "nope")
	if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, `"nope"`) {
		t.Fatalf("strata txn describe of an unknown id: exit %d, stderr %q; want 1 and one line naming it", r.code, r.stderr)
	}
}
