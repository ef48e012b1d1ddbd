package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/testwait"
)

// TestRecordsCarryTopicID: consumed records carry their topic's id, and a
// consumer reading on through a topic deleted and created again under the
// same name (its position now outside the new, shorter log) refreshes its
// metadata before it reads on, so the new log's records carry the new id.
// LogStartOffset reports where the log starts.
func TestRecordsCarryTopicID(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	p := newProducer(t, fc, Linger(0))
	ctx := ctxT(t)
	for range 10 {
		if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("old")}); err != nil {
			t.Fatal(err)
		}
	}
	c := newConsumer(t, fc)
	c.Assign(map[string]map[int32]Offset{"t": {0: StartOffset()}})
	old := pollN(t, c, 10)
	oldID := old[0].TopicID
	if oldID == "" || old[9].TopicID != oldID {
		t.Fatalf("records of the first topic carry ids %q..%q; want its id on each", oldID, old[9].TopicID)
	}
	fc.DeleteRecordsBefore("t", 0, 4)
	for range 2 {
		if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("old")}); err != nil {
			t.Fatal(err)
		}
	}
	pollN(t, c, 2)
	if lso, ok := c.LogStartOffset("t", 0); !ok || lso != 4 {
		t.Fatalf("LogStartOffset = %d, %v; want 4", lso, ok)
	}

	fc.DeleteTopic("t")
	if err := fc.CreateTopic("t", 1, 1); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("new")}); err != nil {
			t.Fatal(err)
		}
	}
	// The consumer's position, 12, is past the new log's end: it moves to
	// the end (3) and reads what comes next. Its first metadata refreshes
	// fail: it must not read on until one succeeds, or the records it
	// reads next would carry the old id.
	f := fc.AddFault(&fakecluster.Fault{Method: "Metadata", Partition: -1, Code: connect.CodeUnavailable, Count: 2})
	c.Assign(map[string]map[int32]Offset{"t": {0: AtOffset(12)}})
	testwait.Until(t, 20*time.Second, "the position to move to the new log's end", func() error {
		pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if rs, err := c.Poll(pctx); len(rs) > 0 {
			return fmt.Errorf("records %d.. returned from the new log's end: %v", rs[0].Offset, err)
		}
		if pos, ok := c.Position("t", 0); !ok || pos != 3 {
			return fmt.Errorf("position %d, %v", pos, ok)
		}
		return nil
	})
	if n := fc.Fired(f); n != 2 {
		t.Fatalf("the failing metadata refreshes fired %d times; want 2", n)
	}
	// Records take the topic id the consumer's metadata holds when they
	// are fetched (a fetch answer carries none).
	if k := c.cl.known("t"); k == nil || k.id == oldID {
		t.Fatalf("the position moved while the consumer's metadata still names the old topic id %q", oldID)
	}
	for range 2 {
		if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("new")}); err != nil {
			t.Fatal(err)
		}
	}
	got := pollN(t, c, 2)
	if got[0].Offset != 3 || got[0].TopicID == oldID || got[0].TopicID == "" {
		t.Fatalf("first record after the recreation: offset %d, topic id %q; want offset 3 and a new id (the old was %q)", got[0].Offset, got[0].TopicID, oldID)
	}
}
