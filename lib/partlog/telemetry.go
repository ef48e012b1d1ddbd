package partlog

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// fsyncDuration is the strata.storage.fsync.duration histogram: the time
// of each segment fsync on the flush path (group commit, interval flush,
// roll), through the global meter provider (a no-op until a process
// installs one, as lib/serve does).
var fsyncDuration = func() metric.Float64Histogram {
	h, err := otel.Meter("github.com/strata-mq/strata/lib/partlog").Float64Histogram("strata.storage.fsync.duration",
		metric.WithUnit("s"), metric.WithDescription("Time of one fsync of a partition log segment."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
	if err != nil {
		panic(err) // only for an invalid name, fixed above
	}
	return h
}()

// timedSync fsyncs f and records how long it took.
func timedSync(f interface{ Sync() error }) error {
	start := time.Now()
	err := f.Sync()
	fsyncDuration.Record(context.Background(), time.Since(start).Seconds())
	return err
}
