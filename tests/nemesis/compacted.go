package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/strata-mq/strata/client"
)

// The compacted part of the workload: one idempotent acks=all producer
// overwrites a small key space of a compacted topic, deleting a key now
// and then, while the storage nodes' log cleaner removes what newer
// records shadow and, once delete.retention.ms has passed, the
// tombstones. The checker judges the topic by key (checker/compacted.go):
// the final read must show each key's newest acknowledged write, and no
// deleted key may come back once its tombstone is gone.

const (
	compactedTopic      = "compacted"
	compactedPartitions = 3
	// compactedKeys is the key space: small, so that every key is
	// overwritten every second or two and the cleaner has plenty to
	// remove.
	compactedKeys = 64
	// compactedInterval paces the producer (pacing: how many operations a
	// run records, not what is judged).
	compactedInterval = 25 * time.Millisecond
	// One send in deleteEvery, on average, is a tombstone.
	deleteEvery = 8
	// The first retiredKeys keys deleted after at least retireAfter
	// values are never written again, so their tombstones expire and are
	// removed early in a run, and the final read must show none of them
	// (nor any of their older values). Other deleted keys are written
	// again soon, mostly before their tombstones expire.
	retiredKeys = 8
	retireAfter = 2
)

// compactedConfigs are the compacted topic's configs: small segments that
// roll every second, so that there is always a sealed dirty segment; a
// dirty ratio low enough that any one asks for a pass; no compaction lag;
// tombstones kept one second past their first cleaning.
func compactedConfigs() map[string]string {
	return map[string]string{
		"cleanup.policy":            "compact",
		"min.insync.replicas":       "2",
		"segment.bytes":             "16384",
		"segment.ms":                "1000",
		"min.cleanable.dirty.ratio": "0.01",
		"min.compaction.lag.ms":     "0",
		"delete.retention.ms":       "1000",
	}
}

// produceCompacted runs the compacted topic's producer until ctx ends,
// then waits for its records' outcomes (up to the delivery timeout) and
// closes it. It is the only writer of the topic, so each key's sends
// land in the order it made them.
func (r *run) produceCompacted(ctx context.Context, rng *rand.Rand) {
	const name = "compacted-producer"
	p, err := client.NewProducer(r.bed.group.Gateway.URL, client.DeliveryTimeout(30*time.Second), client.Linger(2*time.Millisecond))
	if err != nil {
		r.t.Errorf("nemesis: %s: %v", name, err)
		return
	}
	defer p.Close()
	s := r.newSender(ctx, p, name, inFlight)
	live := make([]int, compactedKeys) // the keys still written
	for i := range live {
		live[i] = i
	}
	values := make([]int, compactedKeys) // values sent, by key
	retired := 0
	for n := 0; sleep(ctx, compactedInterval); n++ {
		i := rng.IntN(len(live))
		k := live[i]
		tombstone := rng.IntN(deleteEvery) == 0
		if !s.sendKey(ctx, compactedTopic, fmt.Sprintf("k%d", k), n, tombstone) {
			break
		}
		switch {
		case !tombstone:
			values[k]++
		case values[k] >= retireAfter && retired < retiredKeys:
			live = slices.Delete(live, i, i+1)
			retired++
		}
	}
	s.wait()
}
