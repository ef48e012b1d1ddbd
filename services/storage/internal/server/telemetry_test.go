package server

import (
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// TestCountingARequestDoesNotAllocate: a Produce or Fetch is counted per
// topic with the topic's attribute set made once, not per request.
func TestCountingARequestDoesNotAllocate(t *testing.T) {
	b, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Value: []byte("v")}, {Value: []byte("w")}})
	if err != nil {
		t.Fatal(err)
	}
	batches := append(append([]byte(nil), b...), b...)
	res := replica.ProduceResult{BaseOffset: 10, LastOffset: 11}
	countProduced("t", res, len(batches)) // the first measurement makes the set
	countFetched("t", batches)
	if n := testing.AllocsPerRun(100, func() { countProduced("t", res, len(batches)) }); n != 0 {
		t.Errorf("countProduced: %v allocations per request, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { countFetched("t", batches) }); n != 0 {
		t.Errorf("countFetched: %v allocations per request, want 0", n)
	}
}
