package kafka

import (
	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
)

// errNoStorage answers the data path on a listener that is not a storage
// node's: it leads no partition.
var errNoStorage error = apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER, "this listener leads no partition; ask the leader in Metadata")

// onStorage calls this node's StorageService with a request of n
// partitions and returns its results, one per partition in order, or the
// error to answer every partition with: errNoStorage on a listener that
// has no StorageService (the gateway's, the coordinator's), an answer
// with another number of results an internal error. With no partition
// nothing is called.
func onStorage[Resp, R any](b *Bridge, n int, call func(storagev1connect.StorageServiceClient) (*connect.Response[Resp], error), results func(*Resp) []R) ([]R, error) {
	if n == 0 {
		return nil, nil
	}
	if b.cfg.Storage == nil {
		return nil, errNoStorage
	}
	out, err := call(b.cfg.Storage)
	if err != nil {
		return nil, err
	}
	rs := results(out.Msg)
	if len(rs) != n {
		return nil, connect.NewError(connect.CodeInternal, nil)
	}
	return rs, nil
}
