package server

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// A storage node's metrics and spans, through the global providers that
// lib/serve installs (no-ops in unit tests). docs/operations.md lists the
// metrics with their meanings. Attributes: topic and partition only, so a
// node has a bounded number of series per partition it hosts.
const instrumentation = "github.com/strata-mq/strata/services/storage"

var (
	tracer = otel.Tracer(instrumentation)
	meter  = otel.Meter(instrumentation)

	producedBytes   = mustCounter("strata.storage.produced.bytes", "By", "Record batch bytes appended by produce requests this node led, per topic.")
	producedRecords = mustCounter("strata.storage.produced.records", "{record}", "Records appended by produce requests this node led, per topic (duplicates of an idempotent retry not counted).")
	producedHeld    = mustCounter("strata.storage.produce.held", "{request}", "Produce requests, per topic, whose batch arrived ahead of its idempotent producer's sequence and waited for the batches before it (a producer with several batches in flight), then was appended.")
	holdRefused     = mustCounter("strata.storage.produce.hold_refused", "{request}", "Produce requests, per topic, whose batch arrived ahead of its idempotent producer's sequence and was refused at once (OUT_OF_ORDER_SEQUENCE) because the leader already held as many such requests of the partition or the producer as it may.")
	fetchedBytes    = mustCounter("strata.storage.fetched.bytes", "By", "Record batch bytes returned to consumers' fetches, per topic (replication not counted).")
	fetchedRecords  = mustCounter("strata.storage.fetched.records", "{record}", "Records in the batches returned to consumers' fetches, per topic.")
	cleanedBytes    = mustCounter("strata.storage.cleaner.cleaned", "By", "Segment bytes the log cleaner read in its passes over compacted partitions, per topic.")
	cleanerErrors   = mustCounter("strata.storage.cleaner.errors", "{error}", "Log cleaner passes that failed (a read or write error, a corrupt batch), per topic.")
	uploadDuration  = mustHistogram("strata.storage.tier.upload.duration", "s", "Time to upload one sealed segment to the tiering service, per topic.")
)

// produceStages is the strata.storage.produce.stage.duration histogram:
// where an acks=all produce's time goes at its leader (replica.Stage).
// Its buckets are finer than mustHistogram's, from 50µs, since its stages
// take milliseconds and their tail is what it is for.
var produceStages = func() metric.Float64Histogram {
	h, err := meter.Float64Histogram("strata.storage.produce.stage.duration", metric.WithUnit("s"),
		metric.WithDescription("Time an acks=all produce request spends in each stage at its leader, by stage: append (arrival until the batches are in the leader's log), "+
			"follower_fetch (appended until a follower's fetch carries the batch, per follower), follower_ack (appended until that follower acknowledges it), "+
			"commit (appended until the high watermark passes it), wakeup (the high watermark passing it until the request resumes), total (arrival until the answer)."),
		metric.WithExplicitBucketBoundaries(0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075,
			0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5))
	if err != nil {
		panic(err)
	}
	return h
}()

// stageAttrs holds each stage's attribute option, made once, indexed by
// stage.
var stageAttrs = func() [][]metric.RecordOption {
	var out [][]metric.RecordOption
	for _, s := range replica.Stages() {
		out = append(out, []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("stage", s.String())))})
	}
	return out
}()

// observeStage records one stage of one produce (replica.Options.ObserveStage).
func observeStage(s replica.Stage, d time.Duration) {
	produceStages.Record(context.Background(), d.Seconds(), stageAttrs[s]...)
}

func mustCounter(name, unit, desc string) metric.Int64Counter {
	c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil {
		panic(err) // only for an invalid name, fixed above
	}
	return c
}

func mustHistogram(name, unit, desc string) metric.Float64Histogram {
	h, err := meter.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	if err != nil {
		panic(err)
	}
	return h
}

// topicAttrs caches each topic's attribute set: building one (a sorted,
// hashed copy) per measurement was most of what counting a request cost.
// The options are kept as the slice Add takes, so passing them does not
// allocate a new variadic slice per call either.
var topicAttrs = struct {
	sync.RWMutex
	m map[string][]metric.AddOption
}{m: map[string][]metric.AddOption{}}

// maxTopicAttrs bounds the cache; past it the cache starts over, so topics
// created and deleted over a node's life do not pile up.
const maxTopicAttrs = 4096

func topicAttr(topic string) []metric.AddOption {
	topicAttrs.RLock()
	o, ok := topicAttrs.m[topic]
	topicAttrs.RUnlock()
	if ok {
		return o
	}
	o = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("topic", topic)))}
	topicAttrs.Lock()
	if len(topicAttrs.m) >= maxTopicAttrs {
		clear(topicAttrs.m)
	}
	topicAttrs.m[topic] = o
	topicAttrs.Unlock()
	return o
}

// exportTopic makes the counters that may stay at zero for a topic (a
// held batch is rare) show the topic's series from the first replica the
// node opens, so a scrape lists them with 0 rather than not at all.
func exportTopic(topic string) {
	producedHeld.Add(context.Background(), 0, topicAttr(topic)...)
	holdRefused.Add(context.Background(), 0, topicAttr(topic)...)
}

// countHoldRefused counts a produce refused because the hold was full.
func countHoldRefused(topic string) {
	holdRefused.Add(context.Background(), 1, topicAttr(topic)...)
}

// countProduced counts an acknowledged produce request.
func countProduced(topic string, res replica.ProduceResult, bytes int) {
	if res.Duplicate {
		return
	}
	if res.Held {
		producedHeld.Add(context.Background(), 1, topicAttr(topic)...)
	}
	addProduced(topic, res.LastOffset-res.BaseOffset+1, int64(bytes))
}

func addProduced(topic string, records, bytes int64) {
	ctx := context.Background()
	attrs := topicAttr(topic)
	producedBytes.Add(ctx, bytes, attrs...)
	producedRecords.Add(ctx, records, attrs...)
}

// produceCounts sums the acknowledged partitions of a multi-partition
// produce per topic, so the counters are added once per topic of the
// call. The first topic needs no map.
type produceCounts struct {
	topic          string
	records, bytes int64
	more           map[string][2]int64 // other topics: records, bytes
}

func (c *produceCounts) add(topic string, res replica.ProduceResult, bytes int) {
	if res.Duplicate {
		return
	}
	if res.Held {
		producedHeld.Add(context.Background(), 1, topicAttr(topic)...)
	}
	n := res.LastOffset - res.BaseOffset + 1
	switch {
	case c.topic == "" || c.topic == topic:
		c.topic = topic
		c.records += n
		c.bytes += int64(bytes)
	default:
		if c.more == nil {
			c.more = map[string][2]int64{}
		}
		v := c.more[topic]
		c.more[topic] = [2]int64{v[0] + n, v[1] + int64(bytes)}
	}
}

func (c *produceCounts) flush() {
	if c.topic != "" {
		addProduced(c.topic, c.records, c.bytes)
	}
	for topic, v := range c.more {
		addProduced(topic, v[0], v[1])
	}
}

// countFetched counts the batches a consumer's fetch returns: their bytes,
// and their records from each batch header (no payload is read).
func countFetched(topic string, batches []byte) {
	if len(batches) == 0 {
		return
	}
	records := int64(0)
	for b := batches; len(b) >= recordbatch.HeaderSize; {
		h, err := recordbatch.PeekHeader(b)
		if err != nil {
			break
		}
		records += int64(h.RecordCount)
		next := h.Size()
		if next <= 0 || next > len(b) {
			break
		}
		b = b[next:]
	}
	ctx := context.Background()
	attrs := topicAttr(topic)
	fetchedBytes.Add(ctx, int64(len(batches)), attrs...)
	fetchedRecords.Add(ctx, records, attrs...)
}

// registerMetrics registers the node's per-partition gauges, read at each
// scrape from the replicas it hosts. Called once from Start.
func (n *Node) registerMetrics() {
	logStart, err1 := meter.Int64ObservableGauge("strata.storage.log.start_offset", metric.WithUnit("{offset}"),
		metric.WithDescription("First offset the partition holds, tier included, per hosted replica."))
	logEnd, err2 := meter.Int64ObservableGauge("strata.storage.log.end_offset", metric.WithUnit("{offset}"),
		metric.WithDescription("Offset the next appended record gets (log end offset), per hosted replica."))
	hw, err3 := meter.Int64ObservableGauge("strata.storage.log.high_watermark", metric.WithUnit("{offset}"),
		metric.WithDescription("High watermark: records below it are committed and readable, per hosted replica."))
	under, err4 := meter.Int64ObservableGauge("strata.storage.partition.under_replicated", metric.WithUnit("{partition}"),
		metric.WithDescription("1 for a partition this node leads whose ISR is smaller than its replica set, else 0; leaders only."))
	isrSize, err5 := meter.Int64ObservableGauge("strata.storage.partition.isr.size", metric.WithUnit("{replica}"),
		metric.WithDescription("In-sync replicas of a partition this node leads, leader included; leaders only."))
	tierLag, err6 := meter.Int64ObservableGauge("strata.storage.tier.lag", metric.WithUnit("By"),
		metric.WithDescription("Bytes of a tiered partition's local log not yet uploaded to the tier (above the tiered end offset); leaders of tiered topics only."))
	dirty, err7 := meter.Float64ObservableGauge("strata.storage.cleaner.dirty_ratio", metric.WithUnit("1"),
		metric.WithDescription("Share of a compacted partition's cleanable bytes not yet cleaned, as the log cleaner last saw it (min.cleanable.dirty.ratio starts a pass), per hosted replica."))
	lastPass, err8 := meter.Int64ObservableGauge("strata.storage.cleaner.last_pass_timestamp", metric.WithUnit("s"),
		metric.WithDescription("Unix time of the log cleaner's last pass over a compacted partition, per hosted replica; absent until the first pass."))
	for _, err := range []error{err1, err2, err3, err4, err5, err6, err7, err8} {
		if err != nil {
			n.logger.Warn("storage metrics", "err", err)
			return
		}
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, r := range n.hostedReplicas() {
			v := r.View()
			attrs := metric.WithAttributes(attribute.String("topic", r.Topic), attribute.Int("partition", int(r.Partition)))
			o.ObserveInt64(logStart, n.effectiveLogStart(r, v.LogStart), attrs)
			o.ObserveInt64(logEnd, v.LEO, attrs)
			o.ObserveInt64(hw, v.HW, attrs)
			if v.Role != replica.RoleLeader {
				continue
			}
			u := int64(0)
			if len(v.State.ISR) < len(v.State.Replicas) {
				u = 1
			}
			o.ObserveInt64(under, u, attrs)
			o.ObserveInt64(isrSize, int64(len(v.State.ISR)), attrs)
			if lag, ok := n.tierLagBytes(r); ok {
				o.ObserveInt64(tierLag, lag, attrs)
			}
		}
		n.cleaner.mu.Lock()
		for k, s := range n.cleaner.last {
			attrs := metric.WithAttributes(attribute.String("topic", k.topic), attribute.Int("partition", int(k.partition)))
			o.ObserveFloat64(dirty, s.ratio, attrs)
			if !s.lastPass.IsZero() {
				o.ObserveInt64(lastPass, s.lastPass.Unix(), attrs)
			}
		}
		n.cleaner.mu.Unlock()
		return nil
	}, logStart, logEnd, hw, under, isrSize, tierLag, dirty, lastPass)
	if err != nil {
		n.logger.Warn("storage metrics", "err", err)
	}
}

// tierLagBytes is the size of the local segments a tiered partition still
// has to upload: those ending above the tiered end offset (the active
// segment included, which is uploaded once sealed).
func (n *Node) tierLagBytes(r *replica.Replica) (int64, bool) {
	if n.tier == nil {
		return 0, false
	}
	if _, ok := n.tieredTopic(r.Topic); !ok {
		return 0, false
	}
	end := int64(-1)
	if st, ok := n.tieredState(r.Topic, r.Partition); ok {
		end = st.end
	}
	segs := r.Log().Segments()
	lag := int64(0)
	for i, s := range segs {
		if i+1 < len(segs) && segs[i+1].BaseOffset <= end {
			continue // wholly tiered
		}
		lag += s.Size
	}
	return lag, true
}

// timedUpload is uploadSegment inside a strata.storage.tier.upload span,
// recording its duration.
func (n *Node) timedUpload(ctx context.Context, r *replica.Replica, epoch int32, s partlog.SegmentInfo, last int64) (*tieringv1.UploadSegmentResponse, error) {
	ctx, span := tracer.Start(ctx, "strata.storage.tier.upload", trace.WithAttributes(
		attribute.String("messaging.destination.name", r.Topic),
		attribute.String("messaging.destination.partition.id", strconv.Itoa(int(r.Partition))),
		attribute.Int64("strata.segment.base_offset", s.BaseOffset), attribute.Int64("strata.segment.bytes", s.Size)))
	start := time.Now()
	res, err := n.uploadSegment(ctx, r, epoch, s, last)
	if err == nil {
		uploadDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attribute.String("topic", r.Topic)))
	}
	endSpan(span, err)
	return res, err
}

// tracedReadTiered is readTiered inside a strata.storage.tier.read span
// when the read goes to the tier.
func (n *Node) tracedReadTiered(r *replica.Replica, offset int64, maxBytes int, committed bool, readErr error) (partlog.ReadResult, error, bool) {
	if n.tier == nil || !errors.Is(readErr, partlog.ErrOffsetOutOfRange) || offset >= r.Log().LogStartOffset() {
		return n.readTiered(r, offset, maxBytes, committed, readErr) // not a read for the tier
	}
	_, span := tracer.Start(n.ctx, "strata.storage.tier.read", trace.WithAttributes(
		attribute.String("messaging.destination.name", r.Topic),
		attribute.String("messaging.destination.partition.id", strconv.Itoa(int(r.Partition))),
		attribute.Int64("messaging.kafka.offset", offset)))
	res, err, handled := n.readTiered(r, offset, maxBytes, committed, readErr)
	span.SetAttributes(attribute.Int("strata.bytes", len(res.Batches)))
	endSpan(span, err)
	return res, err, handled
}

// untraced marks the context of a loop on a timer: it starts no traces
// (serve.Untraced).
func untraced(ctx context.Context) context.Context { return serve.Untraced(ctx) }

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
