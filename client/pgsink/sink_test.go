package pgsink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/lib/testwait"
)

// adminDSN is the server tests create their databases on:
// $STRATA_TEST_POSTGRES, as for the coordinator's tests, else the
// machine's server.
func adminDSN() string {
	if v := os.Getenv("STRATA_TEST_POSTGRES"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// newDB creates a fresh database, dropped when the test ends, and returns
// a pool on it. The test fails, never skips, without Postgres.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, adminDSN())
	if err != nil {
		t.Fatalf("Postgres is required for this test and is not reachable (STRATA_TEST_POSTGRES or 127.0.0.1:5432): %v", err)
	}
	defer admin.Close(context.Background())
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "strata_pgsink_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(adminDSN())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, adminDSN())
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	if _, err := pool.Exec(ctx, "CREATE TABLE effects (topic text, partition_index integer, record_offset bigint, member text)"); err != nil {
		t.Fatal(err)
	}
	return pool
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recs returns records of topic-partition at offsets from..to (inclusive)
// read under member epoch epoch.
func recs(topic string, partition int32, from, to int64, epoch int32) []*client.Record {
	var out []*client.Record
	for o := from; o <= to; o++ {
		out = append(out, &client.Record{Topic: topic, Partition: partition, Offset: o, MemberEpoch: epoch})
	}
	return out
}

// writeEffects is an ApplyFunc that inserts one effects row per record,
// naming member, and keeps what it was given in got.
func writeEffects(member string, got *[]*client.Record) ApplyFunc {
	return func(ctx context.Context, tx pgx.Tx, rs []*client.Record) error {
		*got = append(*got, rs...)
		for _, r := range rs {
			if _, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1, $2, $3, $4)", r.Topic, r.Partition, r.Offset, member); err != nil {
				return err
			}
		}
		return nil
	}
}

// effects returns the effects rows of tp as "offset/member", by offset.
func effects(t *testing.T, db *pgxpool.Pool, tp client.TopicPartition) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), "SELECT record_offset, member FROM effects WHERE topic = $1 AND partition_index = $2 ORDER BY record_offset, member", tp.Topic, tp.Partition)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var o int64
		var m string
		if err := rows.Scan(&o, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d/%s", o, m))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func want(member string, from, to int64) []string {
	var out []string
	for o := from; o <= to; o++ {
		out = append(out, fmt.Sprintf("%d/%s", o, member))
	}
	return out
}

func newSinkT(t *testing.T, db DB, opts ...Opt) *Sink {
	t.Helper()
	s, err := New(ctxT(t), db, "billing", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var tp0 = client.TopicPartition{Topic: "orders", Partition: 0}

// TestAssignStartsAtStoredOffset: a partition never applied has no start
// (the consumer falls back to the group's offset); once applied, the next
// member starts after the last applied record, and each assignment bumps
// the generation.
func TestAssignStartsAtStoredOffset(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	a := newSinkT(t, db)
	start, err := a.Assign(ctx, 3, []client.TopicPartition{tp0})
	if err != nil || len(start) != 0 {
		t.Fatalf("first Assign = %v, %v; want no start offset", start, err)
	}
	var got []*client.Record
	if _, err := a.Apply(ctx, recs("orders", 0, 0, 4, 3), writeEffects("a", &got)); err != nil {
		t.Fatal(err)
	}
	b := newSinkT(t, db)
	start, err = b.Assign(ctx, 5, []client.TopicPartition{tp0})
	if err != nil || start[tp0] != 5 {
		t.Fatalf("second member's Assign = %v, %v; want orders-0 at 5", start, err)
	}
	var gen int64
	if err := db.QueryRow(ctx, "SELECT generation FROM strata_sink_offsets WHERE group_id = 'billing' AND topic = 'orders' AND partition_index = 0").Scan(&gen); err != nil || gen != 2 {
		t.Fatalf("generation after two assignments = %d, %v; want 2", gen, err)
	}
}

// TestZombieTransactionRefused: once another member is assigned the
// partition, the old owner's transaction leaves it out (its writes are
// never made) and fails with ErrFenced; the new owner goes on from where
// the old one committed.
func TestZombieTransactionRefused(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	zombie, owner := newSinkT(t, db), newSinkT(t, db)
	var zgot, ogot []*client.Record
	if _, err := zombie.Assign(ctx, 3, []client.TopicPartition{tp0}); err != nil {
		t.Fatal(err)
	}
	if _, err := zombie.Apply(ctx, recs("orders", 0, 0, 2, 3), writeEffects("zombie", &zgot)); err != nil {
		t.Fatal(err)
	}
	start, err := owner.Assign(ctx, 4, []client.TopicPartition{tp0})
	if err != nil || start[tp0] != 3 {
		t.Fatalf("new owner's Assign = %v, %v; want orders-0 at 3", start, err)
	}

	zgot = nil
	res, err := zombie.Apply(ctx, recs("orders", 0, 3, 5, 3), writeEffects("zombie", &zgot))
	if !errors.Is(err, client.ErrFenced) || !strings.Contains(err.Error(), "orders-0: records left out: assigned to another member since (generation 2, this member's 1)") {
		t.Fatalf("zombie's Apply = %v; want ErrFenced naming the generations", err)
	}
	if len(zgot) != 0 || len(res.Applied) != 0 || !slices.Equal(res.Fenced, []client.TopicPartition{tp0}) {
		t.Fatalf("zombie's Apply gave fn %d records, applied %d, fenced %v; want none, none, [orders-0]", len(zgot), len(res.Applied), res.Fenced)
	}
	if _, err := owner.Apply(ctx, recs("orders", 0, 3, 5, 4), writeEffects("owner", &ogot)); err != nil {
		t.Fatal(err)
	}
	// The zombie has forgotten the partition: refused without a query.
	if _, err := zombie.Apply(ctx, recs("orders", 0, 6, 6, 3), writeEffects("zombie", &zgot)); !errors.Is(err, client.ErrFenced) ||
		!strings.Contains(err.Error(), "not assigned to this member") {
		t.Fatalf("zombie's next Apply = %v; want ErrFenced, not assigned", err)
	}
	if got, w := effects(t, db, tp0), append(want("zombie", 0, 2), want("owner", 3, 5)...); !slices.Equal(got, w) {
		t.Fatalf("effects %v; want %v", got, w)
	}
}

// TestTakeOverWaitsForTransactionInFlight: a new owner's assignment does
// not wait for the old owner's transaction holding the partition's row
// (the partition is pending); its first Apply waits for the row, takes
// the partition over, and goes on after what the old owner committed, so
// the old owner's last batch is neither lost nor applied twice.
func TestTakeOverWaitsForTransactionInFlight(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	old, next := newSinkT(t, db), newSinkT(t, db, LockTimeout(0))
	if _, err := old.Assign(ctx, 3, []client.TopicPartition{tp0}); err != nil {
		t.Fatal(err)
	}
	inFn, release := make(chan struct{}), make(chan struct{})
	applied := make(chan error, 1)
	go func() {
		var got []*client.Record
		w := writeEffects("old", &got)
		_, err := old.Apply(ctx, recs("orders", 0, 0, 9, 3), func(ctx context.Context, tx pgx.Tx, rs []*client.Record) error {
			close(inFn)
			<-release
			return w(ctx, tx, rs)
		})
		applied <- err
	}()
	<-inFn
	start, err := next.Assign(ctx, 4, []client.TopicPartition{tp0})
	if err != nil || len(start) != 0 {
		t.Fatalf("new owner's Assign = %v, %v; want no start offset yet (nothing committed), at once", start, err)
	}
	type result struct {
		res Result
		err error
	}
	done := make(chan result, 1)
	var got []*client.Record
	go func() {
		res, err := next.Apply(ctx, recs("orders", 0, 0, 12, 4), writeEffects("next", &got))
		done <- result{res, err}
	}()
	testwait.Until(t, 30*time.Second, "the new owner's Apply to wait on the row lock", func() error {
		var n int
		err := db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n)
		if err == nil && n == 0 {
			err = errors.New("no session waits on a lock")
		}
		return err
	})
	select {
	case r := <-done:
		t.Fatalf("Apply returned %+v, %v while the old owner's transaction held the row", r.res, r.err)
	default:
	}
	close(release)
	if err := <-applied; err != nil {
		t.Fatalf("old owner's Apply = %v; it held the row first, so it commits", err)
	}
	r := <-done
	if r.err != nil || r.res.Next[tp0] != 13 || r.res.Skipped != 10 {
		t.Fatalf("new owner's Apply = %v, next %v, skipped %d; want orders-0 at 13, 10 skipped", r.err, r.res.Next, r.res.Skipped)
	}
	if e, w := effects(t, db, tp0), append(want("old", 0, 9), want("next", 10, 12)...); !slices.Equal(e, w) {
		t.Fatalf("effects %v; want %v", e, w)
	}
}

// TestApplySkipsWhatWasApplied: records applied before, and records given
// twice, are left out, so applying a batch again after a commit whose
// outcome was unknown is safe; records come to fn by partition in offset
// order.
func TestApplySkipsWhatWasApplied(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	s := newSinkT(t, db)
	tp1 := client.TopicPartition{Topic: "orders", Partition: 1}
	if _, err := s.Assign(ctx, 2, []client.TopicPartition{tp0, tp1}); err != nil {
		t.Fatal(err)
	}
	var got []*client.Record
	if _, err := s.Apply(ctx, recs("orders", 0, 0, 4, 2), writeEffects("m", &got)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		batch   []*client.Record
		fn      []string // partition/offset given to fn
		skipped int
	}{
		{"the same batch again", recs("orders", 0, 0, 4, 2), nil, 5},
		{"overlapping", recs("orders", 0, 3, 6, 2), []string{"0/5", "0/6"}, 2},
		{"repeated and out of order, two partitions", append(append(recs("orders", 1, 2, 3, 2), recs("orders", 0, 7, 8, 2)...), recs("orders", 1, 0, 2, 2)...),
			[]string{"0/7", "0/8", "1/0", "1/1", "1/2", "1/3"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			res, err := s.Apply(ctx, tc.batch, writeEffects("m", &got))
			if err != nil {
				t.Fatal(err)
			}
			var fn []string
			for _, r := range got {
				fn = append(fn, fmt.Sprintf("%d/%d", r.Partition, r.Offset))
			}
			if !slices.Equal(fn, tc.fn) || res.Skipped != tc.skipped {
				t.Fatalf("fn got %v, skipped %d; want %v, %d", fn, res.Skipped, tc.fn, tc.skipped)
			}
		})
	}
	if got, w := effects(t, db, tp0), want("m", 0, 8); !slices.Equal(got, w) {
		t.Fatalf("effects %v; want %v", got, w)
	}
}

// TestRecordsOfAnEarlierAssignmentLeftOut: a member that lost a partition
// and got it back cannot apply records it read before: they are behind
// where the new assignment started. Records of the new assignment in the
// same batch are applied.
func TestRecordsOfAnEarlierAssignmentLeftOut(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	s := newSinkT(t, db)
	if _, err := s.Assign(ctx, 3, []client.TopicPartition{tp0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Assign(ctx, 6, []client.TopicPartition{tp0}); err != nil {
		t.Fatal(err)
	}
	var got []*client.Record
	res, err := s.Apply(ctx, append(recs("orders", 0, 0, 3, 3), recs("orders", 0, 0, 1, 6)...), writeEffects("m", &got))
	if !errors.Is(err, client.ErrFenced) || !strings.Contains(err.Error(), "read under member epoch 3, before the partition was assigned again at epoch 6") {
		t.Fatalf("Apply = %v; want ErrFenced for the records of epoch 3", err)
	}
	if len(res.Applied) != 2 || res.Next[tp0] != 2 {
		t.Fatalf("applied %d records, next %v; want 2, orders-0 at 2", len(res.Applied), res.Next)
	}
}

// TestFailedApplyChangesNothing: an error from fn rolls back its writes and
// the offsets; the same batch applies afterwards.
func TestFailedApplyChangesNothing(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	s := newSinkT(t, db)
	if _, err := s.Assign(ctx, 1, []client.TopicPartition{tp0}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("constraint violated")
	var got []*client.Record
	w := writeEffects("m", &got)
	_, err := s.Apply(ctx, recs("orders", 0, 0, 4, 1), func(ctx context.Context, tx pgx.Tx, rs []*client.Record) error {
		if err := w(ctx, tx, rs); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || errors.Is(err, client.ErrFenced) {
		t.Fatalf("Apply = %v; want fn's error, not a fence", err)
	}
	if e := effects(t, db, tp0); len(e) != 0 {
		t.Fatalf("effects of a failed Apply were kept: %v", e)
	}
	res, err := s.Apply(ctx, recs("orders", 0, 0, 4, 1), w)
	if err != nil || res.Next[tp0] != 5 {
		t.Fatalf("Apply again = %v, next %v; want orders-0 at 5", err, res.Next)
	}
}

// TestFencedPartitionLeftOutOthersApplied: one transaction, two
// partitions, one taken by another member: the other is applied.
func TestFencedPartitionLeftOutOthersApplied(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	a, b := newSinkT(t, db), newSinkT(t, db)
	tp1 := client.TopicPartition{Topic: "orders", Partition: 1}
	if _, err := a.Assign(ctx, 2, []client.TopicPartition{tp0, tp1}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Assign(ctx, 3, []client.TopicPartition{tp1}); err != nil {
		t.Fatal(err)
	}
	var got []*client.Record
	res, err := a.Apply(ctx, append(recs("orders", 0, 0, 1, 2), recs("orders", 1, 0, 1, 2)...), writeEffects("a", &got))
	if !errors.Is(err, client.ErrFenced) || !strings.Contains(err.Error(), "orders-1") || strings.Contains(err.Error(), "orders-0") {
		t.Fatalf("Apply = %v; want ErrFenced for orders-1 only", err)
	}
	if !slices.Equal(res.Fenced, []client.TopicPartition{tp1}) || res.Next[tp0] != 2 || len(effects(t, db, tp1)) != 0 {
		t.Fatalf("fenced %v, next %v, orders-1 effects %v; want [orders-1], orders-0 at 2, none", res.Fenced, res.Next, effects(t, db, tp1))
	}
}

// TestOptions: the table is an identifier, optionally schema-qualified,
// and members starting together create it once.
func TestOptions(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	for _, bad := range []string{"", "Offsets", "a;drop table x", "a.b.c", "1abc"} {
		if _, err := New(ctx, db, "g", Table(bad)); err == nil || !strings.Contains(err.Error(), "pgsink: table") {
			t.Errorf("Table(%q): %v; want refused", bad, err)
		}
	}
	if _, err := New(ctx, db, "", Table("x")); err == nil {
		t.Error("empty group accepted")
	}
	if _, err := db.Exec(ctx, "CREATE SCHEMA sinks"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := New(ctx, db, "g", Table("sinks.offsets"))
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("members creating the table together: %v", err)
		}
	}
	s := newSinkT(t, db, Table("sinks.offsets"))
	if _, err := s.Assign(ctx, 1, []client.TopicPartition{tp0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, recs("orders", 0, 0, 0, 1), nil); err == nil {
		t.Error("Apply without an ApplyFunc succeeded")
	}
	var n int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM sinks.offsets").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows in sinks.offsets: %d, %v; want 1", n, err)
	}
}

// TestOlderTableGainsColumns: a table made before topic ids and gaps were
// kept gets their columns, its rows kept as they were; a row without a
// topic id takes the id of the first records applied to it.
func TestOlderTableGainsColumns(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	if _, err := db.Exec(ctx, `CREATE TABLE strata_sink_offsets (
    group_id        text        NOT NULL,
    topic           text        NOT NULL,
    partition_index integer     NOT NULL,
    next_offset     bigint      NOT NULL,
    generation      bigint      NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, partition_index)
);
INSERT INTO strata_sink_offsets (group_id, topic, partition_index, next_offset, generation) VALUES ('billing', 'orders', 0, 5, 7)`); err != nil {
		t.Fatal(err)
	}
	s := newSinkT(t, db)
	start, err := s.Assign(ctx, 1, []client.TopicPartition{tp0})
	if err != nil || start[tp0] != 5 {
		t.Fatalf("Assign on the older table = %v, %v; want orders-0 at 5", start, err)
	}
	batch := recs("orders", 0, 5, 6, 1)
	for _, r := range batch {
		r.TopicID = "id-1"
	}
	var got []*client.Record
	if _, err := s.Apply(ctx, batch, writeEffects("m", &got)); err != nil {
		t.Fatal(err)
	}
	var id string
	var gen, lost int64
	if err := db.QueryRow(ctx, "SELECT topic_id, generation, gap_offsets FROM strata_sink_offsets").Scan(&id, &gen, &lost); err != nil || id != "id-1" || gen != 8 || lost != 0 {
		t.Fatalf("row: topic_id %q, generation %d, gap_offsets %d (%v); want id-1, 8, 0", id, gen, lost, err)
	}
	// Up to date now: another member does not alter the table again.
	if _, err := New(ctx, db, "billing"); err != nil {
		t.Fatal(err)
	}
}
