package server

import (
	"context"

	"connectrpc.com/connect"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/guard"
)

// LocalStorage is the node's StorageService for its own Kafka listener,
// called in-process, as the gateway's listener calls the gateway: a
// loopback Connect call copied every fetched byte through protobuf and
// HTTP/2 framing on both sides before Kafka's encoding copied it again
// (a CPU profile of a Kafka consume put a quarter of the node's CPU in
// those copies). Each call keeps the context the listener gives it, which
// carries the Kafka connection's principal: the handlers check its ACLs
// and charge its quotas as for a Connect call. The listener's mark to
// forward that principal (guard.Forward) is taken off: what the handlers
// call in turn (the tiering service, for reads and deletes in the tier)
// they call as the node, as for a Connect call, since those services
// answer Strata's services only. The handler stamps offsets
// into a Produce's batches in place, as it does into a decoded request;
// the listener does not read them afterwards.
func (n *Node) LocalStorage() storagev1connect.StorageServiceClient {
	return localStorage{s: &service{n: n}}
}

type localStorage struct{ s *service }

// ctx is the context a handler runs with: the caller's, principal and
// all, without the mark to forward it.
func (localStorage) ctx(ctx context.Context) context.Context { return guard.AsSelf(ctx) }

func (l localStorage) Produce(ctx context.Context, req *connect.Request[storagev1.ProduceRequest]) (*connect.Response[storagev1.ProduceResponse], error) {
	return l.s.Produce(l.ctx(ctx), req)
}

func (l localStorage) ProducePartitions(ctx context.Context, req *connect.Request[storagev1.ProducePartitionsRequest]) (*connect.Response[storagev1.ProducePartitionsResponse], error) {
	return l.s.ProducePartitions(l.ctx(ctx), req)
}

func (l localStorage) Fetch(ctx context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
	return l.s.Fetch(l.ctx(ctx), req)
}

func (l localStorage) ListOffsets(ctx context.Context, req *connect.Request[storagev1.ListOffsetsRequest]) (*connect.Response[storagev1.ListOffsetsResponse], error) {
	return l.s.ListOffsets(l.ctx(ctx), req)
}

func (l localStorage) Replicate(ctx context.Context, req *connect.Request[storagev1.ReplicateRequest]) (*connect.Response[storagev1.ReplicateResponse], error) {
	return l.s.Replicate(l.ctx(ctx), req)
}

func (l localStorage) OffsetForLeaderEpoch(ctx context.Context, req *connect.Request[storagev1.OffsetForLeaderEpochRequest]) (*connect.Response[storagev1.OffsetForLeaderEpochResponse], error) {
	return l.s.OffsetForLeaderEpoch(l.ctx(ctx), req)
}

func (l localStorage) DescribeLog(ctx context.Context, req *connect.Request[storagev1.DescribeLogRequest]) (*connect.Response[storagev1.DescribeLogResponse], error) {
	return l.s.DescribeLog(l.ctx(ctx), req)
}

func (l localStorage) DeleteRecords(ctx context.Context, req *connect.Request[storagev1.DeleteRecordsRequest]) (*connect.Response[storagev1.DeleteRecordsResponse], error) {
	return l.s.DeleteRecords(l.ctx(ctx), req)
}

func (l localStorage) DescribeProducers(ctx context.Context, req *connect.Request[storagev1.DescribeProducersRequest]) (*connect.Response[storagev1.DescribeProducersResponse], error) {
	return l.s.DescribeProducers(l.ctx(ctx), req)
}

func (l localStorage) WriteTxnMarkers(ctx context.Context, req *connect.Request[storagev1.WriteTxnMarkersRequest]) (*connect.Response[storagev1.WriteTxnMarkersResponse], error) {
	return l.s.WriteTxnMarkers(l.ctx(ctx), req)
}
