package pgsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/lib/testwait"
)

// TestPausedMemberDoesNotBlockOthers: a member paused inside its
// transaction holds one partition's row. The new owner's Assign of that
// partition and another returns at once, the other partition is applied
// while the row is held, and once the server ends the paused session
// (IdleInTransactionTimeout) the new owner takes the partition over and
// applies it from where the paused member had committed.
func TestPausedMemberDoesNotBlockOthers(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	tp1 := client.TopicPartition{Topic: "orders", Partition: 1}
	paused := newSinkT(t, db, IdleInTransactionTimeout(time.Second))
	owner := newSinkT(t, db)
	if _, err := paused.Assign(ctx, 1, []client.TopicPartition{tp0, tp1}); err != nil {
		t.Fatal(err)
	}
	var pgot []*client.Record
	if _, err := paused.Apply(ctx, recs("orders", 0, 0, 1, 1), writeEffects("paused", &pgot)); err != nil {
		t.Fatal(err)
	}
	inFn, resume := make(chan struct{}), make(chan struct{})
	pausedErr := make(chan error, 1)
	go func() {
		w := writeEffects("paused", &pgot)
		_, err := paused.Apply(ctx, recs("orders", 0, 2, 4, 1), func(ctx context.Context, tx pgx.Tx, rs []*client.Record) error {
			if err := w(ctx, tx, rs); err != nil {
				return err
			}
			close(inFn)
			<-resume // paused, idle in its transaction, holding orders-0's row
			return nil
		})
		pausedErr <- err
	}()
	<-inFn
	var once sync.Once
	unpause := func() { once.Do(func() { close(resume) }) }
	t.Cleanup(unpause)

	assigned := make(chan error, 1)
	var start map[client.TopicPartition]int64
	go func() {
		var err error
		start, err = owner.Assign(ctx, 2, []client.TopicPartition{tp0, tp1})
		assigned <- err
	}()
	select {
	case err := <-assigned:
		if err != nil || start[tp0] != 2 {
			t.Fatalf("owner's Assign = %v, %v; want orders-0 from 2 (pending), orders-1 from the group's offset", start, err)
		}
	case <-time.After(30 * time.Second): // far longer than an Assign that does not wait takes
		t.Fatal("the owner's Assign waited for the paused member's row")
	}

	var got []*client.Record
	res, err := owner.Apply(ctx, append(recs("orders", 0, 2, 4, 2), recs("orders", 1, 0, 3, 2)...), writeEffects("owner", &got))
	if !errors.Is(err, ErrAssignPending) || errors.Is(err, client.ErrFenced) {
		t.Fatalf("owner's Apply while the row is held = %v; want ErrAssignPending for orders-0", err)
	}
	if !slices.Equal(res.Pending, []client.TopicPartition{tp0}) || res.Next[tp1] != 4 || len(res.Next) != 1 {
		t.Fatalf("pending %v, next %v; want [orders-0] pending and orders-1 applied to 4", res.Pending, res.Next)
	}

	// The server ends the paused session; its transaction rolls back.
	testwait.Until(t, 60*time.Second, "the owner to take orders-0 over", func() error {
		res, err := owner.Apply(ctx, recs("orders", 0, 2, 4, 2), writeEffects("owner", &got))
		if err != nil {
			return err
		}
		if res.Next[tp0] != 5 {
			return fmt.Errorf("orders-0 next %v", res.Next)
		}
		return nil
	})
	unpause()
	if err := <-pausedErr; err == nil {
		t.Fatal("the paused member's transaction committed after its session was ended")
	}
	if e, w := effects(t, db, tp0), append(want("paused", 0, 1), want("owner", 2, 4)...); !slices.Equal(e, w) {
		t.Fatalf("effects %v; want %v", e, w)
	}
}

// TestTransactionTimeouts: the sink's transactions run with its lock and
// idle timeouts, the defaults unless set, without changing the session's
// own settings.
func TestTransactionTimeouts(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		opts       []Opt
		lock, idle string
	}{
		{nil, "10s", "1min"},
		{[]Opt{LockTimeout(1500 * time.Millisecond), IdleInTransactionTimeout(0)}, "1500ms", "0"},
	} {
		s := newSinkT(t, db, tc.opts...)
		if _, err := s.Assign(ctx, 1, []client.TopicPartition{tp0}); err != nil {
			t.Fatal(err)
		}
		var lock, idle string
		_, err := s.Apply(ctx, recs("orders", 0, 0, 0, 1), func(ctx context.Context, tx pgx.Tx, _ []*client.Record) error {
			return tx.QueryRow(ctx, "SELECT current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout')").Scan(&lock, &idle)
		})
		if _, err2 := db.Exec(ctx, "TRUNCATE strata_sink_offsets"); err != nil || err2 != nil {
			t.Fatal(err, err2)
		}
		if lock != tc.lock || idle != tc.idle {
			t.Errorf("options %d: lock_timeout %q, idle_in_transaction_session_timeout %q; want %q, %q", len(tc.opts), lock, idle, tc.lock, tc.idle)
		}
	}
	for _, bad := range []Opt{LockTimeout(-time.Second), IdleInTransactionTimeout(time.Microsecond), Gaps(GapPolicy(9))} {
		if _, err := New(ctx, db, "g", bad); err == nil {
			t.Error("a bad option was accepted")
		}
	}
}

// TestStaleAssignDoesNotWedgeOwner: a member cut off from the coordinator
// runs Assign for a partition the coordinator has given to another
// member, bumping the generation under the rightful owner. The owner's
// next Apply is fenced; the owner, still holding the partition in the
// group, takes it again through the sink and applies its records, instead
// of leaving them out for good.
func TestStaleAssignDoesNotWedgeOwner(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	fc, _ := fakeGroup(t, 5, -1)
	c := newConsumerT(t, db, fc)
	rs := pollAll(t, ctx, c, 4)
	stale := newSinkT(t, db)
	if _, err := stale.Assign(ctx, 1, []client.TopicPartition{tp0}); err != nil {
		t.Fatal(err)
	}
	var got []*client.Record
	if _, err := c.Apply(ctx, rs, writeEffects("owner", &got)); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("the owner's Apply after the stale Assign = %v; want ErrFenced", err)
	}
	testwait.Until(t, 30*time.Second, "the owner to apply every record", func() error {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		rs, err := c.Poll(pctx)
		if err != nil {
			return err
		}
		if _, err := c.Apply(ctx, rs, writeEffects("owner", &got)); err != nil {
			return err
		}
		if e := effects(t, db, tp0); len(e) < 5 {
			return fmt.Errorf("effects %v", e)
		}
		return nil
	})
	if e, w := effects(t, db, tp0), want("owner", 0, 4); !slices.Equal(e, w) {
		t.Fatalf("effects %v; want %v", e, w)
	}
	// The stale member's Assign is fenced in turn: it wrote nothing.
	if _, err := stale.Apply(ctx, recs("orders", 0, 5, 5, 1), writeEffects("stale", &got)); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("the stale member's Apply = %v; want ErrFenced", err)
	}
}
