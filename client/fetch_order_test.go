package client

import (
	"bytes"
	"testing"
)

// TestConsumerFetchTurnsPartitions: a storage node fills a fetch's
// max bytes in request order and lets only the first partition with
// records go over it (KIP-74), so the consumer asks first for the
// partitions that had records longest ago: with fetches too small for
// more than one batch, every lagging partition is read from within the
// first rounds, not one partition to its end before the next.
func TestConsumerFetchTurnsPartitions(t *testing.T) {
	fc := newFake(t, 1, "t", 3)
	p := newProducer(t, fc, Linger(0), ManualPartitioning())
	value := bytes.Repeat([]byte("v"), 1000)
	for range 8 {
		for part := range int32(3) {
			if err := p.ProduceSync(ctxT(t), &Record{Topic: "t", Partition: part, Value: value}); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := newConsumer(t, fc, FetchMaxBytes(100))
	c.Assign(map[string]map[int32]Offset{"t": {0: AtOffset(0), 1: AtOffset(0), 2: AtOffset(0)}})
	seen := map[int32]int{}
	for _, r := range pollN(t, c, 6) {
		seen[r.Partition]++
	}
	for part := range int32(3) {
		if seen[part] != 2 {
			t.Errorf("the first 6 records hold %d of partition %d, want 2 of each: %v", seen[part], part, seen)
		}
	}
}
