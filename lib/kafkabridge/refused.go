package kafkabridge

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/kafkawire"
)

// refusedAPIs are the transaction APIs: Strata has no transaction
// coordinator yet, so they are left out of ApiVersions and, when a client
// sends one anyway, answered UNSUPPORTED_VERSION in every error field
// rather than by closing the connection.
func refusedAPIs() []kafkawire.API {
	return []kafkawire.API{
		{Key: kmsg.AddPartitionsToTxn, MinVersion: 0, MaxVersion: 3, Hidden: true, Handle: handler(refuseAddPartitionsToTxn)},
		{Key: kmsg.AddOffsetsToTxn, MinVersion: 0, MaxVersion: 3, Hidden: true, Handle: refuseTopLevel},
		{Key: kmsg.EndTxn, MinVersion: 0, MaxVersion: 3, Hidden: true, Handle: refuseTopLevel},
		{Key: kmsg.TxnOffsetCommit, MinVersion: 0, MaxVersion: 3, Hidden: true, Handle: handler(refuseTxnOffsetCommit)},
	}
}

func refuseTopLevel(_ context.Context, r *kafkawire.Request) (kmsg.Response, error) {
	resp := r.Body.ResponseKind()
	kafkawire.SetErrorCode(resp, errUnsupportedVersion)
	return resp, nil
}

func refuseAddPartitionsToTxn(_ context.Context, _ int16, req *kmsg.AddPartitionsToTxnRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrAddPartitionsToTxnResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, errUnsupportedVersion
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func refuseTxnOffsetCommit(_ context.Context, _ int16, req *kmsg.TxnOffsetCommitRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrTxnOffsetCommitResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, errUnsupportedVersion
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
