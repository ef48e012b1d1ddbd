package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The stage breakdown (--breakdown): where an acks=all produce's time goes
// at its leader. Each storage node keeps the histogram
// strata.storage.produce.stage.duration by stage (append, follower_fetch,
// follower_ack, commit, wakeup, total; services/storage's replica.Stage);
// strata-load reads every node's /metrics before and after a produce run
// and reports the quantiles of the difference, summed over the nodes,
// beside the client's own acknowledgement latency. The quantiles are read
// from bucket boundaries (linear within a bucket), so they are as fine as
// the buckets: 50 µs to 2.5 s.

// stageMetric is the histogram's name in the Prometheus exposition.
const stageMetric = "strata_storage_produce_stage_duration_seconds_bucket"

// stageOrder is the order the stages print in, the order a batch meets
// them.
var stageOrder = []string{"append", "follower_fetch", "follower_ack", "commit", "wakeup", "total"}

// StageSummary is one stage's distribution over a run, in ms.
type StageSummary struct {
	Stage string  `json:"stage"`
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
}

// stageBuckets are cumulative bucket counts by stage, then by upper bound
// (seconds; +Inf as math.Inf(1)), summed over nodes.
type stageBuckets map[string]map[float64]float64

// stagesBefore reads the stage histograms before a run, when --breakdown
// asks for them; nil otherwise.
func (r *runner) stagesBefore(ctx context.Context) (stageBuckets, error) {
	if !r.breakdown {
		return nil, nil
	}
	b, err := r.scrapeStages(ctx)
	if err != nil {
		return nil, fmt.Errorf("--breakdown: %w", err)
	}
	return b, nil
}

// stagesSince is the breakdown of the run that began at before.
func (r *runner) stagesSince(ctx context.Context, before stageBuckets) ([]StageSummary, error) {
	if before == nil {
		return nil, nil
	}
	after, err := r.scrapeStages(ctx)
	if err != nil {
		return nil, fmt.Errorf("--breakdown: %w", err)
	}
	return stageSummaries(before, after), nil
}

// scrapeStages reads the stage histograms of every storage node the
// cluster.json lists.
func (r *runner) scrapeStages(ctx context.Context) (stageBuckets, error) {
	out := stageBuckets{}
	n := 0
	for _, p := range r.cpu.procs {
		if p.Service != "storage" || p.AdminAddress == "" {
			continue
		}
		url := fmt.Sprintf("%s://%s/metrics", r.adminScheme, p.AdminAddress)
		if err := get(ctx, r.admin, url, 10*time.Second, func(body io.Reader) error { return parseStageBuckets(body, out) }); err != nil {
			return nil, fmt.Errorf("storage node %d: %w", p.ID, err)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("the cluster.json lists no storage node with an admin address")
	}
	return out, nil
}

// parseStageBuckets adds the stage histogram's buckets in a Prometheus
// text exposition to into.
func parseStageBuckets(body io.Reader, into stageBuckets) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, stageMetric+"{") {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		labels, value := line[len(stageMetric)+1:end], strings.TrimSpace(line[end+1:])
		stage, le := label(labels, "stage"), label(labels, "le")
		if stage == "" || le == "" {
			continue
		}
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		if err != nil {
			return fmt.Errorf("bucket bound %q: %w", le, err)
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return fmt.Errorf("bucket count %q: %w", value, err)
		}
		if into[stage] == nil {
			into[stage] = map[float64]float64{}
		}
		into[stage][bound] += v
	}
	return sc.Err()
}

// label returns the value of name in a Prometheus label set (without its
// braces), "" if absent. The values here hold no `",`.
func label(labels, name string) string {
	for _, kv := range strings.Split(labels, `",`) {
		if k, v, ok := strings.Cut(kv, `="`); ok && k == name {
			return strings.TrimSuffix(v, `"`)
		}
	}
	return ""
}

// stageSummaries are the quantiles of after minus before, by stage in
// stageOrder; stages nothing was recorded in are left out.
func stageSummaries(before, after stageBuckets) []StageSummary {
	var out []StageSummary
	for _, stage := range stageOrder {
		a := after[stage]
		if a == nil {
			continue
		}
		bounds := make([]float64, 0, len(a))
		for b := range a {
			bounds = append(bounds, b)
		}
		slices.Sort(bounds)
		cum := make([]float64, len(bounds))
		for i, b := range bounds {
			cum[i] = a[b] - before[stage][b]
		}
		total := cum[len(cum)-1]
		if total <= 0 {
			continue
		}
		q := func(p float64) float64 { return quantile(bounds, cum, p) * 1000 }
		out = append(out, StageSummary{Stage: stage, Count: int64(total), P50: q(0.5), P99: q(0.99), P999: q(0.999)})
	}
	return out
}

// quantile reads the p quantile from cumulative counts at ascending upper
// bounds, interpolating linearly within the bucket it falls in (from 0
// for the first); in the +Inf bucket it answers the last finite bound.
func quantile(bounds, cum []float64, p float64) float64 {
	total := cum[len(cum)-1]
	rank := p * total
	lower, below := 0.0, 0.0
	for i, b := range bounds {
		if cum[i] >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			in := cum[i] - below
			if in <= 0 {
				return b
			}
			return lower + (b-lower)*(rank-below)/in
		}
		lower, below = b, cum[i]
	}
	return lower
}

// printBreakdown prints each produce run's stages beside its client-side
// acknowledgement latency.
func printBreakdown(w io.Writer, rep *Report) {
	for _, r := range rep.Results {
		if len(r.Stages) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nstage breakdown, %s %s (leaders' clocks, ms; stages from the batch's arrival or append, not additive):\n", r.Workload, r.modeLabel())
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "stage\tbatches\tp50\tp99\tp999\t")
		for _, s := range r.Stages {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t\n", s.Stage, s.Count, f2(s.P50), f2(s.P99), f2(s.P999))
		}
		if r.Ack != nil {
			fmt.Fprintf(tw, "client ack\t%d\t%s\t%s\t%s\t\n", r.Ack.Count, f2(r.Ack.P50), f2(r.Ack.P99), f2(r.Ack.P999))
		}
		tw.Flush()
	}
}
