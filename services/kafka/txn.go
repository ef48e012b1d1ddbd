package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
)

// Transactions on the Kafka listener (docs/design/transactions.md, step
// 3). Each transaction API is served by the coordinator instance that
// owns the request's transactional id (TxnOffsetCommit: its group), found
// through the gateway's FindCoordinator as groups are, and called in the
// connection's principal's name like every other call (authz.go). The
// listener offers the APIs in ApiVersions with Config.Transactions, which
// every Strata listener sets: the storage nodes take a transaction's
// batches once its coordinator confirmed the partition was added
// (KIP-890 part 1). Without it they stay hidden, and a transactional id
// is refused.

// fencedCode is code as a request of version v may carry it: Kafka's
// PRODUCER_FENCED (KIP-588) goes to clients from version newFrom on, and
// older clients are told INVALID_PRODUCER_EPOCH, which they know.
func fencedCode(code int16, v, newFrom int16) int16 {
	if code == kerr.ProducerFenced.Code && v < newFrom {
		return kerr.InvalidProducerEpoch.Code
	}
	return code
}
