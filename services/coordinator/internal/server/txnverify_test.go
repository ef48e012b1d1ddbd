package server

import (
	"testing"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
)

// VerifyTxnPartitions answers a partition as in the transaction only
// while the transaction is Ongoing with it added, at the producer's id
// and epoch (KIP-890 part 1), and changes nothing.
func TestVerifyTxnPartitions(t *testing.T) {
	forEachTxnStore(t, func(t *testing.T, _ *txnRig, _ offsetstore.Store, c *Coordinator) {
		verify := func(id string, pid int64, epoch int32, parts ...int32) []commonv1.Reason {
			t.Helper()
			resp, err := c.VerifyTxnPartitions(bg(), connect.NewRequest(&coordinatorv1.VerifyTxnPartitionsRequest{
				TransactionalId: id, ProducerId: pid, ProducerEpoch: epoch,
				Partitions: []*commonv1.TopicPartitions{{Topic: "orders", Partitions: parts}}}))
			if err != nil {
				t.Fatalf("VerifyTxnPartitions: %v", err)
			}
			var out []commonv1.Reason
			for _, p := range resp.Msg.GetPartitions() {
				out = append(out, p.GetError().GetReason())
			}
			return out
		}
		want := func(what string, got []commonv1.Reason, want ...commonv1.Reason) {
			t.Helper()
			for i := range want {
				if i >= len(got) || got[i] != want[i] {
					t.Errorf("%s: %v, want %v", what, got, want)
					return
				}
			}
		}
		const (
			ok       = commonv1.Reason_REASON_UNSPECIFIED
			notInTxn = commonv1.Reason_REASON_INVALID_TXN_STATE
			mapping  = commonv1.Reason_REASON_INVALID_PRODUCER_ID_MAPPING
			fenced   = commonv1.Reason_REASON_PRODUCER_FENCED
		)
		want("unknown id", verify("nobody", 5, 0, 0), mapping)
		pid, epoch := initProducer(t, c, "v")
		want("no transaction begun", verify("v", pid, epoch, 0), notInTxn)
		if _, err := addPartitions(c, "v", pid, epoch, "orders", 0, 2); err != nil {
			t.Fatal(err)
		}
		want("ongoing", verify("v", pid, epoch, 0, 1, 2), ok, notInTxn, ok)
		want("another producer id", verify("v", pid+1, epoch, 0), mapping)
		want("another epoch", verify("v", pid, epoch+1, 0), fenced)
		if d := describeTxn(t, c, "v"); d.GetState() != coordinatorv1.TransactionState_TRANSACTION_STATE_ONGOING || len(d.GetPartitions()[0].GetPartitions()) != 2 {
			t.Fatalf("verification changed the transaction: %v", d)
		}
		if err := endTxn(c, "v", pid, epoch, true); err != nil {
			t.Fatal(err)
		}
		want("after the decision", verify("v", pid, epoch, 0), notInTxn)
		waitState(t, c, "v", coordinatorv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT)
		want("complete", verify("v", pid, epoch, 0, 2), notInTxn, notInTxn)
	})
}
