package kafka

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
)

// abortingStorage answers every fetch with one batch and, under
// read_committed, an aborted transaction of producer 7 from offset 3 and
// its last stable offset 5 (10 under read_uncommitted).
type abortingStorage struct {
	storagev1connect.StorageServiceClient
	isolation commonv1.IsolationLevel
}

func (s *abortingStorage) Fetch(_ context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
	s.isolation = req.Msg.GetIsolationLevel()
	out := &storagev1.FetchResponse{}
	for _, p := range req.Msg.GetPartitions() {
		r := &storagev1.FetchPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), HighWatermark: 10, LastStableOffset: 10, Records: []byte("rec")}
		if s.isolation == commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
			r.LastStableOffset = 5
			r.AbortedTransactions = []*storagev1.AbortedTransaction{{ProducerId: 7, FirstOffset: 3}}
		}
		out.Partitions = append(out.Partitions, r)
	}
	return connect.NewResponse(out), nil
}

// TestFetchAnswersAbortedTransactions: a read_committed fetch asks the
// node for committed data and answers the last stable offset and the
// aborted transactions, an empty list when there are none; a
// read_uncommitted one answers them null, as Kafka does.
func TestFetchAnswersAbortedTransactions(t *testing.T) {
	st := &abortingStorage{}
	b, err := New(Config{Gateway: fakeGateway{}, Storage: st, HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(isolation int8) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.SessionEpoch, req.IsolationLevel = 11, -1, isolation
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "orders"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := b.fetch(context.Background(), 11, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	p := fetch(1)
	if st.isolation != commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED || p.LastStableOffset != 5 ||
		len(p.AbortedTransactions) != 1 || p.AbortedTransactions[0].ProducerID != 7 || p.AbortedTransactions[0].FirstOffset != 3 {
		t.Fatalf("read_committed: asked %v, answered lso %d, aborted %+v", st.isolation, p.LastStableOffset, p.AbortedTransactions)
	}
	p = fetch(0)
	if st.isolation != commonv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED || p.LastStableOffset != 10 || p.AbortedTransactions != nil {
		t.Fatalf("read_uncommitted: asked %v, answered lso %d, aborted %+v", st.isolation, p.LastStableOffset, p.AbortedTransactions)
	}
}
