package server

// Tiered storage on the storage node (docs/design/tiering.md). For every
// hosted replica of a topic with remote.storage.enable=true:
//
//   - the leader pushes each sealed segment wholly below the high watermark
//     and not yet in the tier to the tiering service (UploadSegment), one
//     upload per partition at a time, in the background: a slow or failing
//     object store delays tiering and never blocks produce;
//   - every replica deletes a local segment only once it is tiered (below
//     the tiering service's tiered_end_offset) and older than the topic's
//     local retention (local.retention.ms / local.retention.bytes; -2 means
//     retention.ms / retention.bytes), by raising the log start offset;
//     ordinary retention (node.go retentionRound) leaves tiered topics
//     alone, so an untiered segment is never deleted and the tier's end
//     and the local log start never leave a gap between them; records
//     below the tier's log start (expired by the tier's total retention,
//     which may empty the tier) are deleted whatever local retention says,
//     and never uploaded again;
//   - each upload carries the segment's aborted transaction index
//     (.txnindex), which tiering stores beside it;
//   - Fetch below the local log start is served from the tier with
//     FetchTiered, returning the same batch bytes; under read_committed
//     the batches below the last stable offset with their aborted
//     transactions: the tier's, walked over the tiered segments' indexes,
//     and, when that walk ran off the tier's end, the local log's whose
//     markers lie past it (committedTierRead); a range that walks a
//     segment uploaded before segments carried their index is answered
//     only up to its first transactional batch (committedFromTier);
//     ListOffsets EARLIEST and DescribeLog report the tiered start and
//     extent, and ListOffsets by timestamp asks the tier
//     (OffsetForTimestamp) first when it holds offsets below the local
//     log start;
//   - a replica whose log ends below the tiered end (a lost disk) restarts
//     its log empty at the tiered end (Replica.MoveToTieredEnd); until the
//     tier state is known, an empty log at 0 refuses produce as leader.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/gen/strata/tiering/v1/tieringv1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/topicconfig"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// Defaults of the tiering loop.
const (
	defaultTierInterval = 5 * time.Second
	tierChunkBytes      = 1 << 20 // bytes per UploadSegment data message (at most 4 MiB)
	tierFetchTimeout    = 30 * time.Second
)

// tieredInfo is the tiering service's last answer for one partition.
type tieredInfo struct {
	logStart, end, size int64 // -1, -1, 0 when nothing is tiered
	// deleted is the tier's delete-records offset (DeleteRecords): no
	// record below it is served; 0 when never set.
	deleted int64
	topicID string // the topic the answer is for
}

// raisedBy is a round's answer next kept from lowering what the node
// already knows of the same topic: the tier's offsets only rise, but a
// round's answer read before this node's DeleteRecords or upload finished
// can arrive after it and would move the partition's log start back.
func (next tieredInfo) raisedBy(old tieredInfo) tieredInfo {
	if next.topicID == "" || old.topicID != next.topicID {
		return next // another topic of the same name, or one unknown: the tier's answer stands
	}
	next.logStart = max(next.logStart, old.logStart)
	next.end = max(next.end, old.end)
	next.deleted = max(next.deleted, old.deleted)
	return next
}

// tiering is a node's link to the tiering service. nil when disabled.
type tiering struct {
	client tieringv1connect.TieringServiceClient

	kick chan struct{} // a tier round is wanted now (kickTier)

	mu        sync.Mutex
	state     map[tpKey]tieredInfo
	uploading map[tpKey]bool
}

// startTiering starts the tiering loop when a tiering URL is configured.
// Called once from Start.
func (n *Node) startTiering() {
	if n.cfg.Tiering == "" {
		return
	}
	if n.cfg.TierInterval <= 0 {
		n.cfg.TierInterval = defaultTierInterval
	}
	n.tier = &tiering{
		client: tieringv1connect.NewTieringServiceClient(n.cfg.HTTPClient, strings.TrimRight(n.cfg.Tiering, "/"), n.cfg.ClientOptions...),
		kick:   make(chan struct{}, 1),
		state:  map[tpKey]tieredInfo{}, uploading: map[tpKey]bool{},
	}
	n.goRun(n.tierLoop)
}

// tieredTopic reports whether a topic has remote storage enabled, with its
// configs.
func (n *Node) tieredTopic(topic string) (map[string]string, bool) {
	t := n.currentView().Topics[topic]
	if t == nil {
		return nil, false
	}
	return t.GetConfigs(), t.GetConfigs()[topicconfig.RemoteStorageEnable] == "true"
}

func (n *Node) tierLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.TierInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.tier.kick:
		}
		n.tierRound(ctx)
	}
}

// kickTier asks for a tier round now rather than at the next tick.
func (n *Node) kickTier() {
	if n.tier == nil {
		return
	}
	select {
	case n.tier.kick <- struct{}{}:
	default:
	}
}

// tierOpened is called for a newly opened replica: on a tiered topic an
// empty log (its directory lost, or a new topic) may lie below the tier's
// end, so produce waits for the tier state, which a round fetches now.
func (n *Node) tierOpened(r *replica.Replica) {
	if n.tier == nil {
		return
	}
	if _, ok := n.tieredTopic(r.Topic); !ok {
		return
	}
	if r.AwaitTierState() {
		n.logger.Info("empty log on a tiered topic; produce waits for the tier state", "topic", r.Topic, "partition", r.Partition)
	}
	n.kickTier()
}

func (n *Node) tierRound(ctx context.Context) {
	var rs []*replica.Replica
	var req tieringv1.GetTieredStateRequest
	for _, r := range n.hostedReplicas() {
		if _, ok := n.tieredTopic(r.Topic); ok {
			rs = append(rs, r)
			req.Partitions = append(req.Partitions, &commonv1.TopicPartition{Topic: r.Topic, Partition: r.Partition})
		}
	}
	if len(rs) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(untraced(ctx), 10*time.Second) // a poll on a timer starts no traces
	resp, err := n.tier.client.GetTieredState(cctx, connect.NewRequest(&req))
	cancel()
	if err != nil {
		n.logger.Warn("tiering service unavailable; local segments are kept", "err", err)
		return
	}
	for i, st := range resp.Msg.GetPartitions() {
		if i >= len(rs) || st.GetError() != nil {
			continue
		}
		r := rs[i]
		k := tpKey{r.Topic, r.Partition}
		if st.GetTopicId() != "" && r.TopicID != "" && st.GetTopicId() != r.TopicID {
			// The tier holds an older topic of the same name: nothing of
			// ours is tiered.
			if _, err := r.MoveToTieredEnd(-1); err != nil && !errors.Is(err, replica.ErrClosed) {
				n.logger.Warn("applying tier state", "topic", r.Topic, "partition", r.Partition, "err", err)
			}
			continue
		}
		info := tieredInfo{logStart: st.GetLogStartOffset(), end: st.GetTieredEndOffset(), size: st.GetSizeBytes(),
			deleted: st.GetDeleteRecordsOffset(), topicID: r.TopicID}
		// A log ending below the tiered end restarts there (a lost disk).
		if _, err := r.MoveToTieredEnd(info.end); err != nil {
			if !errors.Is(err, replica.ErrClosed) {
				n.logger.Warn("moving the log to the tiered end", "topic", r.Topic, "partition", r.Partition, "err", err)
			}
			continue
		}
		n.tier.mu.Lock()
		info = info.raisedBy(n.tier.state[k])
		n.tier.state[k] = info
		busy := n.tier.uploading[k]
		n.tier.mu.Unlock()
		if err := n.deleteTieredLocal(r, info); err != nil && !errors.Is(err, partlog.ErrClosed) {
			n.logger.Warn("deleting tiered local segments", "topic", r.Topic, "partition", r.Partition, "err", err)
		}
		if r.View().Role == replica.RoleLeader && !busy {
			n.tier.mu.Lock()
			n.tier.uploading[k] = true
			n.tier.mu.Unlock()
			n.goRun(func(ctx context.Context) {
				defer func() {
					n.tier.mu.Lock()
					delete(n.tier.uploading, k)
					n.tier.mu.Unlock()
				}()
				n.uploadSealed(ctx, r, info)
			})
		}
	}
}

// uploadSealed uploads, oldest first, the sealed segments wholly below the
// high watermark that the tier does not hold yet. It stops at the first
// failure; the next round retries.
func (n *Node) uploadSealed(ctx context.Context, r *replica.Replica, info tieredInfo) {
	segs := r.Log().Segments()
	end := info.end
	for i := 0; i+1 < len(segs); i++ {
		s, next := segs[i], segs[i+1].BaseOffset
		v := r.View()
		if v.Role != replica.RoleLeader || next > v.HW || ctx.Err() != nil {
			return
		}
		if end >= 0 && next <= end {
			continue
		}
		if end >= 0 && s.BaseOffset > end {
			n.logger.Error("local log starts after the tiered end; cannot tier without a gap",
				"topic", r.Topic, "partition", r.Partition, "segment", s.BaseOffset, "tiered_end", end)
			return
		}
		res, err := n.timedUpload(ctx, r, v.State.LeaderEpoch, s, next-1) // telemetry.go
		if err != nil {
			if ctx.Err() == nil {
				n.logger.Warn("segment upload failed; will retry", "topic", r.Topic, "partition", r.Partition, "segment", s.BaseOffset, "err", err)
			}
			return
		}
		end = res.GetSegment().GetLastOffset() + 1
		n.tier.mu.Lock()
		k := tpKey{r.Topic, r.Partition}
		st := n.tier.state[k]
		if st.logStart < 0 {
			st.logStart = res.GetSegment().GetBaseOffset()
		}
		st.end = max(st.end, end)
		n.tier.state[k] = st
		n.tier.mu.Unlock()
	}
}

func (n *Node) uploadSegment(ctx context.Context, r *replica.Replica, epoch int32, s partlog.SegmentInfo, last int64) (*tieringv1.UploadSegmentResponse, error) {
	f, err := r.Log().OpenSegment(s.BaseOffset)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	stream := n.tier.client.UploadSegment(ctx)
	err = stream.Send(&tieringv1.UploadSegmentRequest{Part: &tieringv1.UploadSegmentRequest_Header{Header: &tieringv1.SegmentHeader{
		Topic: r.Topic, TopicId: r.TopicID, Partition: r.Partition, LeaderEpoch: epoch, NodeId: n.cfg.NodeID,
		BaseOffset: s.BaseOffset, LastOffset: last, SizeBytes: f.Size(),
		// Set even when empty: an unset index is a node from before
		// tiered segments carried it, whose segment's index is unknown.
		TxnIndex: append([]byte{}, f.TxnIndex...),
	}}})
	buf := make([]byte, tierChunkBytes)
	for err == nil {
		var m int
		m, err = io.ReadFull(f, buf)
		if m > 0 {
			if serr := stream.Send(&tieringv1.UploadSegmentRequest{Part: &tieringv1.UploadSegmentRequest_Data{Data: buf[:m]}}); serr != nil {
				err = serr
				break
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = nil
			break
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		stream.CloseAndReceive() //nolint:errcheck // the send error is the one to report
		return nil, err
	}
	resp, err := stream.CloseAndReceive()
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// localRetention returns how much of a tiered topic's log its replicas
// keep on local disk once tiered, -1 for no limit: local.retention.ms and
// local.retention.bytes, where -2 (the default) means the total
// retention, and never more than the total retention (Kafka refuses such
// a config; a tiered segment past total retention has no reason to stay
// on disk). The total follows cleanup.policy (topicconfig.Retention): a
// compact-only topic has none, so its local data goes only past an
// explicit local retention, once the tier holds it.
func localRetention(cfg map[string]string) (ms, bytes int64) {
	get := func(k string) int64 { return topicconfig.Int64(cfg, k, topicconfig.LocalRetentionTotal) }
	capped := func(local, total int64) int64 {
		if local == topicconfig.LocalRetentionTotal || (total >= 0 && (local < 0 || local > total)) {
			return total
		}
		return local
	}
	totalMs, totalBytes := topicconfig.Retention(cfg)
	return capped(get(topicconfig.LocalRetentionMs), totalMs), capped(get(topicconfig.LocalRetentionBytes), totalBytes)
}

// deleteTieredLocal deletes the oldest local segments that are tiered and
// past local retention, moving the local log start. Offsets below the
// tier's log start are gone first, whatever local retention says: the
// tier's total retention expired them (it may have emptied the tier, which
// then starts and ends at the same offset), so the partition's log start
// has moved past them. Kafka does the same: remote retention raises the
// log start offset and the local segments below it are deleted
// (UnifiedLog.deleteLogStartOffsetBreachedSegments).
func (n *Node) deleteTieredLocal(r *replica.Replica, info tieredInfo) error {
	if info.end < 0 {
		return nil
	}
	cfg, ok := n.tieredTopic(r.Topic)
	if !ok {
		return nil
	}
	if start := min(info.logStart, info.end, r.Log().HighWatermark()); start > r.Log().LogStartOffset() {
		if err := r.Log().DeleteRecordsBefore(start); err != nil {
			return err
		}
		n.logger.Info("local records below the tiered log start deleted", "topic", r.Topic, "partition", r.Partition, "log_start_offset", start)
	}
	retMs, retBytes := localRetention(cfg)
	if retMs < 0 && retBytes < 0 {
		return nil
	}
	segs := r.Log().Segments()
	var total int64
	for _, s := range segs {
		total += s.Size
	}
	hw, now := r.Log().HighWatermark(), time.Now().UnixMilli()
	k := 0
	for ; k+1 < len(segs); k++ {
		s, next := segs[k], segs[k+1].BaseOffset
		if next > info.end || next > hw {
			break
		}
		ts := s.MaxTimestamp
		byTime := retMs >= 0 && ts >= 0 && now-ts > retMs
		bySize := retBytes >= 0 && total-s.Size >= retBytes
		if !byTime && !bySize {
			break
		}
		total -= s.Size
	}
	if k == 0 {
		return nil
	}
	return r.Log().DeleteRecordsBefore(segs[k].BaseOffset)
}

// tieredState returns the last known tiered extent of a partition.
func (n *Node) tieredState(topic string, partition int32) (tieredInfo, bool) {
	if n.tier == nil {
		return tieredInfo{}, false
	}
	n.tier.mu.Lock()
	defer n.tier.mu.Unlock()
	st, ok := n.tier.state[tpKey{topic, partition}]
	return st, ok && st.end >= 0
}

// effectiveLogStart is the first offset available anywhere: the tier's log
// start when the tier holds older data than local disk, or when its
// retention expired offsets still on local disk (deleteTieredLocal
// removes them at the next tier round); local otherwise. DeleteRecords'
// offset bounds it from below, also where it passed the tier's end.
func (n *Node) effectiveLogStart(r *replica.Replica, local int64) int64 {
	if st, ok := n.tieredState(r.Topic, r.Partition); ok && st.logStart >= 0 {
		hw := r.Log().HighWatermark()
		return max(min(st.logStart, st.end, hw), min(st.deleted, hw))
	}
	return local
}

// deleteTiered raises the tier's delete-records offset of a partition this
// node leads to offset, before the leader raises its own log start, so
// the tier never serves a record DeleteRecords deleted; nil when the
// topic is not tiered here. It returns the error to answer otherwise.
func (n *Node) deleteTiered(ctx context.Context, r *replica.Replica, offset int64) *commonv1.ErrorDetail {
	if n.tier == nil {
		return nil
	}
	if _, ok := n.tieredTopic(r.Topic); !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, tierFetchTimeout)
	defer cancel()
	resp, err := n.tier.client.DeleteRecords(ctx, connect.NewRequest(&tieringv1.DeleteRecordsRequest{Topic: r.Topic, Partition: r.Partition, Offset: offset}))
	if err != nil {
		d := apierr.DetailOf(err)
		if d.GetReason() == commonv1.Reason_REASON_UNSPECIFIED {
			d = &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNAVAILABLE, Reason: commonv1.Reason_REASON_REQUEST_TIMED_OUT,
				Message: fmt.Sprintf("the tier could not delete the records of %s/%d below %d: %s", r.Topic, r.Partition, offset, d.GetMessage())}
		}
		return d
	}
	k := tpKey{r.Topic, r.Partition}
	n.tier.mu.Lock()
	if st, ok := n.tier.state[k]; ok {
		st.logStart, st.deleted = resp.Msg.GetLogStartOffset(), resp.Msg.GetDeleteRecordsOffset()
		n.tier.state[k] = st
	}
	n.tier.mu.Unlock()
	return nil
}

// tieredRangeError is an offset below the local log start that the tier
// does not hold either. logStart is the first offset available anywhere
// as the tier just reported it, so a consumer below it moves there; an
// offset at or above it lies in a gap between the tier's end and the
// local log start (data deleted locally before it was tiered), which the
// consumer reports rather than retry forever.
type tieredRangeError struct {
	offset, logStart, tieredEnd, localStart int64
}

func (e *tieredRangeError) Error() string {
	if e.offset < e.logStart {
		return fmt.Sprintf("offset %d is below the log start offset %d", e.offset, e.logStart)
	}
	return fmt.Sprintf("offset %d is missing: the tier holds [%d, %d) and local disk starts at %d", e.offset, e.logStart, e.tieredEnd, e.localStart)
}

// Unwrap makes errors.Is(err, partlog.ErrOffsetOutOfRange) true.
func (e *tieredRangeError) Unwrap() error { return partlog.ErrOffsetOutOfRange }

// tierUnavailableError is a read for the tier that the tiering service
// could not answer; detail is its error (UNAVAILABLE when it sent none).
type tierUnavailableError struct {
	detail *commonv1.ErrorDetail
	err    error
}

func (e *tierUnavailableError) Error() string { return "tiered read failed: " + e.err.Error() }
func (e *tierUnavailableError) Unwrap() error { return e.err }

// readTiered serves a consumer read below the local log start from the
// tier. handled is false when the read is not one for the tier (readErr is
// not an offset-out-of-range below the local start, or the topic is not
// tiered); the caller then reports readErr. Otherwise it returns the
// batches, or the error to report: a *tieredRangeError when the tier does
// not hold the offset, a *tierUnavailableError when the tiering service
// failed (retriable, never mistaken for out of range). committed reads as
// read_committed (committedTierRead).
func (n *Node) readTiered(r *replica.Replica, offset int64, maxBytes int, committed bool, readErr error) (_ partlog.ReadResult, _ error, handled bool) {
	localStart := r.Log().LogStartOffset()
	if n.tier == nil || !errors.Is(readErr, partlog.ErrOffsetOutOfRange) || offset >= localStart {
		return partlog.ReadResult{}, nil, false
	}
	if _, ok := n.tieredTopic(r.Topic); !ok {
		return partlog.ReadResult{}, nil, false
	}
	ctx, cancel := context.WithTimeout(n.ctx, tierFetchTimeout)
	defer cancel()
	resp, err := n.tier.client.FetchTiered(ctx, connect.NewRequest(&tieringv1.FetchTieredRequest{
		Topic: r.Topic, Partition: r.Partition, FetchOffset: offset, MaxBytes: int32(min(maxBytes, 1<<30)), ReadCommitted: committed,
	}))
	if err != nil {
		d := apierr.DetailOf(err)
		if h := d.GetOffsetRange(); h != nil && d.GetReason() == commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE {
			e := &tieredRangeError{offset: offset, logStart: localStart, tieredEnd: h.GetHighWatermark(), localStart: localStart}
			if h.GetLogStartOffset() >= 0 && h.GetHighWatermark() > h.GetLogStartOffset() {
				e.logStart = min(h.GetLogStartOffset(), localStart)
			}
			if e.offset >= e.logStart {
				n.logger.Warn("fetch below the local log start finds no tiered data", "topic", r.Topic, "partition", r.Partition, "err", e)
			}
			return partlog.ReadResult{}, e, true
		}
		n.logger.Debug("tiered read failed", "topic", r.Topic, "partition", r.Partition, "offset", offset, "err", err)
		return partlog.ReadResult{}, &tierUnavailableError{detail: d, err: err}, true
	}
	hw := r.Log().HighWatermark()
	rr := partlog.ReadResult{
		Batches: resp.Msg.GetRecords(), HighWatermark: hw, LastStableOffset: r.Log().LastStableOffset(), LogEndOffset: r.Log().LogEndOffset(),
		LogStartOffset: min(resp.Msg.GetLogStartOffset(), localStart), NextOffset: offset,
	}
	if !committed {
		return rr, nil, true
	}
	if !resp.Msg.GetTxnIndexKnown() {
		rr, err = committedFromTier(rr, offset)
		return rr, err, true
	}
	rr, err = committedTierRead(rr, offset, resp.Msg, r.Log())
	return rr, err, true
}

// committedTierRead holds a read from the tier (readTiered) to what a
// read_committed consumer is answered, as a local read_committed read
// (partlog's ReadCommittedInto) is: the batches below the last stable
// offset, with the aborted transactions that overlap them. The tier
// listed those whose markers it holds, walking its segments' indexes from
// the one holding the offset; when that walk ran off the tier's end
// without reaching an entry whose last stable offset passes the range,
// the markers of transactions begun in the range may lie on local disk,
// so the local log's AbortedTxns of the range adds those past the tier's
// end (Kafka's RemoteLogManager collects aborted transactions from remote
// segments, then local ones, the same way: KIP-405,
// RemoteLogManager.collectAbortedTransactions). Local entries below the
// tier's end are the tier's own, already listed.
func committedTierRead(rr partlog.ReadResult, fetchOffset int64, tier *tieringv1.FetchTieredResponse, local *partlog.Log) (partlog.ReadResult, error) {
	rr = belowStable(rr)
	if len(rr.Batches) == 0 {
		return rr, nil
	}
	to := rr.NextOffset
	for _, t := range tier.GetAbortedTransactions() {
		if t.GetFirstOffset() < to {
			rr.AbortedTxns = append(rr.AbortedTxns, partlog.AbortedTxn{ProducerID: t.GetProducerId(), FirstOffset: t.GetFirstOffset(), LastOffset: -1, LastStableOffset: -1})
		}
	}
	if tier.GetAbortedComplete() {
		return rr, nil
	}
	more, err := local.AbortedTxns(fetchOffset, to)
	if err != nil {
		return partlog.ReadResult{}, err
	}
	for _, t := range more {
		if t.LastOffset >= tier.GetTieredEndOffset() {
			rr.AbortedTxns = append(rr.AbortedTxns, t)
		}
	}
	return rr, nil
}

// belowStable keeps the batches of a tiered read that lie wholly below
// its last stable offset, setting NextOffset after the last one kept.
func belowStable(rr partlog.ReadResult) partlog.ReadResult {
	cut := 0
	for cut < len(rr.Batches) {
		h, err := recordbatch.PeekHeader(rr.Batches[cut:])
		if err != nil || h.LastOffset() >= rr.LastStableOffset {
			break
		}
		cut += h.Size()
		rr.NextOffset = h.NextOffset()
	}
	rr.Batches = rr.Batches[:cut]
	return rr
}

// tierTxnError refuses a read_committed read from the tier whose first
// batch is transactional when the range walks a tiered segment whose
// aborted transaction index is unknown (uploaded before tiered segments
// carried it): the node cannot say whether its records were aborted, and
// answering them with no aborted transactions would hand a read_committed
// consumer aborted records as committed ones.
type tierTxnError struct{ offset int64 }

func (e *tierTxnError) Error() string {
	return fmt.Sprintf("offset %d is in the tier and belongs to a transaction, in a tiered segment stored without its aborted "+
		"transaction index (uploaded by an older version): read_committed cannot tell whether it was aborted; read it with read_uncommitted", e.offset)
}

// committedFromTier holds a read from the tier (readTiered) whose range
// walks a segment of unknown aborted transaction index (stored by an
// older version, FetchTieredResponse.txn_index_known false) to what a
// read_committed consumer may be answered without the aborted
// transactions: the batches below the last stable offset, up to the
// first transactional batch that is not a marker. A consumer drops
// records as aborted only from transactional batches (Kafka's
// CompletedFetch skips a batch only when it is transactional and its
// producer is in the aborted list), so the batches before that one need
// no list, and markers are skipped whatever the list says. When the
// first batch is such a batch there is nothing to answer: *tierTxnError.
// Segments uploaded since tiered segments carry their index are answered
// whole (committedTierRead); these older ones stay so until retention or
// a merge with an unknown input removes them.
func committedFromTier(rr partlog.ReadResult, fetchOffset int64) (partlog.ReadResult, error) {
	cut := 0
	for cut < len(rr.Batches) {
		h, err := recordbatch.PeekHeader(rr.Batches[cut:])
		if err != nil || h.LastOffset() >= rr.LastStableOffset {
			break
		}
		if h.Transactional() && !h.Control() {
			if cut == 0 {
				return partlog.ReadResult{}, &tierTxnError{offset: max(h.BaseOffset, fetchOffset)}
			}
			break
		}
		cut += h.Size()
		rr.NextOffset = h.NextOffset()
	}
	rr.Batches = rr.Batches[:cut]
	return rr, nil
}

// tieredTimestamp is the tier's answer to ListOffsets by timestamp.
type tieredTimestamp struct {
	offset, maxTS int64
	epoch         int32
}

// tieredOffsetForTimestamp answers ListOffsets by timestamp from the tier
// when the tier holds offsets below the local log start (Kafka's KIP-405
// looks in remote storage first, then locally). ok is false when the
// local log answers: the topic is not tiered on this node, the tier holds
// nothing below the local start, or its first batch at or after ts is not
// below the local start. A tiering service that cannot answer is a
// *tierUnavailableError (retriable), never a wrong offset.
func (n *Node) tieredOffsetForTimestamp(r *replica.Replica, ts int64) (_ tieredTimestamp, ok bool, _ error) {
	if _, tiered := n.tieredTopic(r.Topic); !tiered {
		return tieredTimestamp{}, false, nil
	}
	localStart := r.Log().LogStartOffset()
	if st, known := n.tieredState(r.Topic, r.Partition); !known || st.logStart < 0 || st.logStart >= localStart {
		return tieredTimestamp{}, false, nil
	}
	ctx, cancel := context.WithTimeout(n.ctx, tierFetchTimeout)
	defer cancel()
	resp, err := n.tier.client.OffsetForTimestamp(ctx, connect.NewRequest(&tieringv1.OffsetForTimestampRequest{
		Topic: r.Topic, Partition: r.Partition, TimestampMs: ts,
	}))
	if err != nil {
		return tieredTimestamp{}, false, &tierUnavailableError{detail: apierr.DetailOf(err), err: err}
	}
	m := resp.Msg
	if m.GetOffset() < 0 || m.GetOffset() >= localStart {
		return tieredTimestamp{}, false, nil
	}
	return tieredTimestamp{offset: m.GetOffset(), maxTS: m.GetTimestampMs(), epoch: m.GetLeaderEpoch()}, true, nil
}

// describeTiered fills the tiered fields of a DescribeLog result.
func (n *Node) describeTiered(r *replica.Replica, res *storagev1.DescribeLogPartitionResult) {
	st, ok := n.tieredState(r.Topic, r.Partition)
	if !ok {
		return
	}
	res.TieredEndOffset, res.TieredSizeBytes = st.end, st.size
	res.LogStartOffset = n.effectiveLogStart(r, res.GetLocalLogStartOffset())
}
