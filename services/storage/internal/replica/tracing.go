package replica

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// Spans of the leader's produce path, recorded through the global tracer
// provider (lib/serve installs the process's). A produce request's spans
// are children of its Produce RPC span, so with a traced producer they sit
// in the record's trace:
//
//	strata.storage.append            validation done; idempotence check and the log append
//	strata.storage.replication.wait  acks=all: until the high watermark passes the batch
//
// Under an unsampled request each costs one small allocation.
var tracer = otel.Tracer("github.com/strata-mq/strata/services/storage/replica")

// spanAttrs are the attributes of a partition's spans, made once per
// replica rather than per request.
func spanAttrs(topic string, partition int32) trace.SpanStartOption {
	return trace.WithAttributes(
		attribute.String("messaging.system", "strata"),
		attribute.String("messaging.destination.name", topic),
		attribute.String("messaging.destination.partition.id", strconv.Itoa(int(partition))),
	)
}

// tracedAppend is appendAsLeader inside a strata.storage.append span.
func (r *Replica) tracedAppend(ctx context.Context, batches []byte, hdrs []recordbatch.Header, acks Acks, epoch int32) (ProduceResult, leadership, error) {
	ctx, span := tracer.Start(ctx, "strata.storage.append", r.spanAttrs)
	res, at, err := r.appendAsLeader(ctx, batches, hdrs, acks, epoch)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("messaging.batch.message_count", recordCount(hdrs)),
			attribute.Int("strata.batch.bytes", len(batches)), attribute.Int64("messaging.kafka.offset", res.BaseOffset),
			attribute.Bool("strata.duplicate", res.Duplicate), attribute.Int("strata.leader_epoch", int(at.epoch)))
		endSpan(span, err)
	}
	return res, at, err
}

// tracedWaitCommitted is waitCommitted inside a
// strata.storage.replication.wait span.
func (r *Replica) tracedWaitCommitted(ctx context.Context, last int64, at leadership, timeout time.Duration) error {
	ctx, span := tracer.Start(ctx, "strata.storage.replication.wait", r.spanAttrs,
		trace.WithAttributes(attribute.Int64("strata.last_offset", last)))
	err := r.waitCommitted(ctx, last, at, timeout)
	if span.IsRecording() {
		endSpan(span, err)
	}
	return err
}

func recordCount(hdrs []recordbatch.Header) int {
	n := 0
	for _, h := range hdrs {
		n += int(h.RecordCount)
	}
	return n
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
