package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/tests/nemesis/checker"
	"github.com/strata-mq/strata/tests/nemesis/history"
)

// run is one nemesis run: the bed, the workload writing the history, and
// the schedule of faults.
type run struct {
	t          testing.TB
	bed        *bed
	rec        *history.Recorder
	topics     []string
	partitions int32
	seed       uint64
	path       string // the history file

	mu       sync.Mutex
	injected map[string]int // faults injected, by kind
	failed   []string       // faults that could not be injected or healed, in words
}

// step is one entry of a schedule: a fault held for hold, then healed,
// then gap before the next; with, when set, runs alongside it (a
// membership change under another fault).
type step struct {
	fault fault
	with  *fault
	hold  time.Duration
	gap   time.Duration
}

// shortSchedule runs every fault once, in order, and one membership
// change under a kill: what make test runs.
func shortSchedule() []step {
	var out []step
	for _, f := range faults {
		out = append(out, step{fault: f, hold: 4 * time.Second, gap: 2 * time.Second})
	}
	cancel := faultNamed("cancel-and-re-add")
	out = append(out, step{fault: faultNamed("kill-one"), with: &cancel, hold: 6 * time.Second, gap: 2 * time.Second})
	return out
}

// membership reports whether f changes the replicas or leaders on
// purpose (so that it can run under another fault).
func membership(f fault) bool {
	switch f.kind {
	case history.FaultMove, history.FaultCancelMove, history.FaultDrain, history.FaultPreferredElection:
		return true
	}
	return false
}

// randomStep draws the next step of a random schedule: any fault, held 2
// to 10 seconds, then 1 to 5 seconds of calm; a third of the time a
// membership change runs alongside.
func randomStep(rng *rand.Rand) step {
	s := step{
		fault: pick(rng, faults),
		hold:  time.Duration(2000+rng.IntN(8000)) * time.Millisecond,
		gap:   time.Duration(1000+rng.IntN(4000)) * time.Millisecond,
	}
	if !membership(s.fault) && rng.IntN(3) == 0 {
		var ms []fault
		for _, f := range faults {
			if membership(f) {
				ms = append(ms, f)
			}
		}
		w := pick(rng, ms)
		s.with = &w
	}
	return s
}

// inject runs f and records it in the history; it returns the heal, which
// records the fault's end.
func (r *run) inject(ctx context.Context, f fault, rng *rand.Rand) func(context.Context) {
	desc, heal, err := f.inject(ctx, r, rng)
	if err != nil {
		r.note(fmt.Sprintf("%s not injected: %v", f.name, err))
		return func(context.Context) {}
	}
	af := r.rec.StartFault(f.kind, desc)
	r.mu.Lock()
	r.injected[f.kind]++
	r.mu.Unlock()
	r.t.Logf("nemesis: %s (%s): %s", f.name, f.kind, desc)
	return func(ctx context.Context) {
		if heal != nil {
			if err := heal(ctx); err != nil {
				r.note(fmt.Sprintf("healing %s (%s): %v", f.name, desc, err))
			}
		}
		af.Stop("healed")
	}
}

// note records a fault the nemesis could not inject or heal. It is
// reported with the run's figures; a heal that fails leaves the bed
// unhealthy, which the final read then fails on.
func (r *run) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, s)
	r.t.Logf("nemesis: %s", s)
}

// nemesis runs the schedule steps (next returns false when it is over)
// until ctx ends, healing every fault it started.
func (r *run) nemesis(ctx context.Context, rng *rand.Rand, next func() (step, bool)) {
	for ctx.Err() == nil {
		s, ok := next()
		if !ok {
			return
		}
		heals := []func(context.Context){r.inject(ctx, s.fault, rng)}
		if s.with != nil {
			heals = append(heals, r.inject(ctx, *s.with, rng))
		}
		sleep(ctx, s.hold)
		hctx := context.WithoutCancel(ctx)
		for _, h := range slices.Backward(heals) {
			h(hctx)
		}
		r.waitHealthy(hctx, 90*time.Second)
		sleep(ctx, s.gap)
	}
}

// waitHealthy waits until every partition has a leader, up to timeout;
// the next fault starts either way (a partition still offline then is
// unavailability, which the checker measures, and the final read waits
// longer).
func (r *run) waitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		last = r.offline(ctx)
		if last == "" {
			return nil
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return fmt.Errorf("partitions without a leader after %v: %s", timeout, last)
		}
	}
}

// offline lists the partitions without a leader, or why it cannot tell;
// "" when every partition has one.
func (r *run) offline(ctx context.Context) string {
	var bad []string
	for _, t := range r.topics {
		d, err := r.bed.cluster.Describe(ctx, t)
		if err != nil {
			return err.Error()
		}
		for _, p := range d.GetPartitions() {
			if p.GetLeaderId() < 0 || slices.Contains(p.GetOfflineReplicas(), p.GetLeaderId()) {
				bad = append(bad, fmt.Sprintf("%s-%d", t, p.GetPartition()))
			}
		}
	}
	return strings.Join(bad, " ")
}

// runConfig is one run's schedule and length.
type runConfig struct {
	seed uint64
	// schedule, when set, is the whole schedule; otherwise random steps
	// run for duration.
	schedule []step
	duration time.Duration
	out      string // where the history is kept
}

// execute starts a bed, runs the workload under the nemesis, heals, reads
// everything back and checks the history. The test fails on any anomaly
// and on a bed that does not recover.
func execute(t *testing.T, cfg runConfig) checker.Result {
	t.Logf("nemesis: seed %d (replay with -nemesis.seed %d)", cfg.seed, cfg.seed)
	b := startBed(t, bedConfig{controllers: 3, storageNodes: 5, tmpfsNodes: 2, tmpfsBytes: 96 << 20})
	path := filepath.Join(outDir(t, cfg.out), fmt.Sprintf("history-%d-%s.jsonl", cfg.seed, time.Now().Format("20060102T150405")))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := &run{t: t, bed: b, rec: history.NewRecorder(f), partitions: 6, seed: cfg.seed, path: path, injected: map[string]int{}}
	t.Logf("nemesis: history in %s", path)

	ctx := context.Background()
	r.createTopics(ctx)
	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))
	wctx, stopWorkload := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range producers {
		prng := rand.New(rand.NewPCG(cfg.seed+uint64(i)+1, 7))
		wg.Go(func() { r.produce(wctx, i+1, prng) })
	}
	wg.Go(func() { r.consume(wctx) })
	for i := range groupMembers {
		wg.Go(func() { r.groupMember(wctx, i+1) })
	}

	// A calm start, the schedule, a calm end.
	sleep(ctx, 5*time.Second)
	nctx, stop := context.WithCancel(ctx)
	if cfg.schedule != nil {
		steps := slices.Clone(cfg.schedule)
		r.nemesis(nctx, rng, func() (step, bool) {
			if len(steps) == 0 {
				return step{}, false
			}
			s := steps[0]
			steps = steps[1:]
			return s, true
		})
	} else {
		deadline := time.Now().Add(cfg.duration)
		r.nemesis(nctx, rng, func() (step, bool) { return randomStep(rng), time.Now().Before(deadline) })
	}
	stop()
	if err := r.bed.net.HealAll(ctx); err != nil {
		r.note(fmt.Sprintf("healing the network: %v", err))
	}
	if err := r.waitHealthy(ctx, 3*time.Minute); err != nil {
		t.Errorf("nemesis: the cluster did not recover: %v", err)
	}
	sleep(ctx, 5*time.Second)
	stopWorkload()
	wg.Wait()

	fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := r.finalRead(fctx); err != nil {
		t.Errorf("nemesis: final read: %v", err)
	}
	if err := r.rec.Err(); err != nil {
		t.Fatalf("nemesis: writing the history: %v", err)
	}
	res := checker.Check(r.rec.Events(), checker.Options{UnavailableAfter: 2 * time.Second})
	r.report(res)
	if !res.Ok() {
		t.Errorf("nemesis: %d anomalies (seed %d, history %s):\n%s", res.Anomalies(), cfg.seed, path, res)
	}
	return res
}

// createTopics creates the workload's topics: a plain one, one tiered to
// the object store with little kept locally (moves copy from a log start
// above 0, reads go to the tier), and a quiet one that gets a write every
// few seconds per partition, where a fault may find a replica's state
// unchanged since its last fetch.
func (r *run) createTopics(ctx context.Context) {
	r.topics = []string{"plain", "tiered", quietTopic}
	for _, name := range []string{"plain", quietTopic} {
		r.bed.cluster.CreateTopic(ctx, name, r.partitions, 3, map[string]string{
			"min.insync.replicas": "2", "segment.bytes": "65536",
		})
	}
	r.bed.cluster.CreateTopic(ctx, "tiered", r.partitions, 3, map[string]string{
		"min.insync.replicas": "2", "segment.bytes": "65536",
		"remote.storage.enable": "true", "local.retention.bytes": "131072",
	})
	for _, t := range r.topics {
		r.bed.cluster.WaitFullISR(ctx, t, r.partitions)
	}
}

// report logs the run's figures: operations, faults injected by kind,
// anomalies by kind and the longest unavailability per fault kind.
func (r *run) report(res checker.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kinds := make([]string, 0, len(r.injected))
	for k := range r.injected {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "nemesis: seed %d, history %s\nfaults injected:", r.seed, r.path)
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s=%d", k, r.injected[k])
	}
	if len(r.failed) > 0 {
		fmt.Fprintf(&b, "\nfaults not injected or healed (%d): %s", len(r.failed), strings.Join(r.failed, "; "))
	}
	fmt.Fprintf(&b, "\n%s", res)
	r.t.Log(b.String())
}
