package server

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
)

// The coordinator's spans and counters, through the global providers that
// lib/serve installs (no-ops in unit tests):
//
//	strata.coordinator.commit     the offsets database write of an OffsetCommit, under its RPC span
//	strata.coordinator.rebalance  a new group epoch (target assignment) computed by a heartbeat
//
// Heartbeats are long polls that are traced only under a sampled caller
// (lib/serve QuietProcedures), so a rebalance starts a trace of its own,
// linked to the heartbeat that caused it.
const instrumentation = "github.com/strata-mq/strata/services/coordinator"

var (
	tracer     = otel.Tracer(instrumentation)
	rebalances = func() metric.Int64Counter {
		c, err := otel.Meter(instrumentation).Int64Counter("strata.coordinator.rebalances", metric.WithUnit("{rebalance}"),
			metric.WithDescription("New group epochs (target assignments) computed, per group."))
		if err != nil {
			panic(err)
		}
		return c
	}()
)

// tracedCommit writes the offsets inside a strata.coordinator.commit span.
func (c *Coordinator) tracedCommit(ctx context.Context, og *owned, offs []offsetstore.Offset) error {
	ctx, span := tracer.Start(ctx, "strata.coordinator.commit", trace.WithAttributes(
		attribute.String("messaging.consumer.group.name", og.g.ID),
		attribute.Int("messaging.batch.message_count", len(offs))))
	err := c.store.CommitOffsets(ctx, og.fence, offs)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return err
}

// traceRebalance returns a function that, run when a heartbeat is done,
// records a strata.coordinator.rebalance span when the heartbeat moved
// the group to a new epoch (from epoch0). The caller holds og.mu.
func (c *Coordinator) traceRebalance(ctx context.Context, og *owned) func() {
	epoch0 := og.g.Epoch
	return func() {
		if og.g.Epoch == epoch0 {
			return
		}
		rebalances.Add(ctx, 1, metric.WithAttributes(attribute.String("group", og.g.ID)))
		parts := 0
		for _, tps := range og.g.Target {
			parts += len(tps)
		}
		_, span := tracer.Start(context.Background(), "strata.coordinator.rebalance",
			trace.WithLinks(trace.LinkFromContext(ctx)),
			trace.WithAttributes(
				attribute.String("messaging.consumer.group.name", og.g.ID),
				attribute.Int("strata.group.epoch", int(og.g.Epoch)),
				attribute.Int("strata.group.members", len(og.g.Members)),
				attribute.Int("strata.group.partitions", parts)))
		span.End()
	}
}
