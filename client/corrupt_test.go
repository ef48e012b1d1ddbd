package client

import (
	"errors"
	"slices"
	"testing"

	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/recordbatch/batchtest"
)

// oldLogWithPoison fills partition 0 of topic "old" as a log written
// before leaders validated batches could: records a, b, c at offsets 0-2,
// a batch whose CRC matches but whose record count is wrong at offsets 3-6,
// then d, e at 7-8. The fake appends whatever passes its CRC.
func oldLogWithPoison(t *testing.T) *fakecluster.Cluster {
	t.Helper()
	fc := newFake(t, 1, "old", 1)
	p := newProducer(t, fc, Linger(0))
	ctx := ctxT(t)
	for _, v := range []string{"a", "b", "c"} {
		if err := p.ProduceSync(ctx, &Record{Topic: "old", Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	poison := batchtest.Poisons(t)[0] // record count above the records: 4 offsets
	if !poison.Undecodable {
		t.Fatalf("poison %q decodes", poison.Name)
	}
	if at := fc.AppendRaw("old", 0, poison.Batch); at != 3 {
		t.Fatalf("poison appended at %d, want 3", at)
	}
	for _, v := range []string{"d", "e"} {
		if err := p.ProduceSync(ctx, &Record{Topic: "old", Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	return fc
}

func values(recs []*Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Value))
	}
	return out
}

// A consumer that meets a batch it cannot decode returns the records before
// it, then fails with a *CorruptBatchError that names the partition and the
// offsets, again on every Poll until the position moves; naming the
// partition again at Next reads on.
func TestConsumerCorruptBatchError(t *testing.T) {
	fc := oldLogWithPoison(t)
	c := newConsumer(t, fc)
	c.Assign(map[string]map[int32]Offset{"old": {0: StartOffset()}})
	if got := values(pollN(t, c, 3)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("before the bad batch: %q", got)
	}
	for range 2 {
		recs, err := c.Poll(ctxT(t))
		var cbe *CorruptBatchError
		if !errors.As(err, &cbe) || len(recs) != 0 {
			t.Fatalf("Poll at the bad batch: %d records, %v; want a *CorruptBatchError", len(recs), err)
		}
		if cbe.Topic != "old" || cbe.Partition != 0 || cbe.Offset != 3 || cbe.Next != 7 || !errors.Is(err, recordbatch.ErrCorrupt) {
			t.Fatalf("error %+v", cbe)
		}
		if want := "client: topic old partition 0 offset 3: batch cannot be decoded (offsets 3 to 6): recordbatch: corrupt records"; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Fatalf("message %q, want it to start %q", err, want)
		}
		if pos, _ := c.Position("old", 0); pos != 3 {
			t.Fatalf("position %d after the error, want 3", pos)
		}
	}
	var cbe *CorruptBatchError
	_, err := c.Poll(ctxT(t))
	errors.As(err, &cbe)
	c.AddAssignment(map[string]map[int32]Offset{"old": {0: AtOffset(cbe.Next)}})
	if got := values(pollN(t, c, 2)); !slices.Equal(got, []string{"d", "e"}) {
		t.Fatalf("after moving past: %q", got)
	}
}

// With SkipCorruptBatches the consumer reads on past the batch and reports
// it.
func TestConsumerSkipsCorruptBatches(t *testing.T) {
	fc := oldLogWithPoison(t)
	var skipped []*CorruptBatchError
	c := newConsumer(t, fc, SkipCorruptBatches(func(e *CorruptBatchError) { skipped = append(skipped, e) }))
	c.Assign(map[string]map[int32]Offset{"old": {0: StartOffset()}})
	got := pollN(t, c, 5)
	if !slices.Equal(values(got), []string{"a", "b", "c", "d", "e"}) || got[3].Offset != 7 {
		t.Fatalf("read %q (d at %d)", values(got), got[3].Offset)
	}
	if len(skipped) != 1 || skipped[0].Offset != 3 || skipped[0].Next != 7 {
		t.Fatalf("reported %v, want the batch at 3-6 once", skipped)
	}
	// A nil report skips silently.
	c2 := newConsumer(t, fc, SkipCorruptBatches(nil))
	c2.Assign(map[string]map[int32]Offset{"old": {0: AtOffset(2)}})
	if got := values(pollN(t, c2, 3)); !slices.Equal(got, []string{"c", "d", "e"}) {
		t.Fatalf("read %q", got)
	}
}
