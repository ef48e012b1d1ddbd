package server

import (
	"context"

	"connectrpc.com/connect"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
)

// LocalStorage is the node's StorageService for its own Kafka listener,
// called in-process, as the gateway's listener calls the gateway: a
// loopback Connect call copied every fetched byte through protobuf and
// HTTP/2 framing on both sides before Kafka's encoding copied it again
// (a CPU profile of a Kafka consume put a quarter of the node's CPU in
// those copies). Each call keeps the context the listener gives it, which
// carries the Kafka connection's principal: the handlers check its ACLs
// and charge its quotas as for a Connect call. The handler stamps offsets
// into a Produce's batches in place, as it does into a decoded request;
// the listener does not read them afterwards.
func (n *Node) LocalStorage() storagev1connect.StorageServiceClient {
	return localStorage{s: &service{n: n}}
}

type localStorage struct{ s *service }

func (l localStorage) Produce(ctx context.Context, req *connect.Request[storagev1.ProduceRequest]) (*connect.Response[storagev1.ProduceResponse], error) {
	return l.s.Produce(ctx, req)
}

func (l localStorage) ProducePartitions(ctx context.Context, req *connect.Request[storagev1.ProducePartitionsRequest]) (*connect.Response[storagev1.ProducePartitionsResponse], error) {
	return l.s.ProducePartitions(ctx, req)
}

func (l localStorage) Fetch(ctx context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
	return l.s.Fetch(ctx, req)
}

func (l localStorage) ListOffsets(ctx context.Context, req *connect.Request[storagev1.ListOffsetsRequest]) (*connect.Response[storagev1.ListOffsetsResponse], error) {
	return l.s.ListOffsets(ctx, req)
}

func (l localStorage) Replicate(ctx context.Context, req *connect.Request[storagev1.ReplicateRequest]) (*connect.Response[storagev1.ReplicateResponse], error) {
	return l.s.Replicate(ctx, req)
}

func (l localStorage) OffsetForLeaderEpoch(ctx context.Context, req *connect.Request[storagev1.OffsetForLeaderEpochRequest]) (*connect.Response[storagev1.OffsetForLeaderEpochResponse], error) {
	return l.s.OffsetForLeaderEpoch(ctx, req)
}

func (l localStorage) DescribeLog(ctx context.Context, req *connect.Request[storagev1.DescribeLogRequest]) (*connect.Response[storagev1.DescribeLogResponse], error) {
	return l.s.DescribeLog(ctx, req)
}

func (l localStorage) DeleteRecords(ctx context.Context, req *connect.Request[storagev1.DeleteRecordsRequest]) (*connect.Response[storagev1.DeleteRecordsResponse], error) {
	return l.s.DeleteRecords(ctx, req)
}

func (l localStorage) DescribeProducers(ctx context.Context, req *connect.Request[storagev1.DescribeProducersRequest]) (*connect.Response[storagev1.DescribeProducersResponse], error) {
	return l.s.DescribeProducers(ctx, req)
}

func (l localStorage) WriteTxnMarkers(ctx context.Context, req *connect.Request[storagev1.WriteTxnMarkersRequest]) (*connect.Response[storagev1.WriteTxnMarkersResponse], error) {
	return l.s.WriteTxnMarkers(ctx, req)
}
