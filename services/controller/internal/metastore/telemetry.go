package metastore

import (
	"context"
	"slices"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
)

// The active controller's record of partition state changes, through the
// global providers lib/serve installs (no-ops in unit tests):
//
//   - strata.controller.leader.elections counts leader changes the
//     controller made (a dead or absent leader replaced, or a partition
//     going offline), per topic; each is also an event on a
//     strata.controller.elect span.
//   - strata.controller.isr.changes counts ISR shrinks and expands
//     (attribute change=shrink|expand), whether the controller made them
//     (a dead node removed) or a leader asked for them (AlterPartition);
//     each is also an event on the span of the change.
const instrumentation = "github.com/strata-mq/strata/services/controller/metastore"

var (
	tracer    = otel.Tracer(instrumentation)
	meter     = otel.Meter(instrumentation)
	elections = func() metric.Int64Counter {
		c, err := meter.Int64Counter("strata.controller.leader.elections", metric.WithUnit("{election}"),
			metric.WithDescription("Partition leader changes made by the active controller, per topic (unclean=true for an unclean election)."))
		if err != nil {
			panic(err)
		}
		return c
	}()
	isrChanges = func() metric.Int64Counter {
		c, err := meter.Int64Counter("strata.controller.isr.changes", metric.WithUnit("{change}"),
			metric.WithDescription("ISR shrinks and expands written by the controller, per topic and change (shrink or expand)."))
		if err != nil {
			panic(err)
		}
		return c
	}()
)

// partitionChanged records a partition's state change from prev to next
// that the reconcile loop wrote: an election (a new leader, or none) and
// ISR changes, each as an event on one short strata.controller.elect span
// (the loop runs under no request's trace).
func partitionChanged(ctx context.Context, topic string, idx int32, prev, next *commonv1.PartitionMetadata, unclean bool) {
	leaderChanged := prev.GetLeaderId() != next.GetLeaderId()
	if !leaderChanged && slices.Equal(prev.GetIsr(), next.GetIsr()) {
		return
	}
	ctx, span := tracer.Start(ctx, "strata.controller.elect", trace.WithAttributes(
		attribute.String("messaging.destination.name", topic),
		attribute.String("messaging.destination.partition.id", strconv.Itoa(int(idx)))))
	defer span.End()
	if leaderChanged {
		elections.Add(ctx, 1, metric.WithAttributes(attribute.String("topic", topic), attribute.Bool("unclean", unclean && !slices.Contains(prev.GetIsr(), next.GetLeaderId()))))
		span.AddEvent("leader elected", trace.WithAttributes(
			attribute.Int("strata.leader.previous", int(prev.GetLeaderId())), attribute.Int("strata.leader.new", int(next.GetLeaderId())),
			attribute.Int("strata.leader_epoch", int(next.GetLeaderEpoch())), attribute.IntSlice("strata.isr", int32s(next.GetIsr()))))
	}
	isrChanged(ctx, topic, idx, prev.GetIsr(), next.GetIsr())
}

// isrChanged counts an ISR change and adds it as an event to the span in
// ctx (AlterPartition's server span, or the reconcile loop's elect span).
func isrChanged(ctx context.Context, topic string, idx int32, prev, next []int32) {
	change := ""
	switch {
	case len(next) < len(prev):
		change = "shrink"
	case len(next) > len(prev):
		change = "expand"
	default:
		return
	}
	isrChanges.Add(ctx, 1, metric.WithAttributes(attribute.String("topic", topic), attribute.String("change", change)))
	trace.SpanFromContext(ctx).AddEvent("isr "+change, trace.WithAttributes(
		attribute.String("messaging.destination.name", topic), attribute.Int("strata.partition", int(idx)),
		attribute.IntSlice("strata.isr.previous", int32s(prev)), attribute.IntSlice("strata.isr", int32s(next))))
}

func int32s(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}
