package server

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
)

// The tier applies retention.ms and retention.bytes only to a topic whose
// cleanup.policy includes delete: a compacted topic's tiered segments,
// years past a retention.ms of one second, stay. A topic whose policy
// changes to include delete while the tier holds its data loses them to
// the next round.
func TestTierRetentionByPolicy(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  map[string]string
		kept int // active entries after a round, of 3
	}{
		{"delete by time", map[string]string{"cleanup.policy": "delete", "retention.ms": "1000"}, 0},
		{"delete by size", map[string]string{"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "0"}, 0},
		{"compact", map[string]string{"cleanup.policy": "compact", "retention.ms": "1000", "retention.bytes": "0"}, 3},
		{"compact,delete", map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "1000"}, 0},
		{"delete, compact", map[string]string{"cleanup.policy": "delete, compact", "retention.ms": "-1", "retention.bytes": "0"}, 0},
		{"retention.ms Long.MAX_VALUE", map[string]string{"cleanup.policy": "delete", "retention.ms": "9223372036854775807"}, 3},
		{"retention.ms 18446744073710", map[string]string{"cleanup.policy": "delete", "retention.ms": "18446744073710"}, 3},
		{"retention.bytes Long.MAX_VALUE", map[string]string{"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "9223372036854775807"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			var off int64
			for range 3 {
				seg := segmentBytes(t, off, 10, 100, 1) // stamped in 2023
				if _, err := f.up.Upload(ctx, header(off, seg, 1), bytes.NewReader(seg)); err != nil {
					t.Fatal(err)
				}
				off += 30
			}
			ti := &topicInfo{ID: testTopicID, Partitions: 1, Configs: tc.cfg}
			tp := &topics{describe: func(context.Context) ([]*controllerv1.TopicDescription, error) { return nil, nil }, loaded: true, lastTry: time.Now(),
				byName: map[string]*topicInfo{testPart.Topic: ti}}
			ret := &retention{store: f.store, topics: tp, reader: f.rd, grace: time.Hour, logger: discardLogger(), now: time.Now}
			if err := ret.partition(ctx, testPart); err != nil {
				t.Fatal(err)
			}
			if got := len(manifest.Active(mustManifest(t, f))); got != tc.kept {
				t.Fatalf("%d tiered segments after retention, want %d", got, tc.kept)
			}
			if tc.kept == 0 || tc.cfg["cleanup.policy"] != "compact" {
				return
			}
			// The policy changes while the tier holds the data.
			ti.Configs = map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "1000"}
			if err := ret.partition(ctx, testPart); err != nil {
				t.Fatal(err)
			}
			if got := len(manifest.Active(mustManifest(t, f))); got != 0 {
				t.Fatalf("%d tiered segments after the policy became compact,delete, want 0", got)
			}
		})
	}
}

// The compactor's options follow cleanup.policy as Kafka parses the list,
// and delete.retention.ms saturates instead of wrapping into a negative
// Duration that would drop every tombstone at once.
func TestCompactionOptions(t *testing.T) {
	for _, tc := range []struct {
		cfg     map[string]string
		compact bool
		tomb    time.Duration
	}{
		{map[string]string{"cleanup.policy": "delete"}, false, time.Hour},
		{map[string]string{"cleanup.policy": "compact"}, true, time.Hour},
		{map[string]string{"cleanup.policy": "delete, compact"}, true, time.Hour},
		{map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "0"}, true, 0},
		{map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "60000"}, true, time.Minute},
		{map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "9223372036855"}, true, math.MaxInt64},
		{map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "9223372036854775807"}, true, math.MaxInt64},
	} {
		opts := compactionOptions(tc.cfg, time.Hour)
		if opts.Compact != tc.compact || opts.TombstoneRetention != tc.tomb {
			t.Errorf("compactionOptions(%v) = compact %v tombstones %v; want %v and %v", tc.cfg, opts.Compact, opts.TombstoneRetention, tc.compact, tc.tomb)
		}
	}
}
