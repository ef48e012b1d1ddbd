package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/quota"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// Server-side defaults from the proto.
const (
	defaultProduceTimeout    = 30 * time.Second
	defaultFetchMaxBytes     = 50 << 20
	defaultPartitionMaxBytes = 1 << 20
	defaultReplicateMaxBytes = 10 << 20
	maxLongPoll              = 30 * time.Second
)

// service implements storagev1connect.StorageServiceHandler.
type service struct {
	n *Node

	replOnce sync.Once
	repl     *replSessions // the leader's fetch sessions (replicate.go); use sessions()
}

// detail maps an internal error to the API's ErrorDetail for a partition.
func (s *service) detail(topic string, partition int32, r *replica.Replica, err error) *commonv1.ErrorDetail {
	d := &commonv1.ErrorDetail{Code: commonv1.Code_CODE_INTERNAL, Message: "internal error"}
	leaderHint := func() {
		v := s.n.currentView()
		hint := &commonv1.LeaderHint{TopicPartition: &commonv1.TopicPartition{Topic: topic, Partition: partition}, LeaderId: -1, LeaderEpoch: -1}
		if r != nil {
			st := r.View().State
			hint.LeaderId, hint.LeaderEpoch = st.LeaderID, st.LeaderEpoch
			hint.LeaderAddress = v.RegisteredAddress(st.LeaderID)
		}
		d.Hint = &commonv1.ErrorDetail_Leader{Leader: hint}
	}
	set := func(code commonv1.Code, reason commonv1.Reason) {
		d.Code, d.Reason, d.Message = code, reason, err.Error()
	}
	var oor *partlog.OffsetOutOfRangeError
	var tre *tieredRangeError
	var tue *tierUnavailableError
	var tte *tierTxnError
	switch {
	case r == nil:
		d.Code, d.Reason, d.Message = commonv1.Code_CODE_NOT_FOUND, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "unknown topic or partition on this node"
	case errors.Is(err, replica.ErrNotLeader), errors.Is(err, replica.ErrClosed), errors.Is(err, errNodeFenced):
		set(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_NOT_LEADER)
		leaderHint()
	case errors.Is(err, partlog.ErrFailed):
		// The log met an I/O error (the process is stopping): clients
		// look for the next leader.
		set(commonv1.Code_CODE_UNAVAILABLE, commonv1.Reason_REASON_NOT_LEADER)
		leaderHint()
	case errors.Is(err, replica.ErrLeadershipLost):
		set(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_NOT_LEADER)
		leaderHint()
	case errors.Is(err, replica.ErrFencedLeaderEpoch):
		set(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_FENCED_LEADER_EPOCH)
		leaderHint()
	case errors.Is(err, replica.ErrUnknownLeaderEpoch):
		set(commonv1.Code_CODE_UNAVAILABLE, commonv1.Reason_REASON_UNKNOWN_LEADER_EPOCH)
		leaderHint()
	case errors.Is(err, replica.ErrNotEnoughReplicas), errors.Is(err, replica.ErrNotEnoughReplicasAfterAppend):
		reason := commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS
		if errors.Is(err, replica.ErrNotEnoughReplicasAfterAppend) {
			reason = commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS_AFTER_APPEND
		}
		set(commonv1.Code_CODE_UNAVAILABLE, reason)
		v := r.View()
		d.Hint = &commonv1.ErrorDetail_NotEnoughReplicas{NotEnoughReplicas: &commonv1.NotEnoughReplicasHint{
			IsrSize: int32(len(v.State.ISR)), MinInsyncReplicas: int32(v.MinISR)}}
	case errors.Is(err, replica.ErrTimedOut), errors.Is(err, context.DeadlineExceeded):
		set(commonv1.Code_CODE_DEADLINE_EXCEEDED, commonv1.Reason_REASON_REQUEST_TIMED_OUT)
	case errors.Is(err, replica.ErrIneligibleReplica):
		set(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INELIGIBLE_REPLICA)
	case errors.Is(err, replica.ErrStaleNodeEpoch):
		set(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_STALE_NODE_EPOCH)
	case errors.Is(err, replica.ErrOutOfOrderSequence):
		set(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_OUT_OF_ORDER_SEQUENCE)
	case errors.Is(err, replica.ErrUnknownProducer):
		set(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_UNKNOWN_PRODUCER_ID)
		// With the partition's log start offset, as Kafka's refusal
		// carries it (ReplicaManager.appendToLocalLog): a Java producer
		// compares it with its last acknowledged offset to tell a producer
		// state removed by retention (it resets its sequence) from one it
		// must wait for, and retries forever without it.
		d.Hint = &commonv1.ErrorDetail_OffsetRange{OffsetRange: &commonv1.OffsetRangeHint{
			LogStartOffset: s.n.effectiveLogStart(r, r.Log().LogStartOffset()), HighWatermark: r.Log().HighWatermark()}}
	case errors.Is(err, replica.ErrInvalidProducerEpoch), errors.Is(err, partlog.ErrInvalidProducerEpoch):
		// The second: a marker of an older producer epoch than the
		// partition's (Kafka's INVALID_PRODUCER_EPOCH for markers).
		set(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_INVALID_PRODUCER_EPOCH)
	case errors.Is(err, partlog.ErrCoordinatorFenced):
		set(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_TRANSACTION_COORDINATOR_FENCED)
	case errors.Is(err, replica.ErrInvalidTxnState):
		set(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INVALID_TXN_STATE)
	case errors.Is(err, replica.ErrInvalidProducerIDMapping):
		set(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_INVALID_PRODUCER_ID_MAPPING)
	case errors.Is(err, replica.ErrTxnNotVerified):
		// Kafka's ReplicaManager answers NOT_ENOUGH_REPLICAS when the
		// verification fails retriably (coordinator unavailable, not the
		// coordinator, concurrent transactions): every producer retries
		// it, and it does not send them to refresh their metadata.
		set(commonv1.Code_CODE_UNAVAILABLE, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS)
	case errors.Is(err, replica.ErrDuplicateInRequest):
		set(commonv1.Code_CODE_INVALID_ARGUMENT, commonv1.Reason_REASON_DUPLICATE_SEQUENCE)
	case errors.Is(err, partlog.ErrBatchTooLarge), errors.Is(err, recordbatch.ErrTooLarge):
		set(commonv1.Code_CODE_RESOURCE_EXHAUSTED, commonv1.Reason_REASON_RECORD_TOO_LARGE)
	case errors.Is(err, recordbatch.ErrKeyRequired):
		// Kafka's INVALID_RECORD, with a line that says what to change.
		set(commonv1.Code_CODE_INVALID_ARGUMENT, commonv1.Reason_REASON_INVALID_RECORD)
		d.Message = fmt.Sprintf("topic %s is compacted (cleanup.policy includes compact): every record needs a key (%v)", topic, err)
	case errors.Is(err, recordbatch.ErrInvalidTimestamp):
		set(commonv1.Code_CODE_INVALID_ARGUMENT, commonv1.Reason_REASON_INVALID_TIMESTAMP)
	case errors.Is(err, partlog.ErrInvalidBatch):
		set(commonv1.Code_CODE_INVALID_ARGUMENT, invalidBatchReason(err))
	case errors.As(err, &tre): // tiering.go
		set(commonv1.Code_CODE_OUT_OF_RANGE, commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE)
		d.Hint = &commonv1.ErrorDetail_OffsetRange{OffsetRange: &commonv1.OffsetRangeHint{
			LogStartOffset: tre.logStart, HighWatermark: r.Log().HighWatermark()}}
	case errors.As(err, &tte): // tiering.go
		set(commonv1.Code_CODE_FAILED_PRECONDITION, commonv1.Reason_REASON_UNSPECIFIED)
	case errors.As(err, &tue): // tiering.go
		set(commonv1.Code_CODE_UNAVAILABLE, commonv1.Reason_REASON_UNSPECIFIED)
		if c := tue.detail.GetCode(); c == commonv1.Code_CODE_DATA_LOSS {
			d.Code = c
		}
	case errors.As(err, &oor):
		set(commonv1.Code_CODE_OUT_OF_RANGE, commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE)
		d.Hint = &commonv1.ErrorDetail_OffsetRange{OffsetRange: &commonv1.OffsetRangeHint{
			LogStartOffset: s.n.effectiveLogStart(r, r.Log().LogStartOffset()), HighWatermark: r.Log().HighWatermark()}}
	case errors.Is(err, context.Canceled):
		set(commonv1.Code_CODE_CANCELED, commonv1.Reason_REASON_UNSPECIFIED)
	default:
		s.n.logger.Error("storage request failed", "topic", topic, "partition", partition, "err", err)
	}
	return d
}

var errNodeFenced = errors.New("server: this node is fenced by the controller")

// invalidBatchReason tells a damaged batch from one that breaks a rule,
// as Kafka's answers do: bytes whose CRC or framing is wrong are
// CORRUPT_RECORD (UnifiedLog.analyzeAndValidateRecords throws
// CorruptRecordException on a failed checksum or an illegal length), and
// a batch whose bytes are intact but whose records do not add up (a count
// or offset deltas that disagree, an undecodable record, a producer rule
// broken) is INVALID_RECORD (DefaultRecord.readFrom and LogValidator throw
// InvalidRecordException), which Kafka clients report as such.
func invalidBatchReason(err error) commonv1.Reason {
	if errors.Is(err, recordbatch.ErrCRC) || errors.Is(err, recordbatch.ErrShortBatch) || errors.Is(err, recordbatch.ErrBadLength) {
		return commonv1.Reason_REASON_CORRUPT_RECORD
	}
	return commonv1.Reason_REASON_INVALID_RECORD
}

func (s *service) Produce(ctx context.Context, req *connect.Request[storagev1.ProduceRequest]) (*connect.Response[storagev1.ProduceResponse], error) {
	m := req.Msg
	if err := s.n.cfg.Guard.Authorize(ctx, acl.Write, acl.Topic, m.GetTopic()); err != nil {
		return nil, err
	}
	if err := s.authorizeTxnID(ctx, m.GetTransactionalId()); err != nil {
		return nil, err
	}
	quotaRes, err := s.reserve(ctx, quota.Produce, len(m.GetRecords())) // security.go
	if err != nil {
		return nil, err
	}
	acks, timeout := produceAcks(m.GetAcks(), m.GetTimeoutMs())
	res, d := s.produceOne(ctx, m.GetTopic(), m.GetPartition(), m.GetLeaderEpoch(), m.GetRecords(), acks, timeout, m.GetTransactionalId())
	if d != nil {
		s.settle(quotaRes, 0)
		return nil, apierr.Error(d)
	}
	countProduced(m.GetTopic(), res, len(m.GetRecords())) // telemetry.go
	out := &storagev1.ProduceResponse{BaseOffset: res.BaseOffset, LogAppendTimeMs: res.LogAppendTime, LogStartOffset: res.LogStart, Duplicate: res.Duplicate,
		ThrottleTimeMs: s.settle(quotaRes, len(m.GetRecords()))}
	if acks == replica.AcksNone {
		out.BaseOffset = -1
	}
	return connect.NewResponse(out), nil
}

// produceAcks reads a produce's acks and acks=all timeout.
func produceAcks(a commonv1.Acks, timeoutMs int32) (replica.Acks, time.Duration) {
	acks := replica.AcksAll
	switch a {
	case commonv1.Acks_ACKS_LEADER:
		acks = replica.AcksLeader
	case commonv1.Acks_ACKS_NONE:
		acks = replica.AcksNone
	}
	timeout := defaultProduceTimeout
	if timeoutMs > 0 {
		timeout = time.Duration(timeoutMs) * time.Millisecond
	}
	return acks, timeout
}

// produceOne appends one partition's batches and waits for acks: the
// whole of a single-partition Produce once authorized, and each partition
// of a ProducePartitions. txnID is the producer's transactional id, ""
// for none; transactional batches need it (txnverify.go).
func (s *service) produceOne(ctx context.Context, topic string, partition, epoch int32, records []byte, acks replica.Acks, timeout time.Duration,
	txnID string) (replica.ProduceResult, *commonv1.ErrorDetail) {
	r, d := s.produceTarget(topic, partition, records)
	if d != nil {
		return replica.ProduceResult{}, d
	}
	res, err := r.ProduceTxn(ctx, records, acks, epoch, timeout, s.n.txnVerifier(txnID, topic, partition)) // txnverify.go
	if err != nil {
		return replica.ProduceResult{}, s.produceFailed(topic, partition, r, err)
	}
	return res, nil
}

// produceTarget returns the replica a produce of records to a partition
// appends to, or why there is none.
func (s *service) produceTarget(topic string, partition int32, records []byte) (*replica.Replica, *commonv1.ErrorDetail) {
	r := s.n.replica(topic, partition)
	if r == nil {
		return nil, s.detail(topic, partition, nil, nil)
	}
	if s.n.meta.Fenced() {
		return nil, s.detail(topic, partition, r, errNodeFenced)
	}
	if len(records) < recordbatch.HeaderSize {
		return nil, s.detail(topic, partition, r, partlog.ErrInvalidBatch)
	}
	return r, nil
}

// produceFailed is the answer to a produce that failed with err.
func (s *service) produceFailed(topic string, partition int32, r *replica.Replica, err error) *commonv1.ErrorDetail {
	if replica.IsHoldFull(err) {
		countHoldRefused(topic) // telemetry.go
	}
	return s.detail(topic, partition, r, err)
}

// ProducePartitions serves several partitions in one call: each is
// authorized, appended and acknowledged on its own, as if it had come in
// a Produce of its own, all at once, so the slowest acks=all partition
// sets when the call answers and one partition's failure is its answer
// only. The per-call work (quota hold, throttle, counters) is done once.
func (s *service) ProducePartitions(ctx context.Context, req *connect.Request[storagev1.ProducePartitionsRequest]) (*connect.Response[storagev1.ProducePartitionsResponse], error) {
	m := req.Msg
	parts := m.GetPartitions()
	if len(parts) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("produce: no partitions"))
	}
	type key struct {
		topic     string
		partition int32
	}
	seen := make(map[key]struct{}, len(parts))
	for _, p := range parts {
		k := key{p.GetTopic(), p.GetPartition()}
		if _, dup := seen[k]; dup {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("produce: partition %s/%d appears twice", k.topic, k.partition))
		}
		seen[k] = struct{}{}
	}
	if err := s.authorizeTxnID(ctx, m.GetTransactionalId()); err != nil {
		return nil, err
	}
	access := s.topicAccess(ctx, acl.Write) // security.go
	want := 0
	for _, p := range parts {
		if access.check(p.GetTopic()) == nil {
			want += len(p.GetRecords())
		}
	}
	quotaRes, err := s.reserve(ctx, quota.Produce, want)
	if err != nil {
		return nil, err
	}
	acks, timeout := produceAcks(m.GetAcks(), m.GetTimeoutMs())
	out := &storagev1.ProducePartitionsResponse{Partitions: make([]*storagev1.ProducePartitionResult, len(parts))}
	results := make([]replica.ProduceResult, len(parts))
	for i, p := range parts {
		out.Partitions[i] = &storagev1.ProducePartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), BaseOffset: -1, LogAppendTimeMs: -1,
			Error: access.check(p.GetTopic())}
	}
	answer := func(i int, res replica.ProduceResult, d *commonv1.ErrorDetail) {
		pr := out.Partitions[i]
		if d != nil {
			pr.Error = d
			return
		}
		results[i] = res
		pr.BaseOffset, pr.LogStartOffset, pr.Duplicate, pr.LogAppendTimeMs = res.BaseOffset, res.LogStart, res.Duplicate, res.LogAppendTime
		if acks == replica.AcksNone {
			pr.BaseOffset = -1
		}
	}
	one := func(i int) {
		p := parts[i]
		if out.Partitions[i].Error != nil {
			return
		}
		res, d := s.produceOne(ctx, p.GetTopic(), p.GetPartition(), p.GetLeaderEpoch(), p.GetRecords(), acks, timeout, m.GetTransactionalId())
		answer(i, res, d)
	}
	var wg sync.WaitGroup
	if m.GetTransactionalId() == "" {
		// Appended in turn, then waited for, as Kafka's
		// ReplicaManager.appendRecords appends a request's partitions
		// in its handler thread: the appends take microseconds, and a
		// goroutine per partition (its start, its stack's growth down
		// the append path) cost more than they did over hundreds of
		// partitions a call. A transactional request verifies its
		// partitions with the coordinator, and a batch ahead of its
		// sequence is held: those go on their own, as before.
		deadline := time.Now().Add(timeout)
		appended := make([]*replica.Appended, len(parts))
		for i, p := range parts {
			if out.Partitions[i].Error != nil {
				continue
			}
			r, d := s.produceTarget(p.GetTopic(), p.GetPartition(), p.GetRecords())
			if d != nil {
				answer(i, replica.ProduceResult{}, d)
				continue
			}
			a, err := r.ProduceAppend(ctx, p.GetRecords(), acks, p.GetLeaderEpoch(), nil)
			switch {
			case replica.IsAhead(err):
				wg.Go(func() { one(i) })
			case err != nil:
				answer(i, replica.ProduceResult{}, s.produceFailed(p.GetTopic(), p.GetPartition(), r, err))
			default:
				appended[i] = a
			}
		}
		for i, a := range appended {
			if a == nil {
				continue
			}
			p := parts[i]
			res, err := a.Wait(ctx, time.Until(deadline))
			if err != nil {
				answer(i, replica.ProduceResult{}, s.produceFailed(p.GetTopic(), p.GetPartition(), a.Replica(), err))
				continue
			}
			answer(i, res, nil)
		}
	} else {
		for i := 1; i < len(parts); i++ {
			wg.Go(func() { one(i) })
		}
		one(0)
	}
	wg.Wait()

	// The counters are added once per topic of the call, not per
	// partition; a producer's call usually names one topic.
	bytes := 0
	var counted produceCounts
	for i, p := range parts {
		if out.Partitions[i].Error != nil {
			continue
		}
		bytes += len(p.GetRecords())
		counted.add(p.GetTopic(), results[i], len(p.GetRecords()))
	}
	counted.flush() // telemetry.go
	out.ThrottleTimeMs = s.settle(quotaRes, bytes)
	return connect.NewResponse(out), nil
}

func (s *service) Fetch(ctx context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
	m := req.Msg
	if len(m.GetPartitions()) == 0 || m.GetMaxWaitMs() < 0 || m.GetMinBytes() < 0 || m.GetMaxBytes() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("fetch needs partitions and non-negative limits"))
	}
	// Partitions of topics the principal may not read are answered with
	// PERMISSION_DENIED and the others served (security.go). A refusal
	// does not cut the long poll short, as Kafka's does not: waiting
	// again would not change it.
	access := s.topicAccess(ctx, acl.Read)
	refused := make([]*commonv1.ErrorDetail, len(m.GetPartitions()))
	for i, p := range m.GetPartitions() {
		refused[i] = access.check(p.GetTopic())
	}
	maxBytes := int(m.GetMaxBytes())
	if maxBytes == 0 {
		maxBytes = defaultFetchMaxBytes
	}
	quotaRes, err := s.reserve(ctx, quota.Fetch, int(s.n.cfg.Guard.FetchEstimate(ctx, int64(maxBytes))))
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(min(time.Duration(m.GetMaxWaitMs())*time.Millisecond, maxLongPoll))
	// Read buffers, taken from the pool when a partition first has
	// something to read and reused by later rounds of the long poll (a
	// round that does not answer drops its results).
	bufs := make([][]byte, len(m.GetPartitions()))
	// read_committed reads below the last stable offset. A long poll
	// parked there wakes on Changed as any other: the LSO moves only with
	// the high watermark or the log start (replica.ReadCommittedInto).
	committed := m.GetIsolationLevel() == commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	// One channel for the call, signalled by a change of any replica it
	// reads (changefeed.go).
	w := newWaiter(&s.sessions().feed)
	defer w.close()
	for {
		for i, p := range m.GetPartitions() {
			if refused[i] != nil {
				continue
			}
			if r := s.n.replica(p.GetTopic(), p.GetPartition()); r != nil {
				w.watch(r) // before the read, so no change after it is missed
			}
		}
		out := &storagev1.FetchResponse{}
		total, failed := 0, false
		for i, p := range m.GetPartitions() {
			if refused[i] != nil {
				out.Partitions = append(out.Partitions, &storagev1.FetchPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(),
					HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1, Error: refused[i]})
				continue
			}
			res := s.fetchOne(ctx, p, committed, maxBytes-total, total == 0, &bufs[i])
			total += len(res.Records)
			failed = failed || res.Error != nil || res.DivergingEpoch != nil // answered at once, as Kafka's
			out.Partitions = append(out.Partitions, res)
		}
		if total >= int(m.GetMinBytes()) || failed || !time.Now().Before(deadline) || !w.watched() ||
			!s.park(ctx, w.wake, deadline) {
			out.ThrottleTimeMs = s.settle(quotaRes, total)
			return connect.NewResponse(out), nil
		}
	}
}

// fetchOne reads one partition of a Fetch, at most budget bytes and the
// partition's own limit. Only while minOne (no partition before it in the
// answer has records) may its first batch exceed them, as KIP-74 has it
// (Kafka's ReplicaManager.readFromLog stops ignoring the request and
// partition limits once a partition returned records): otherwise a batch
// larger than what is left is not read, so an answer over many lagging
// partitions stays near the request's limit instead of a batch per
// partition, which clients refuse as larger than they asked for. *buf is
// its read buffer: nil until the partition has records to read, then a
// pooled one (readbuf.go). committed reads as read_committed: below the
// last stable offset, with the aborted transactions of what it returns,
// as Kafka's UnifiedLog.read with FetchIsolation.TXN_COMMITTED.
func (s *service) fetchOne(ctx context.Context, p *storagev1.FetchPartition, committed bool, budget int, minOne bool, buf *[]byte) *storagev1.FetchPartitionResult {
	res := &storagev1.FetchPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1}
	r := s.n.replica(p.GetTopic(), p.GetPartition())
	if r == nil {
		res.Error = s.detail(p.GetTopic(), p.GetPartition(), nil, nil)
		return res
	}
	limit := int(p.GetMaxBytes())
	if limit == 0 {
		limit = defaultPartitionMaxBytes
	}
	limit = max(min(limit, budget), 1)
	if d, err := diverging(r, p); err != nil || d != nil {
		if err != nil {
			res.Error = s.detail(p.GetTopic(), p.GetPartition(), r, err)
			return res
		}
		l := r.Log()
		res.HighWatermark, res.LastStableOffset, res.LogStartOffset, res.DivergingEpoch = l.HighWatermark(), l.LastStableOffset(), s.n.effectiveLogStart(r, l.LogStartOffset()), d
		return res
	}
	readable, read := r.Log().HighWatermark(), r.ReadInto
	if committed {
		readable, read = r.Log().LastStableOffset(), r.ReadCommittedInto
	}
	if *buf == nil && p.GetFetchOffset() < readable {
		*buf = readBuf(ctx, limit)
	}
	rr, err := read(*buf, p.GetCurrentLeaderEpoch(), p.GetFetchOffset(), limit, minOne)
	if tr, terr, ok := s.n.tracedReadTiered(r, p.GetFetchOffset(), limit, committed, err); ok { // below the local log start: read the tier (tiering.go)
		rr, err = tr, terr
	}
	if err != nil {
		res.Error = s.detail(p.GetTopic(), p.GetPartition(), r, err)
		return res
	}
	if !minOne && len(rr.Batches) > limit {
		rr.Batches = nil // the tier's first batch alone is over the limit (the local read left it unread)
	}
	countFetched(p.GetTopic(), rr.Batches) // telemetry.go
	res.HighWatermark, res.LastStableOffset, res.LogStartOffset, res.Records = rr.HighWatermark, rr.LastStableOffset, s.n.effectiveLogStart(r, rr.LogStartOffset), rr.Batches
	if len(rr.Batches) > 0 {
		for _, t := range rr.AbortedTxns {
			res.AbortedTransactions = append(res.AbortedTransactions, &storagev1.AbortedTransaction{ProducerId: t.ProducerID, FirstOffset: t.FirstOffset})
		}
	}
	return res
}

// led returns the replica of a partition the request may touch (access;
// nil skips the check) and this node leads at epoch (-1 skips the epoch
// check), or the detail to answer the partition with instead.
func (s *service) led(access *topicAccess, topic string, partition, epoch int32) (*replica.Replica, *commonv1.ErrorDetail) {
	if access != nil {
		if d := access.check(topic); d != nil {
			return nil, d
		}
	}
	r := s.n.replica(topic, partition)
	if r == nil {
		return nil, s.detail(topic, partition, nil, nil)
	}
	if err := r.CheckLeader(epoch); err != nil {
		return nil, s.detail(topic, partition, r, err)
	}
	return r, nil
}

// diverging checks a consumer's fetch that carries its last fetched epoch
// against our epoch history, as Kafka's Partition.readRecords does: the
// largest epoch of ours not above it must be that epoch, ending at or
// after the fetch offset; otherwise the consumer's log diverged from ours
// (an unclean election truncated what it read) and it is told where
// (nil when it did not, or sent no epoch). An epoch newer than our
// history, or a fetch offset below our log start, is out of range, as
// Kafka's. Offsets served from the tier (below the local log start) are
// not checked: our local history starts there.
func diverging(r *replica.Replica, p *storagev1.FetchPartition) (*storagev1.DivergingEpoch, error) {
	if p.LastFetchedEpoch == nil || p.GetLastFetchedEpoch() < 0 {
		return nil, nil
	}
	if err := r.CheckLeader(p.GetCurrentLeaderEpoch()); err != nil {
		return nil, err
	}
	l := r.Log()
	off, start := p.GetFetchOffset(), l.LogStartOffset()
	if off < start {
		return nil, nil // the tier's, or out of range: the read answers
	}
	e, end := l.EndOffsetForEpoch(p.GetLastFetchedEpoch())
	if e == partlog.UndefinedEpoch || end == partlog.UndefinedOffset {
		return nil, &partlog.OffsetOutOfRangeError{Offset: off, LogStart: start, LogEnd: l.HighWatermark()}
	}
	if e < p.GetLastFetchedEpoch() || end < off {
		return &storagev1.DivergingEpoch{Epoch: e, EndOffset: end}, nil
	}
	return nil, nil
}

func (s *service) ListOffsets(ctx context.Context, req *connect.Request[storagev1.ListOffsetsRequest]) (*connect.Response[storagev1.ListOffsetsResponse], error) {
	out := &storagev1.ListOffsetsResponse{}
	for _, p := range req.Msg.GetPartitions() {
		if p.GetSpec() == storagev1.OffsetSpec_OFFSET_SPEC_UNSPECIFIED {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("offset spec is unset"))
		}
	}
	access := s.topicAccess(ctx, acl.Describe) // security.go
	committed := req.Msg.GetIsolationLevel() == commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	for _, p := range req.Msg.GetPartitions() {
		res := &storagev1.ListOffsetsPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: -1, TimestampMs: -1, LeaderEpoch: -1}
		out.Partitions = append(out.Partitions, res)
		r, d := s.led(access, p.GetTopic(), p.GetPartition(), p.GetCurrentLeaderEpoch())
		if res.Error = d; d != nil {
			continue
		}
		l := r.Log()
		// The latest offset the request's isolation level reads to, as
		// Kafka's Partition.fetchOffsetForTimestamp: the high watermark,
		// or the last stable offset for read_committed. No offset at or
		// above it is answered.
		latest := l.HighWatermark()
		if committed {
			latest = l.LastStableOffset()
		}
		switch p.GetSpec() {
		case storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST:
			res.Offset = s.n.effectiveLogStart(r, l.LogStartOffset()) // tier included (tiering.go)
			// With the leader epoch of the first batch, as Kafka answers the
			// epoch of its leader epoch cache's earliest entry
			// (UnifiedLog.fetchOffsetByTimestamp); -1 when the log start is
			// in the tier or the log is empty.
			if start := l.LogStartOffset(); res.Offset == start {
				if rr, err := l.Read(start, 1, l.LogEndOffset()); err == nil && len(rr.Batches) > 0 {
					if h, err := recordbatch.PeekHeader(rr.Batches); err == nil {
						res.LeaderEpoch = h.PartitionLeaderEpoch
					}
				}
			}
		case storagev1.OffsetSpec_OFFSET_SPEC_LATEST:
			// With the current leader epoch, as Kafka's
			// Partition.fetchOffsetForTimestamp answers "latest".
			res.Offset, res.LeaderEpoch = latest, r.View().State.LeaderEpoch
		case storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
			res.Offset = latest
			ts := p.GetTimestampMs()
			// Below the local log start the tier answers (tiering.go).
			if tt, ok, err := s.n.tieredOffsetForTimestamp(r, ts); err != nil {
				res.Error = s.detail(p.GetTopic(), p.GetPartition(), r, err)
				continue
			} else if ok && tt.offset < latest {
				res.Offset, res.TimestampMs, res.LeaderEpoch = tt.offset, tt.maxTS, tt.epoch
				oor := &partlog.OffsetOutOfRangeError{Offset: tt.offset, LogStart: l.LogStartOffset(), LogEnd: l.LogEndOffset()}
				if rr, err, handled := s.n.readTiered(r, tt.offset, 1, false, oor); handled && err == nil {
					if at, ok := firstRecordAtOrAfter(rr.Batches, tt.offset, ts); ok && at.offset < latest {
						res.Offset, res.TimestampMs = at.offset, at.timestamp
					}
				}
				continue
			}
			off, found, err := l.OffsetForTimestamp(ts)
			if err != nil {
				res.Error = s.detail(p.GetTopic(), p.GetPartition(), r, err)
				continue
			}
			if found && off < latest {
				res.Offset = off
				if rr, err := l.Read(off, 1, latest); err == nil && len(rr.Batches) > 0 {
					if h, err := recordbatch.PeekHeader(rr.Batches); err == nil {
						res.TimestampMs, res.LeaderEpoch = h.MaxTimestamp, h.PartitionLeaderEpoch
					}
					if at, ok := firstRecordAtOrAfter(rr.Batches, off, ts); ok && at.offset < latest {
						res.Offset, res.TimestampMs = at.offset, at.timestamp
					}
				}
			}
		}
	}
	return connect.NewResponse(out), nil
}

// recordAt is one record's offset and timestamp.
type recordAt struct{ offset, timestamp int64 }

// firstRecordAtOrAfter finds, in the first batch of batches, the first
// record at or after offset from whose timestamp is at or after ts: the
// answer of ListOffsets by timestamp, which is a record's offset and time,
// not its batch's (Kafka's LogSegment.findOffsetByTimestamp scans the
// batch's records; a batch's earlier records may be older than ts). With
// log-append time every record has the batch's MaxTimestamp, as Kafka's
// reader gives it. ok is false when the batch does not decode (it passed
// its CRC when read, so only a broken inside, which the produce path
// refuses) or holds no such record; the caller then keeps the batch's
// own answer.
func firstRecordAtOrAfter(batches []byte, from, ts int64) (_ recordAt, ok bool) {
	size, err := recordbatch.PeekSize(batches)
	if err != nil || size > len(batches) {
		return recordAt{}, false
	}
	b, err := recordbatch.Decode(batches[:size])
	if err != nil {
		return recordAt{}, false
	}
	for _, rec := range b.Records {
		t := rec.Timestamp
		if b.Header.LogAppendTime() {
			t = b.Header.MaxTimestamp
		}
		if rec.Offset >= from && t >= ts {
			return recordAt{offset: rec.Offset, timestamp: t}, true
		}
	}
	return recordAt{}, false
}

func (s *service) OffsetForLeaderEpoch(ctx context.Context, req *connect.Request[storagev1.OffsetForLeaderEpochRequest]) (*connect.Response[storagev1.OffsetForLeaderEpochResponse], error) {
	// A follower (replica_id >= 0) must be that storage node; a consumer
	// needs describe on each topic.
	var access *topicAccess
	if id := req.Msg.GetReplicaId(); id >= 0 {
		if err := s.n.cfg.Guard.RequireStorageNode(ctx, id); err != nil {
			return nil, err
		}
	} else {
		access = s.topicAccess(ctx, acl.Describe)
	}
	out := &storagev1.OffsetForLeaderEpochResponse{}
	for _, p := range req.Msg.GetPartitions() {
		res := &storagev1.OffsetForLeaderEpochPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), LeaderEpoch: -1, EndOffset: -1}
		out.Partitions = append(out.Partitions, res)
		r, d := s.led(access, p.GetTopic(), p.GetPartition(), p.GetCurrentLeaderEpoch())
		if res.Error = d; d != nil {
			continue
		}
		res.LeaderEpoch, res.EndOffset = r.Log().EndOffsetForEpoch(p.GetLeaderEpoch())
	}
	return connect.NewResponse(out), nil
}

func (s *service) DescribeLog(ctx context.Context, req *connect.Request[storagev1.DescribeLogRequest]) (*connect.Response[storagev1.DescribeLogResponse], error) {
	if err := s.n.cfg.Guard.Authorize(ctx, acl.Describe, acl.Cluster, acl.ClusterName); err != nil {
		return nil, err
	}
	out := &storagev1.DescribeLogResponse{NodeId: s.n.cfg.NodeID}
	var tps []*commonv1.TopicPartition
	if len(req.Msg.GetPartitions()) > 0 {
		tps = req.Msg.GetPartitions()
	} else {
		for _, r := range s.n.hostedReplicas() {
			tps = append(tps, &commonv1.TopicPartition{Topic: r.Topic, Partition: r.Partition})
		}
		sort.Slice(tps, func(i, j int) bool {
			if tps[i].Topic != tps[j].Topic {
				return tps[i].Topic < tps[j].Topic
			}
			return tps[i].Partition < tps[j].Partition
		})
	}
	for _, tp := range tps {
		res := &storagev1.DescribeLogPartitionResult{Topic: tp.GetTopic(), Partition: tp.GetPartition(), TieredEndOffset: -1}
		out.Partitions = append(out.Partitions, res)
		r := s.n.replica(tp.GetTopic(), tp.GetPartition())
		if r == nil {
			res.Error = s.detail(tp.GetTopic(), tp.GetPartition(), nil, nil)
			continue
		}
		v := r.View()
		st := r.Log().Stats()
		res.Leader, res.LeaderEpoch = v.Role == replica.RoleLeader, v.State.LeaderEpoch
		res.LogStartOffset, res.LocalLogStartOffset, res.LogEndOffset, res.HighWatermark = v.LogStart, v.LogStart, v.LEO, v.HW
		res.LocalSizeBytes, res.LocalSegmentCount = st.Bytes, int32(st.Segments)
		s.n.describeTiered(r, res) // tiered extent (tiering.go)
		if ratio, ok := s.n.DirtyRatio(tp.GetTopic(), tp.GetPartition()); ok {
			res.CleanerDirtyRatio = &ratio
		}
		for id, f := range v.Followers {
			rs := &storagev1.ReplicaState{NodeId: id, LogEndOffset: f.LEO, LastCaughtUpTimeMs: -1, NodeEpoch: f.NodeEpoch}
			if !f.LastCaughtUp.IsZero() {
				rs.LastCaughtUpTimeMs = f.LastCaughtUp.UnixMilli()
			}
			for _, i := range v.State.ISR {
				rs.InSync = rs.InSync || i == id
			}
			res.Replicas = append(res.Replicas, rs)
		}
		sort.Slice(res.Replicas, func(i, j int) bool { return res.Replicas[i].NodeId < res.Replicas[j].NodeId })
	}
	return connect.NewResponse(out), nil
}
