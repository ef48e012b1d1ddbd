package main

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// The breakdown reads the stage histogram out of a Prometheus exposition,
// sums the nodes, subtracts the scrape before the run and interpolates the
// quantiles within buckets.
func TestStageBreakdown(t *testing.T) {
	node := func(commitLow, commitHigh float64) string {
		return strings.Join([]string{
			`# TYPE strata_storage_produce_stage_duration_seconds histogram`,
			`strata_storage_produce_stage_duration_seconds_bucket{otel_scope_name="github.com/strata-mq/strata/services/storage",stage="commit",le="0.001"} ` + ftoa(commitLow),
			`strata_storage_produce_stage_duration_seconds_bucket{otel_scope_name="github.com/strata-mq/strata/services/storage",stage="commit",le="0.002"} ` + ftoa(commitHigh),
			`strata_storage_produce_stage_duration_seconds_bucket{otel_scope_name="github.com/strata-mq/strata/services/storage",stage="commit",le="+Inf"} ` + ftoa(commitHigh),
			`strata_storage_produce_stage_duration_seconds_count{stage="commit"} ` + ftoa(commitHigh),
			`strata_storage_fsync_duration_seconds_bucket{le="0.001"} 7`,
		}, "\n") + "\n"
	}
	before, after := stageBuckets{}, stageBuckets{}
	for _, n := range []string{node(10, 10), node(0, 0)} {
		if err := parseStageBuckets(strings.NewReader(n), before); err != nil {
			t.Fatal(err)
		}
	}
	// The run adds 50 commits under 1 ms on one node, 50 between 1 and 2 ms on the other.
	for _, n := range []string{node(60, 60), node(0, 50)} {
		if err := parseStageBuckets(strings.NewReader(n), after); err != nil {
			t.Fatal(err)
		}
	}
	got := stageSummaries(before, after)
	if len(got) != 1 || got[0].Stage != "commit" || got[0].Count != 100 {
		t.Fatalf("summaries %+v, want one of commit over 100 batches", got)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if s := got[0]; !near(s.P50, 1) || !near(s.P99, 1.98) || !near(s.P999, 1.998) {
		t.Errorf("p50 %v, p99 %v, p99.9 %v ms; want 1, 1.98, 1.998", s.P50, s.P99, s.P999)
	}
	if q := quantile([]float64{0.001, math.Inf(1)}, []float64{1, 3}, 0.9); q != 0.001 {
		t.Errorf("a quantile in the +Inf bucket is %v, want the last finite bound", q)
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
