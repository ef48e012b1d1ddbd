package server

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// registerMetrics registers the controller's gauges, read at each scrape
// (docs/operations.md lists them):
//
//   - strata.controller.active: 1 on the active controller, 0 on the others;
//   - strata.controller.partitions.under_replicated and
//     strata.controller.partitions.offline: partitions whose ISR is smaller
//     than their replica set, and partitions with no leader, counted over the
//     cluster by the active controller only (so a sum over controllers is
//     the cluster's count);
//   - strata.controller.nodes.live: storage nodes holding a lease.
//
// Called once from Start; the callback reads etcd at most once a scrape.
func (c *Controller) registerMetrics() {
	meter := otel.Meter("github.com/strata-mq/strata/services/controller")
	active, err1 := meter.Int64ObservableGauge("strata.controller.active",
		metric.WithDescription("1 when this controller is the active one, else 0."))
	under, err2 := meter.Int64ObservableGauge("strata.controller.partitions.under_replicated", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions whose ISR is smaller than their replica set; reported by the active controller."))
	offline, err3 := meter.Int64ObservableGauge("strata.controller.partitions.offline", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions with no leader; reported by the active controller."))
	live, err4 := meter.Int64ObservableGauge("strata.controller.nodes.live", metric.WithUnit("{node}"),
		metric.WithDescription("Storage nodes holding a lease; reported by the active controller."))
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			c.log.Warn("controller metrics", slog.String("err", err.Error()))
			return
		}
	}
	_, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if !c.IsActive() {
			o.ObserveInt64(active, 0)
			return nil
		}
		o.ObserveInt64(active, 1)
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		m, err := c.store.Load(ctx)
		if err != nil {
			return err
		}
		var u, off int64
		for _, parts := range m.Partitions {
			for _, p := range parts {
				if p.GetLeaderId() < 0 {
					off++
				}
				if len(p.GetIsr()) < len(p.GetReplicas()) {
					u++
				}
			}
		}
		o.ObserveInt64(under, u)
		o.ObserveInt64(offline, off)
		o.ObserveInt64(live, int64(len(m.Live)))
		return nil
	}, active, under, offline, live)
	if err != nil {
		c.log.Warn("controller metrics", slog.String("err", err.Error()))
	}
}
