// Package server is the tiering service: the Connect TieringService over an
// object-store bucket (uploads, tiered state, tiered reads, manifest
// listing), total retention of tiered segments, and garbage collection of
// objects no manifest names. See docs/design/tiering.md.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
	"github.com/strata-mq/strata/services/tiering/internal/reader"
	"github.com/strata-mq/strata/services/tiering/internal/segment"
	"github.com/strata-mq/strata/services/tiering/internal/uploader"
)

// Limits from the proto.
const (
	maxDataChunk         = 4 << 20
	defaultFetchMaxBytes = 1 << 20
	defaultPageSize      = 1000
)

// Service implements tieringv1connect.TieringServiceHandler.
type Service struct {
	store    *manifest.Store
	uploader *uploader.Uploader
	reader   *reader.Reader
	topics   *topics
	logger   *slog.Logger
}

// NewService returns the service over a manifest store. topics may be nil
// (no metadata).
func NewService(store *manifest.Store, up *uploader.Uploader, rd *reader.Reader, t *topics, logger *slog.Logger) *Service {
	if t == nil {
		t = &topics{}
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Service{store: store, uploader: up, reader: rd, topics: t, logger: logger}
}

// Reader is the service's tiered reader (for stats and tests).
func (s *Service) Reader() *reader.Reader { return s.reader }

func errDetail(code commonv1.Code, reason commonv1.Reason, msg string) *commonv1.ErrorDetail {
	return &commonv1.ErrorDetail{Code: code, Reason: reason, Message: msg}
}

// detail maps an internal error to the API's error detail.
func (s *Service) detail(op string, err error) *commonv1.ErrorDetail {
	var oor *reader.OutOfRangeError
	switch {
	case errors.As(err, &oor):
		d := errDetail(commonv1.Code_CODE_OUT_OF_RANGE, commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE, err.Error())
		d.Hint = &commonv1.ErrorDetail_OffsetRange{OffsetRange: &commonv1.OffsetRangeHint{LogStartOffset: oor.LogStart, HighWatermark: oor.TieredEnd}}
		return d
	case errors.Is(err, segment.ErrCorrupt):
		return errDetail(commonv1.Code_CODE_INVALID_ARGUMENT, commonv1.Reason_REASON_CORRUPT_RECORD, err.Error())
	case errors.Is(err, uploader.ErrInvalid):
		return errDetail(commonv1.Code_CODE_INVALID_ARGUMENT, 0, err.Error())
	case errors.Is(err, uploader.ErrFenced):
		return errDetail(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_FENCED_LEADER_EPOCH, err.Error())
	case errors.Is(err, uploader.ErrGap), errors.Is(err, uploader.ErrExpired):
		return errDetail(commonv1.Code_CODE_FAILED_PRECONDITION, 0, err.Error())
	case errors.Is(err, manifest.ErrConflict):
		return errDetail(commonv1.Code_CODE_ABORTED, commonv1.Reason_REASON_MANIFEST_CONFLICT, err.Error())
	case errors.Is(err, reader.ErrDataLoss), errors.Is(err, manifest.ErrFormat):
		s.logger.Error("tiered data lost", "op", op, "err", err)
		return errDetail(commonv1.Code_CODE_DATA_LOSS, 0, "tiered data is missing or corrupt")
	case errors.Is(err, context.Canceled):
		return errDetail(commonv1.Code_CODE_CANCELED, 0, "canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return errDetail(commonv1.Code_CODE_DEADLINE_EXCEEDED, commonv1.Reason_REASON_REQUEST_TIMED_OUT, "deadline exceeded")
	}
	s.logger.Warn("object store unavailable", "op", op, "err", err)
	return errDetail(commonv1.Code_CODE_UNAVAILABLE, 0, "object store unavailable")
}

func notFound(topic string, partition int32) *commonv1.ErrorDetail {
	return errDetail(commonv1.Code_CODE_NOT_FOUND, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION,
		fmt.Sprintf("unknown topic or partition %s/%d", topic, partition))
}

// partition resolves a topic's manifest location: the topic id from
// metadata, else from the bucket (the newest manifest when a name was
// reused). ok is false for a topic metadata does not know; a topic with no
// id anywhere resolves with an empty TopicID.
func (s *Service) partition(ctx context.Context, topic string, partition int32) (manifest.Partition, bool, error) {
	p := manifest.Partition{Topic: topic, Partition: partition}
	ti, known := s.topics.lookup(ctx, topic)
	if !known || partition < 0 || (ti != nil && partition >= ti.Partitions) {
		return p, false, nil
	}
	if ti != nil && ti.ID != "" {
		p.TopicID = ti.ID
		return p, true, nil
	}
	parts, err := s.store.Partitions(ctx, topic)
	if err != nil {
		return p, true, err
	}
	var best *tieringv1.Manifest
	for _, c := range parts {
		if c.Partition != partition {
			continue
		}
		m, err := s.reader.Manifest(ctx, c, false)
		if err != nil {
			return p, true, err
		}
		if best == nil || m.GetUpdatedAtMs() > best.GetUpdatedAtMs() {
			best, p.TopicID = m, c.TopicID
		}
	}
	return p, true, nil
}

// chunkReader turns the data messages of an upload stream into a reader.
type chunkReader struct {
	stream *connect.ClientStream[tieringv1.UploadSegmentRequest]
	buf    []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if !r.stream.Receive() {
			if err := r.stream.Err(); err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		msg := r.stream.Msg()
		if msg.GetHeader() != nil {
			return 0, fmt.Errorf("%w: a second header in the stream", uploader.ErrInvalid)
		}
		if len(msg.GetData()) > maxDataChunk {
			return 0, fmt.Errorf("%w: data message of %d bytes exceeds %d", uploader.ErrInvalid, len(msg.GetData()), maxDataChunk)
		}
		r.buf = msg.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (s *Service) UploadSegment(ctx context.Context, stream *connect.ClientStream[tieringv1.UploadSegmentRequest]) (*connect.Response[tieringv1.UploadSegmentResponse], error) {
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, apierr.Error(errDetail(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "empty upload stream"))
	}
	hdr := stream.Msg().GetHeader()
	if hdr == nil {
		return nil, apierr.Error(errDetail(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "the first message of an upload must be a header"))
	}
	if ti, known := s.topics.lookup(ctx, hdr.GetTopic()); !known || (ti != nil && (ti.ID != hdr.GetTopicId() || hdr.GetPartition() >= ti.Partitions)) {
		return nil, apierr.Error(notFound(hdr.GetTopic(), hdr.GetPartition()))
	}
	res, err := s.uploader.Upload(ctx, hdr, &chunkReader{stream: stream})
	if err != nil {
		return nil, apierr.Error(s.detail("upload", err))
	}
	p := manifest.Partition{Topic: hdr.GetTopic(), TopicID: hdr.GetTopicId(), Partition: hdr.GetPartition()}
	s.reader.SetManifest(p, res.Manifest)
	return connect.NewResponse(&tieringv1.UploadSegmentResponse{Segment: res.Entry, ManifestVersion: res.Manifest.GetVersion()}), nil
}

func stateOf(p manifest.Partition, m *tieringv1.Manifest) *tieringv1.TieredPartitionState {
	return &tieringv1.TieredPartitionState{
		Topic: p.Topic, Partition: p.Partition, TopicId: p.TopicID,
		LogStartOffset: manifest.LogStart(m), TieredEndOffset: manifest.TieredEnd(m),
		ObjectCount: int64(len(manifest.Active(m))), SizeBytes: manifest.SizeBytes(m),
		ManifestVersion: m.GetVersion(), LeaderEpoch: m.GetLeaderEpoch(),
		DeleteRecordsOffset: m.GetDeleteRecordsOffset(),
	}
}

// DeleteRecords raises the partition's delete-records offset in its
// manifest (never lowers it), so the tier stops serving what lies below
// and its retention deletes the segments wholly below. A partition with
// nothing tiered gets a manifest holding just the offset, which the
// uploads that follow keep to.
func (s *Service) DeleteRecords(ctx context.Context, req *connect.Request[tieringv1.DeleteRecordsRequest]) (*connect.Response[tieringv1.DeleteRecordsResponse], error) {
	m := req.Msg
	if m.GetOffset() < 0 {
		return nil, apierr.Error(errDetail(commonv1.Code_CODE_INVALID_ARGUMENT, 0, fmt.Sprintf("negative offset %d", m.GetOffset())))
	}
	p, known, err := s.partition(ctx, m.GetTopic(), m.GetPartition())
	if err != nil {
		return nil, apierr.Error(s.detail("resolve topic", err))
	}
	if !known || p.TopicID == "" {
		return nil, apierr.Error(notFound(m.GetTopic(), m.GetPartition()))
	}
	man, err := s.store.Update(ctx, p, func(man *tieringv1.Manifest) error {
		if m.GetOffset() <= man.GetDeleteRecordsOffset() {
			return manifest.ErrUnchanged
		}
		man.DeleteRecordsOffset = m.GetOffset()
		return nil
	})
	if err != nil {
		return nil, apierr.Error(s.detail("delete records", err))
	}
	s.reader.SetManifest(p, man)
	return connect.NewResponse(&tieringv1.DeleteRecordsResponse{
		DeleteRecordsOffset: man.GetDeleteRecordsOffset(), LogStartOffset: manifest.LogStart(man),
	}), nil
}

func (s *Service) GetTieredState(ctx context.Context, req *connect.Request[tieringv1.GetTieredStateRequest]) (*connect.Response[tieringv1.GetTieredStateResponse], error) {
	out := &tieringv1.GetTieredStateResponse{}
	if len(req.Msg.GetPartitions()) == 0 {
		parts, err := s.store.Partitions(ctx, "")
		if err != nil {
			return nil, apierr.Error(s.detail("list manifests", err))
		}
		for _, p := range parts {
			m, err := s.reader.Manifest(ctx, p, true)
			if err != nil {
				out.Partitions = append(out.Partitions, &tieringv1.TieredPartitionState{Topic: p.Topic, Partition: p.Partition, Error: s.detail("manifest", err)})
				continue
			}
			out.Partitions = append(out.Partitions, stateOf(p, m))
		}
		return connect.NewResponse(out), nil
	}
	for _, tp := range req.Msg.GetPartitions() {
		p, known, err := s.partition(ctx, tp.GetTopic(), tp.GetPartition())
		st := &tieringv1.TieredPartitionState{Topic: tp.GetTopic(), Partition: tp.GetPartition(), LogStartOffset: -1, TieredEndOffset: -1, LeaderEpoch: -1}
		switch {
		case err != nil:
			st.Error = s.detail("resolve topic", err)
		case !known:
			st.Error = notFound(tp.GetTopic(), tp.GetPartition())
		case p.TopicID == "":
			// Nothing tiered for this topic yet.
		default:
			m, err := s.reader.Manifest(ctx, p, true)
			if err != nil {
				st.Error = s.detail("manifest", err)
			} else {
				st = stateOf(p, m)
			}
		}
		out.Partitions = append(out.Partitions, st)
	}
	return connect.NewResponse(out), nil
}

func (s *Service) FetchTiered(ctx context.Context, req *connect.Request[tieringv1.FetchTieredRequest]) (*connect.Response[tieringv1.FetchTieredResponse], error) {
	m := req.Msg
	if m.GetMaxBytes() < 0 || m.GetFetchOffset() < 0 {
		return nil, apierr.Error(errDetail(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "negative fetch offset or max bytes"))
	}
	p, known, err := s.partition(ctx, m.GetTopic(), m.GetPartition())
	if err != nil {
		return nil, apierr.Error(s.detail("resolve topic", err))
	}
	if !known {
		return nil, apierr.Error(notFound(m.GetTopic(), m.GetPartition()))
	}
	if p.TopicID == "" {
		return nil, apierr.Error(s.detail("fetch", &reader.OutOfRangeError{Offset: m.GetFetchOffset(), LogStart: -1, TieredEnd: -1}))
	}
	maxBytes := int(m.GetMaxBytes())
	if maxBytes == 0 {
		maxBytes = defaultFetchMaxBytes
	}
	read := s.reader.Read
	if m.GetReadCommitted() {
		read = s.reader.ReadCommitted
	}
	res, err := read(ctx, p, m.GetFetchOffset(), maxBytes)
	if err != nil {
		return nil, apierr.Error(s.detail("fetch", err))
	}
	out := &tieringv1.FetchTieredResponse{Records: res.Records, LogStartOffset: res.LogStart, TieredEndOffset: res.TieredEnd,
		AbortedComplete: res.AbortedComplete, TxnIndexKnown: res.TxnIndexKnown}
	for _, t := range res.Aborted {
		out.AbortedTransactions = append(out.AbortedTransactions, &tieringv1.AbortedTransaction{ProducerId: t.ProducerID, FirstOffset: t.FirstOffset})
	}
	return connect.NewResponse(out), nil
}

func (s *Service) OffsetForTimestamp(ctx context.Context, req *connect.Request[tieringv1.OffsetForTimestampRequest]) (*connect.Response[tieringv1.OffsetForTimestampResponse], error) {
	m := req.Msg
	p, known, err := s.partition(ctx, m.GetTopic(), m.GetPartition())
	if err != nil {
		return nil, apierr.Error(s.detail("resolve topic", err))
	}
	if !known {
		return nil, apierr.Error(notFound(m.GetTopic(), m.GetPartition()))
	}
	out := &tieringv1.OffsetForTimestampResponse{Offset: -1, TimestampMs: -1, LeaderEpoch: -1, LogStartOffset: -1, TieredEndOffset: -1}
	if p.TopicID == "" {
		return connect.NewResponse(out), nil // nothing tiered
	}
	res, err := s.reader.OffsetForTimestamp(ctx, p, m.GetTimestampMs())
	if err != nil {
		return nil, apierr.Error(s.detail("offset for timestamp", err))
	}
	out.Offset, out.TimestampMs, out.LeaderEpoch = res.Offset, res.Timestamp, res.LeaderEpoch
	out.LogStartOffset, out.TieredEndOffset = res.LogStart, res.TieredEnd
	return connect.NewResponse(out), nil
}

func (s *Service) ListSegments(ctx context.Context, req *connect.Request[tieringv1.ListSegmentsRequest]) (*connect.Response[tieringv1.ListSegmentsResponse], error) {
	m := req.Msg
	start := 0
	if t := m.GetPageToken(); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 {
			return nil, apierr.Error(errDetail(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "bad page token"))
		}
		start = n
	}
	size := int(m.GetPageSize())
	if size <= 0 {
		size = defaultPageSize
	}
	p, known, err := s.partition(ctx, m.GetTopic(), m.GetPartition())
	if err != nil {
		return nil, apierr.Error(s.detail("resolve topic", err))
	}
	if !known {
		return nil, apierr.Error(notFound(m.GetTopic(), m.GetPartition()))
	}
	out := &tieringv1.ListSegmentsResponse{}
	if p.TopicID == "" {
		return connect.NewResponse(out), nil
	}
	mf, err := s.reader.Manifest(ctx, p, true)
	if err != nil {
		return nil, apierr.Error(s.detail("manifest", err))
	}
	var all []*tieringv1.SegmentEntry
	for _, e := range mf.GetSegments() {
		if e.GetLastOffset() >= m.GetStartOffset() {
			all = append(all, e)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].GetBaseOffset() < all[j].GetBaseOffset() })
	out.ManifestVersion = mf.GetVersion()
	if start < len(all) {
		end := min(start+size, len(all))
		out.Segments = all[start:end]
		if end < len(all) {
			out.NextPageToken = strconv.Itoa(end)
		}
	}
	return connect.NewResponse(out), nil
}

var _ objstore.Bucket = (*objstore.Faulty)(nil)
