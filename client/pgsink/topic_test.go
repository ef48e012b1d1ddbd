package pgsink

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/client"
)

// TestRecreatedTopicRefused: a topic deleted and created again under the
// same name is a new log starting at offset 0. A member reading it must
// not take the old topic's offsets row for its own (every record below the
// stored offset would be skipped as applied): Apply refuses with a clear
// error and applies nothing.
func TestRecreatedTopicRefused(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	fc, co := fakeGroup(t, 10, -1)
	first := newConsumerT(t, db, fc)
	var got []*client.Record
	if _, err := first.Apply(ctx, pollAll(t, ctx, first, 9), writeEffects("first", &got)); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var oldID string
	if err := db.QueryRow(ctx, "SELECT topic_id FROM strata_sink_offsets").Scan(&oldID); err != nil || oldID == "" {
		t.Fatalf("topic id kept with the offsets: %q, %v; want the topic's id", oldID, err)
	}

	fc.DeleteTopic("orders")
	if err := fc.CreateTopic("orders", 1, 1); err != nil {
		t.Fatal(err)
	}
	p, err := client.NewProducer(fc.GatewayURL(), client.RetryBackoff(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 15 {
		if err := p.ProduceSync(ctx, &client.Record{Topic: "orders", Value: []byte("new")}); err != nil {
			t.Fatal(err)
		}
	}

	next := newConsumerT(t, db, fc)
	rs := pollAll(t, ctx, next, 14)
	_, err = next.Apply(ctx, rs, writeEffects("next", &got))
	if !errors.Is(err, ErrTopicRecreated) || !strings.Contains(err.Error(), oldID) || !strings.Contains(err.Error(), "DELETE FROM strata_sink_offsets") {
		t.Fatalf("Apply of the new topic's records = %v; want ErrTopicRecreated naming the old id and what to do", err)
	}
	if e, w := effects(t, db, tp0), want("first", 0, 9); !slices.Equal(e, w) {
		t.Fatalf("effects %v; want %v (none of the new topic)", e, w)
	}

	// Once the rows are deleted and the group's offsets reset, as the
	// error says, the new topic starts afresh.
	if _, err := db.Exec(ctx, "DELETE FROM strata_sink_offsets WHERE group_id = 'billing' AND topic = 'orders'"); err != nil {
		t.Fatal(err)
	}
	co.mu.Lock()
	delete(co.committed, 0)
	co.mu.Unlock()
	again := newConsumerT(t, db, fc)
	rs = pollAll(t, ctx, again, 14)
	if _, err := again.Apply(context.Background(), rs, writeEffects("new", &got)); err != nil {
		t.Fatal(err)
	}
	var n, lo, hi int64
	if err := db.QueryRow(ctx, "SELECT count(*), min(record_offset), max(record_offset) FROM effects WHERE member = 'new'").Scan(&n, &lo, &hi); err != nil || n != 15 || lo != 0 || hi != 14 {
		t.Fatalf("the new topic's effects: %d records, offsets %d to %d (%v); want 15, 0 to 14", n, lo, hi, err)
	}
	var id string
	if err := db.QueryRow(ctx, "SELECT topic_id FROM strata_sink_offsets").Scan(&id); err != nil || id == "" || id == oldID {
		t.Fatalf("topic id after the new topic's first batch: %q, %v; want the new id", id, err)
	}
}
