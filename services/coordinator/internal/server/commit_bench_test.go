package server

import (
	"testing"
)

// BenchmarkOffsetCommit is one member's OffsetCommit of one partition
// through the handler, on each offsets database: the commit hot path
// (group lock, epoch checks in memory, one database transaction).
func BenchmarkOffsetCommit(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			c := startTestCoordinator(b, openStore(b, kind), map[string]int32{"orders": 1})
			e := heartbeat(b, c, "a", 0).GetMemberEpoch()
			heartbeat(b, c, "a", e, 0)
			b.ResetTimer()
			for i := range b.N {
				if d := commit(b, c, "a", e, 0, 0, int64(i)); d != nil {
					b.Fatal(d)
				}
			}
		})
	}
}
