package server

import (
	"testing"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// BenchmarkAckRoundTrip measures one producer's round trip to a leader on
// loopback, one 1 KiB batch at a time: acks=leader (the append) and
// acks=all at RF=3 (the append, the followers' parked Replicate woken by
// it, their appends, and the next Replicate that moves the high
// watermark). The difference is the replication wake-up path. Run with
// make bench, or: go test -run '^$' -bench AckRoundTrip ./services/storage/internal/server/
func BenchmarkAckRoundTrip(b *testing.B) {
	for _, tc := range []struct {
		name string
		acks commonv1.Acks
	}{{"acks=leader", commonv1.Acks_ACKS_LEADER}, {"acks=all", commonv1.Acks_ACKS_ALL}} {
		b.Run(tc.name, func(b *testing.B) {
			c := newClusterOf(b, 3, 10*time.Second, &testCluster{})
			c.createTopic("t", 3, 2)
			cl := c.storage(1)
			rec, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Value: make([]byte, 1024)}})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				// The leader stamps offsets into the request's bytes; each
				// call sends its own copy, as a client's request would.
				if _, err := produce(cl, "t", tc.acks, 1, append([]byte(nil), rec...), 10*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
