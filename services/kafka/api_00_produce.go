package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) produceAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.Produce, MinVersion: 3, MaxVersion: 11, Handle: handler(b.produce)}
}

// validAcks reports whether acks is one Kafka accepts: -1 (all), 0
// (none) or 1 (leader). Any other is answered INVALID_REQUIRED_ACKS on
// every partition, nothing appended (ReplicaManager.appendRecords).
func validAcks(acks int16) bool { return acks >= -1 && acks <= 1 }

// acksOf maps Kafka's acks to Strata's.
func acksOf(acks int16) commonv1.Acks {
	switch acks {
	case 0:
		return commonv1.Acks_ACKS_NONE
	case 1:
		return commonv1.Acks_ACKS_LEADER
	}
	return commonv1.Acks_ACKS_ALL
}

// produce appends each partition's batches through this node's
// StorageService. The batches are passed on as the bytes the client sent;
// the storage node checks them and assigns offsets (and answers a retried
// idempotent batch with its first offsets). A request naming one
// partition is one Produce; one naming several is one ProducePartitions
// carrying them all, each answered on its own as a Produce of its own
// would be. With acks=0 nothing is answered, unless a partition failed
// (answerProduce).
func (b *Bridge) produce(ctx context.Context, version int16, req *kmsg.ProduceRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrProduceResponse()
	var refuse int16
	switch {
	case b.cfg.Storage == nil:
		refuse = kerr.NotLeaderForPartition.Code // a listener without Storage leads nothing
	case req.TransactionID != nil && !b.cfg.Transactions:
		// Transactions are not offered on this listener (Config.Transactions).
		refuse = kerr.TransactionalIDAuthorizationFailed.Code
	case !validAcks(req.Acks):
		refuse = kerr.InvalidRequiredAcks.Code
	}
	if refuse != 0 {
		for _, t := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, refuse
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return answerProduce(req.Acks, resp)
	}
	// rounds[k] holds each partition's (k+1)th entry: a call names a
	// partition at most once, so a request naming one twice (no client
	// does) sends the repeat in a call of its own, alongside, as before.
	type entry struct {
		topic string
		p     *kmsg.ProduceRequestTopicPartition
		rp    *kmsg.ProduceResponseTopicPartition
	}
	type key struct {
		topic     string
		partition int32
	}
	var rounds [][]entry
	seen := make(map[key]int)
	for ti := range req.Topics {
		t := &req.Topics[ti]
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
		resp.Topics = append(resp.Topics, rt)
	}
	for ti := range req.Topics {
		t, rt := &req.Topics[ti], &resp.Topics[ti]
		for i := range t.Partitions {
			p, rp := &t.Partitions[i], &rt.Partitions[i]
			*rp = kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			k := seen[key{t.Topic, p.Partition}]
			seen[key{t.Topic, p.Partition}] = k + 1
			if k == len(rounds) {
				rounds = append(rounds, nil)
			}
			rounds[k] = append(rounds[k], entry{t.Topic, p, rp})
		}
	}
	// The storage node verifies a transactional batch's partition with
	// the coordinator of this id before it opens a transaction there
	// (KIP-890 part 1).
	txnID := ""
	if req.TransactionID != nil {
		txnID = *req.TransactionID
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	throttle := int32(0)
	fail := func(rp *kmsg.ProduceResponseTopicPartition, err error) {
		rp.ErrorCode, rp.ErrorMessage = kafkaCode(err, dataPlane), message(err)
		rp.BaseOffset, rp.LogStartOffset = -1, logStartOf(apierr.AsDetail(err))
	}
	call := func(es []entry) {
		if len(es) == 1 {
			e := es[0]
			out, err := b.cfg.Storage.Produce(ctx, connect.NewRequest(&storagev1.ProduceRequest{
				Topic: e.topic, Partition: e.p.Partition, Acks: acksOf(req.Acks),
				TimeoutMs: req.TimeoutMillis, LeaderEpoch: -1, Records: e.p.Records, TransactionalId: txnID,
			}))
			if err != nil {
				fail(e.rp, err)
				return
			}
			e.rp.BaseOffset = out.Msg.GetBaseOffset()
			e.rp.LogAppendTime = out.Msg.GetLogAppendTimeMs()
			e.rp.LogStartOffset = out.Msg.GetLogStartOffset()
			mu.Lock()
			throttle = max(throttle, out.Msg.GetThrottleTimeMs())
			mu.Unlock()
			return
		}
		sreq := &storagev1.ProducePartitionsRequest{
			Partitions: make([]*storagev1.ProducePartition, len(es)),
			Acks:       acksOf(req.Acks), TimeoutMs: req.TimeoutMillis, TransactionalId: txnID,
		}
		for i, e := range es {
			sreq.Partitions[i] = &storagev1.ProducePartition{Topic: e.topic, Partition: e.p.Partition, LeaderEpoch: -1, Records: e.p.Records}
		}
		out, err := b.cfg.Storage.ProducePartitions(ctx, connect.NewRequest(sreq))
		var results []*storagev1.ProducePartitionResult
		if err == nil {
			if results = out.Msg.GetPartitions(); len(results) != len(es) {
				err = connect.NewError(connect.CodeInternal, errors.New("produce answered a different number of partitions"))
			}
		}
		if err != nil {
			for _, e := range es {
				fail(e.rp, err)
			}
			return
		}
		for i, e := range es {
			r := results[i]
			if d := r.GetError(); d != nil {
				e.rp.ErrorCode, e.rp.BaseOffset, e.rp.LogStartOffset = detailCode(d, dataPlane, nil), -1, logStartOf(d)
				m := d.GetMessage()
				e.rp.ErrorMessage = &m
				continue
			}
			e.rp.BaseOffset, e.rp.LogAppendTime, e.rp.LogStartOffset = r.GetBaseOffset(), r.GetLogAppendTimeMs(), r.GetLogStartOffset()
		}
		mu.Lock()
		throttle = max(throttle, out.Msg.GetThrottleTimeMs())
		mu.Unlock()
	}
	for _, es := range rounds[min(1, len(rounds)):] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(es)
		}()
	}
	if len(rounds) > 0 {
		call(rounds[0])
	}
	wg.Wait()
	resp.ThrottleMillis = throttle
	return answerProduce(req.Acks, resp)
}

// answerProduce is the answer to a Produce: resp, or with acks=0 nothing
// when every partition succeeded and a closed connection when one failed.
// A producer with acks=0 reads no answer, so Kafka closes the connection
// on any partition error (KafkaApis.handleProduceRequest) to make it
// refresh its metadata and find the new leader; an answer it never reads
// would leave it sending to a stale leader until its metadata.max.age.ms.
func answerProduce(acks int16, resp *kmsg.ProduceResponse) (kmsg.Response, error) {
	if acks != 0 {
		return resp, nil
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				return nil, fmt.Errorf("kafka: closing the connection after an acks=0 produce failed on %s/%d with Kafka error %d",
					rt.Topic, rp.Partition, rp.ErrorCode)
			}
		}
	}
	return nil, nil
}

// logStartOf is the partition's log start offset an error carries (the
// storage node's offset range hint, which it gives with UNKNOWN_PRODUCER_ID
// as Kafka does), or -1 (Kafka's unknown) when it carries none.
func logStartOf(d *commonv1.ErrorDetail) int64 {
	if h := d.GetOffsetRange(); h != nil {
		return h.GetLogStartOffset()
	}
	return -1
}
