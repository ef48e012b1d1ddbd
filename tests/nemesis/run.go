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
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mq/strata/tests/nemesis/checker"
	"github.com/strata-mq/strata/tests/nemesis/history"
)

// run is one nemesis run: the bed, the workload writing the history, and
// the schedule of faults.
type run struct {
	t      testing.TB
	bed    *bed
	rec    *history.Recorder
	topics []string
	// partitions is how many partitions each topic has, but the
	// compacted one (partitionsOf).
	partitions int32
	seed       uint64
	path       string // the history file

	// oversizing is set while the oversize fault lasts: the pipelined
	// producers then send records too large for oversizeTopic.
	oversizing atomic.Bool
	oversize   oversizeCounts
	// commitHook, when set, is run by the next transactional producer
	// whose commit is answered (atCommit, for the faults timed by one).
	commitHook atomic.Pointer[func(process, txnID string)]

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

// shortSchedule runs every fault once, in order, the oversize fault
// alongside answers-late (where it can make a batch be rebuilt), and one
// membership change under a kill: what make test runs.
func shortSchedule() []step {
	var out []step
	oversize := faultNamed("oversize")
	for _, f := range faults {
		switch f.name {
		case "oversize":
			continue
		case "answers-late":
			out = append(out, step{fault: f, with: &oversize, hold: 4 * time.Second, gap: 2 * time.Second})
			continue
		}
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

// answers reports whether f loses or delays a leader's answers.
func answers(f fault) bool {
	return f.kind == history.FaultAnswersLost || f.kind == history.FaultAnswersLate
}

// randomStep draws the next step of a random schedule: any fault, held 2
// to 10 seconds, then 1 to 5 seconds of calm; half the time a fault on
// answers has the oversize fault alongside, a third of the time another
// has a membership change.
func randomStep(rng *rand.Rand) step {
	s := step{
		fault: pick(rng, faults),
		hold:  time.Duration(2000+rng.IntN(8000)) * time.Millisecond,
		gap:   time.Duration(1000+rng.IntN(4000)) * time.Millisecond,
	}
	if answers(s.fault) && rng.IntN(2) == 0 {
		// The unrelated fatal error while batches wait for their answers.
		w := faultNamed("oversize")
		s.with = &w
		return s
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

// injectTimeout and healTimeout bound a fault's inject and heal. A call
// to a controller cut off from the others (ctl picks the first one
// running) waits for a quorum it does not have; unbounded, a membership
// change under split-controllers held the split, and the bed with it,
// for ever. A fault that runs out of time is noted as not injected, or
// not healed.
const (
	injectTimeout = 90 * time.Second
	healTimeout   = 2 * time.Minute
)

// inject runs f and records it in the history; it returns the heal, which
// records the fault's end.
func (r *run) inject(ctx context.Context, f fault, rng *rand.Rand) func(context.Context) {
	ictx, cancel := context.WithTimeout(ctx, injectTimeout)
	desc, heal, err := f.inject(ictx, r, rng)
	cancel()
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
			hctx, cancel := context.WithTimeout(ctx, healTimeout)
			defer cancel()
			if err := heal(hctx); err != nil {
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
	sk, err := r.startSink(ctx)
	if err != nil {
		t.Fatalf("nemesis: %v", err)
	}
	wctx, stopWorkload := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range producers {
		prng := rand.New(rand.NewPCG(cfg.seed+uint64(i)+1, 7))
		wg.Go(func() { r.produce(wctx, i+1, prng) })
	}
	for i := range pipelinedProducers {
		prng := rand.New(rand.NewPCG(cfg.seed+uint64(i)+101, 7))
		wg.Go(func() { r.producePipelined(wctx, i+1, prng) })
	}
	wg.Go(func() { r.produceCompacted(wctx, rand.New(rand.NewPCG(cfg.seed+201, 7))) })
	wg.Go(func() { r.consume(wctx) })
	for i := range groupMembers {
		wg.Go(func() { r.groupMember(wctx, i+1) })
	}
	for i := range txnProducers {
		prng := rand.New(rand.NewPCG(cfg.seed+uint64(i)+301, 7))
		wg.Go(func() { r.produceTxn(wctx, i+1, prng) })
	}
	wg.Go(func() { r.produceTxnInput(wctx, rand.New(rand.NewPCG(cfg.seed+401, 7))) })
	for i := range transformers {
		trng := rand.New(rand.NewPCG(cfg.seed+uint64(i)+501, 7))
		wg.Go(func() { r.transform(wctx, i+1, trng) })
	}
	wg.Go(func() { r.consumeCommitted(wctx) })

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
	ends, err := r.finalRead(fctx)
	if err != nil {
		t.Errorf("nemesis: final read: %v", err)
	}
	if err := r.finishSink(ctx, sk, ends); err != nil {
		t.Errorf("nemesis: %v", err)
	}
	if err := r.rec.Err(); err != nil {
		t.Fatalf("nemesis: writing the history: %v", err)
	}
	res := checker.Check(r.rec.Events(), checker.Options{UnavailableAfter: 2 * time.Second})
	r.report(res)
	if !res.Ok() {
		t.Errorf("nemesis: %d anomalies (seed %d, history %s):\n%s", res.Anomalies(), cfg.seed, path, res)
	}
	// Without records removed, and deleted keys gone with their
	// tombstones, the compaction rules judged nothing the cleaner did; a
	// key written by two producers has no order to judge it by.
	if c := res.Compaction; c.Removed == 0 || c.DeletedGone == 0 || c.Shared > 0 {
		t.Errorf("nemesis: the checker could not judge compaction of %s (seed %d, history %s): %v", compactedTopic, cfg.seed, path, c)
	}
	// Without commits and aborts of both kinds of transaction, the
	// transactional rules judged nothing.
	if tc := countTxns(r.rec.Events()); tc.committed == 0 || tc.aborted == 0 || r.transformsCommitted() == 0 {
		t.Errorf("nemesis: the checker could not judge transactions (seed %d, history %s): %d committed, %d aborted, %d transformations committed",
			cfg.seed, path, tc.committed, tc.aborted, r.transformsCommitted())
	}
	return res
}

// createTopics creates the workload's topics: a plain one, one tiered to
// the object store with little kept locally (moves copy from a log start
// above 0, reads go to the tier), a quiet one that gets a write every
// few seconds per partition, where a fault may find a replica's state
// unchanged since its last fetch, the pipelined producers' one, the
// compacted one (compacted.go), the transactional workload's three
// (txn.go), and the one the oversize fault's records are too large for. Each is noted in the history with its configs.
func (r *run) createTopics(ctx context.Context) {
	r.topics = []string{"plain", "tiered", quietTopic, pipelineTopic, compactedTopic, txnTopic, txnInTopic, txnOutTopic}
	for _, name := range []string{"plain", quietTopic, pipelineTopic, txnTopic, txnInTopic, txnOutTopic} {
		r.createTopic(ctx, name, r.partitions, map[string]string{
			"min.insync.replicas": "2", "segment.bytes": "65536",
		})
	}
	r.createTopic(ctx, "tiered", r.partitions, map[string]string{
		"min.insync.replicas": "2", "segment.bytes": "65536",
		"remote.storage.enable": "true", "local.retention.bytes": "131072",
	})
	r.createTopic(ctx, compactedTopic, compactedPartitions, compactedConfigs())
	// Written only by the oversize fault, with records it refuses; not
	// read, so not one of r.topics.
	r.createTopic(ctx, oversizeTopic, 1, map[string]string{
		"min.insync.replicas": "2", "max.message.bytes": fmt.Sprint(oversizeLimit),
	})
	for _, t := range r.topics {
		r.bed.cluster.WaitFullISR(ctx, t, r.partitionsOf(t))
	}
	r.bed.cluster.WaitFullISR(ctx, oversizeTopic, 1)
}

// createTopic creates a topic of three replicas and notes it in the
// history.
func (r *run) createTopic(ctx context.Context, name string, partitions int32, configs map[string]string) {
	r.bed.cluster.CreateTopic(ctx, name, partitions, 3, configs)
	r.rec.Note("setup", history.TopicOp(history.Topic{Name: name, Partitions: partitions, Configs: configs}))
}

// partitionsOf is how many partitions topic, one of r.topics, has.
func (r *run) partitionsOf(topic string) int32 {
	if topic == compactedTopic {
		return compactedPartitions
	}
	return r.partitions
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
	tc := countTxns(r.rec.Events())
	fmt.Fprintf(&b, "\ntransactions: %d committed (%d of them transformations), %d aborted, %d unknown",
		tc.committed, r.transformsCommitted(), tc.aborted, tc.unknown)
	if n := r.oversize.sent.Load(); n > 0 {
		fmt.Fprintf(&b, "\noversized records: %d sent, %d refused as too large, %d otherwise", n, r.oversize.refused.Load(), r.oversize.other.Load())
		if first := r.oversize.firstOther.Load(); first != nil {
			fmt.Fprintf(&b, " (first: %s)", *first)
		}
	}
	if len(r.failed) > 0 {
		fmt.Fprintf(&b, "\nfaults not injected or healed (%d): %s", len(r.failed), strings.Join(r.failed, "; "))
	}
	fmt.Fprintf(&b, "\n%s", res)
	r.t.Log(b.String())
}
