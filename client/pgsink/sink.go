package pgsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-mq/strata/client"
)

// DB is where the sink keeps its offsets and runs the application's
// transactions: a *pgxpool.Pool, or a *pgx.Conn when Assign and Apply are
// never called at the same time.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ApplyFunc makes the application's writes for recs in tx, the
// transaction that also moves the sink's offsets past them. recs are
// grouped by partition, each partition's in offset order, and hold no
// record applied before. An error rolls the whole transaction back. It
// must not commit or roll back tx.
type ApplyFunc func(ctx context.Context, tx pgx.Tx, recs []*client.Record) error

// Errors of Apply, matched with errors.Is.
var (
	// ErrGap: the log no longer holds records the sink has not applied
	// (see GapPolicy); the error is a *GapError.
	ErrGap = errors.New("pgsink: records deleted from the log before they were applied")
	// ErrTopicRecreated: the records are of another topic (another topic
	// id) than the one the partition's offsets row was written for: the
	// topic was deleted and created again under the same name.
	ErrTopicRecreated = errors.New("pgsink: topic deleted and created again under the same name")
	// ErrAssignPending: records of a partition whose assignment waits for
	// another session's transaction on its offsets row (see Assign) were
	// left out; give them again. A Consumer does so itself.
	ErrAssignPending = errors.New("pgsink: partition assignment pending")
)

// Gap is a range of offsets the log no longer held when the sink came to
// apply them.
type Gap struct {
	client.TopicPartition
	// From is the sink's next offset when the gap was found: the first
	// offset passed over.
	From int64
	// To is the offset after the last one passed over: the log start
	// offset then, or the first record read after the gap if lower.
	To int64
}

// GapError is the error of an Apply that found a gap under FailOnGap.
type GapError struct {
	Gap
	Group string // the sink's group
	Table string // the offsets table
}

func (e *GapError) Error() string {
	return fmt.Sprintf("pgsink: %s: offsets %d to %d (%d records) were deleted from the log (retention, or a deletion of records) before group %q applied them; "+
		"nothing was applied. To go on past them, run the sink with pgsink.Gaps(pgsink.RecordGapAndContinue): the gap is then recorded in %s",
		e.TopicPartition, e.From, e.To-1, e.To-e.From, e.Group, e.Table)
}

// Unwrap makes a GapError match ErrGap.
func (e *GapError) Unwrap() error { return ErrGap }

// Sink keeps a group's offsets in a PostgreSQL table and applies batches of
// records in transactions fenced by a per-partition generation (see the
// package doc). One Sink serves one member of the group; its methods are
// safe for concurrent use.
type Sink struct {
	db        DB
	group     string
	tableName string // as given
	table     string // quoted, ready for SQL
	cfg       config

	mu      sync.Mutex
	tokens  map[client.TopicPartition]token // partitions assigned through Assign
	pending map[client.TopicPartition]int32 // assigned, generation not bumped yet -> member epoch of the assignment
}

// token is what this member holds for a partition since its last
// assignment.
type token struct {
	generation int64 // the row's generation that Assign set
	epoch      int32 // the member epoch of the assignment
}

// Result says what one Apply did.
type Result struct {
	// Applied are the records given to the ApplyFunc and committed, by
	// partition in offset order.
	Applied []*client.Record
	// Next is, for each partition of Applied, the offset after its last
	// applied record: what the sink's table now holds.
	Next map[client.TopicPartition]int64
	// Skipped counts records left out because an earlier transaction had
	// applied them, or because they were given twice.
	Skipped int
	// Fenced are the partitions whose records (some or all) were left out
	// because this member no longer holds them; the error matches
	// client.ErrFenced and says why for each.
	Fenced []client.TopicPartition
	// Pending are the partitions whose records were left out because
	// their assignment still waits for another session's transaction (see
	// Assign); Sink.Apply's error matches ErrAssignPending, and a
	// Consumer reads them again.
	Pending []client.TopicPartition
	// Gaps are the gaps recorded under RecordGapAndContinue.
	Gaps []Gap
}

// New returns the sink of one member of group, keeping offsets in db. It
// creates the offsets table when it does not exist, and adds the columns
// a table made by an earlier version lacks (under an advisory lock, so
// members starting together do not race).
func New(ctx context.Context, db DB, group string, opts ...Opt) (*Sink, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return newSink(ctx, db, group, cfg)
}

func newSink(ctx context.Context, db DB, group string, cfg config) (*Sink, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if group == "" {
		return nil, errors.New("pgsink: empty group id")
	}
	if db == nil {
		return nil, errors.New("pgsink: no database")
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	s := &Sink{db: db, group: group, tableName: cfg.table, table: pgx.Identifier(strings.Split(cfg.table, ".")).Sanitize(), cfg: cfg,
		tokens: map[client.TopicPartition]token{}, pending: map[client.TopicPartition]int32{}}
	if err := s.createTable(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Group is the group id the sink keeps offsets for.
func (s *Sink) Group() string { return s.group }

const createTable = `CREATE TABLE IF NOT EXISTS %s (
    group_id        text        NOT NULL,
    topic           text        NOT NULL,
    partition_index integer     NOT NULL,
    next_offset     bigint      NOT NULL,
    generation      bigint      NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    topic_id        text        NOT NULL DEFAULT '',
    gap_offsets     bigint      NOT NULL DEFAULT 0,
    last_gap_from   bigint,
    last_gap_to     bigint,
    last_gap_at     timestamptz,
    PRIMARY KEY (group_id, topic, partition_index)
)`

// addColumns brings a table made before topic_id and the gap columns up to
// date. Columns with a constant default are added without rewriting the
// table.
const addColumns = `ALTER TABLE %s
    ADD COLUMN IF NOT EXISTS topic_id      text        NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS gap_offsets   bigint      NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS last_gap_from bigint,
    ADD COLUMN IF NOT EXISTS last_gap_to   bigint,
    ADD COLUMN IF NOT EXISTS last_gap_at   timestamptz`

// laterColumns are the columns addColumns adds.
var laterColumns = []string{"topic_id", "gap_offsets", "last_gap_from", "last_gap_to", "last_gap_at"}

func (s *Sink) createTable(ctx context.Context) error {
	name := s.tableName
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgsink: %w", err)
	}
	defer tx.Rollback(context.Background())
	if err := s.setLocal(ctx, tx); err != nil {
		return err
	}
	// Checked first, so that members of an up-to-date table never take
	// the ALTER TABLE's exclusive lock, which would queue every statement
	// on the table behind the longest transaction holding a row.
	var have int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = ANY($2) AND NOT attisdropped`,
		s.table, laterColumns).Scan(&have); err != nil {
		return fmt.Errorf("pgsink: look up table %s: %w", name, err)
	}
	if have == len(laterColumns) {
		return nil
	}
	// CREATE TABLE IF NOT EXISTS run by two sessions at once can still
	// fail on the catalog's unique index; one at a time it cannot.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "strata pgsink "+name); err != nil {
		return fmt.Errorf("pgsink: lock for creating table %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(createTable, s.table)); err != nil {
		return fmt.Errorf("pgsink: create table %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(addColumns, s.table)); err != nil {
		return fmt.Errorf("pgsink: add columns to table %s: %w", name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgsink: create table %s: %w", name, err)
	}
	return nil
}

// setLocal sets the transaction's lock_timeout and
// idle_in_transaction_session_timeout (LockTimeout,
// IdleInTransactionTimeout); SET LOCAL ends with the transaction, so the
// sessions of a pool the application shares keep their own settings.
func (s *Sink) setLocal(ctx context.Context, tx pgx.Tx) error {
	idle := ""
	if s.cfg.idleTimeout > 0 {
		idle = strconv.FormatInt(s.cfg.idleTimeout.Milliseconds(), 10)
	}
	_, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true), CASE WHEN $2 <> '' THEN set_config('idle_in_transaction_session_timeout', $2, true) END`,
		strconv.FormatInt(s.cfg.lockTimeout.Milliseconds(), 10), idle)
	if err != nil {
		return fmt.Errorf("pgsink: set timeouts: %w", err)
	}
	return nil
}

// Assign takes partitions assigned to this member at memberEpoch: it bumps
// each one's generation (creating its row at -1 when there is none), keeps
// the new generation as this member's token, and returns each partition's
// stored offset, leaving out those at -1 (nothing applied yet). It is a
// client.StartOffsetsFunc: NewConsumer installs it. A deadlock with
// another member's assignment is retried.
//
// A row another session holds (the previous owner's transaction in
// flight, or one a paused member left open) is not waited for, so one
// such partition does not hold up the others: the partition's assignment
// is pending, and Assign returns its offset as last committed, where
// reading may start (the offset only grows). Apply bumps the generation of
// a pending partition once the row is free (waiting up to LockTimeout
// when it has nothing else to apply) and until then leaves its records
// out (Result.Pending, ErrAssignPending); a Consumer reads them again.
func (s *Sink) Assign(ctx context.Context, memberEpoch int32, tps []client.TopicPartition) (map[client.TopicPartition]int64, error) {
	if len(tps) == 0 {
		return map[client.TopicPartition]int64{}, nil
	}
	var (
		start map[client.TopicPartition]int64
		gens  map[client.TopicPartition]int64
		err   error
	)
	for attempt := 1; ; attempt++ {
		start, gens, err = s.assignOnce(ctx, tps)
		if err == nil {
			break
		}
		if attempt == 5 || !retryable(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("pgsink: assign %d partitions: %w", len(tps), err)
		}
	}
	s.mu.Lock()
	for _, tp := range tps {
		if g, ok := gens[tp]; ok {
			s.tokens[tp] = token{generation: g, epoch: memberEpoch}
			delete(s.pending, tp)
		} else {
			delete(s.tokens, tp)
			s.pending[tp] = memberEpoch
		}
	}
	s.mu.Unlock()
	return start, nil
}

func (s *Sink) assignOnce(ctx context.Context, tps []client.TopicPartition) (start, gens map[client.TopicPartition]int64, err error) {
	topics, parts := columns(sortedKeys(setOf(tps)))
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback(context.Background())
	if err := s.setLocal(ctx, tx); err != nil {
		return nil, nil, err
	}
	if err := s.insertRows(ctx, tx, topics, parts); err != nil {
		return nil, nil, err
	}
	start, gens, err = s.bump(ctx, tx, topics, parts, true)
	if err != nil {
		return nil, nil, err
	}
	if len(gens) < len(topics) {
		// Held by another session: where its last committed transaction
		// left the partition, without waiting.
		rows, err := s.readRows(ctx, tx, topics, parts)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range rows {
			if _, ok := gens[r.TopicPartition]; !ok && r.Next >= 0 {
				start[r.TopicPartition] = r.Next
			}
		}
	}
	return start, gens, tx.Commit(ctx)
}

// offsetsRow is a partition's row of the offsets table, as readRows reads it.
type offsetsRow struct {
	client.TopicPartition
	Next, Generation int64
}

// readRows reads the rows of the given partitions as last committed,
// without locking them or waiting for a session that holds them.
func (s *Sink) readRows(ctx context.Context, tx pgx.Tx, topics []string, parts []int32) ([]offsetsRow, error) {
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT topic, partition_index, next_offset, generation FROM %s
WHERE group_id = $1 AND (topic, partition_index) IN (SELECT * FROM unnest($2::text[], $3::integer[]))`, s.table), s.group, topics, parts)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (offsetsRow, error) {
		var r offsetsRow
		err := row.Scan(&r.Topic, &r.Partition, &r.Next, &r.Generation)
		return r, err
	})
}

// insertRows creates the missing rows of the given partitions at -1, in
// one order. A row that exists is left as it is, without waiting for a
// session that holds it.
func (s *Sink) insertRows(ctx context.Context, tx pgx.Tx, topics []string, parts []int32) error {
	_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (group_id, topic, partition_index, next_offset, generation)
SELECT $1, v.topic, v.partition_index, -1, 0
FROM unnest($2::text[], $3::integer[]) AS v(topic, partition_index)
ORDER BY v.topic, v.partition_index
ON CONFLICT (group_id, topic, partition_index) DO NOTHING`, s.table), s.group, topics, parts)
	return err
}

// bump bumps the generation of the rows of the given partitions, taken in
// one order, and returns their offsets (those at -1 left out) and new
// generations. With skipLocked, rows another session holds are left as
// they are and out of the answer; without, it waits for them (up to
// LockTimeout).
func (s *Sink) bump(ctx context.Context, tx pgx.Tx, topics []string, parts []int32, skipLocked bool) (start, gens map[client.TopicPartition]int64, err error) {
	lock := "FOR UPDATE"
	if skipLocked {
		lock = "FOR UPDATE SKIP LOCKED"
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(`UPDATE %[1]s AS o SET generation = o.generation + 1, updated_at = now()
FROM (SELECT topic, partition_index FROM %[1]s
      WHERE group_id = $1 AND (topic, partition_index) IN (SELECT * FROM unnest($2::text[], $3::integer[]))
      ORDER BY topic, partition_index %[2]s) AS l
WHERE o.group_id = $1 AND o.topic = l.topic AND o.partition_index = l.partition_index
RETURNING o.topic, o.partition_index, o.next_offset, o.generation`, s.table, lock), s.group, topics, parts)
	if err != nil {
		return nil, nil, err
	}
	start, gens = map[client.TopicPartition]int64{}, map[client.TopicPartition]int64{}
	for rows.Next() {
		var tp client.TopicPartition
		var next, gen int64
		if err := rows.Scan(&tp.Topic, &tp.Partition, &next, &gen); err != nil {
			rows.Close()
			return nil, nil, err
		}
		gens[tp] = gen
		if next >= 0 {
			start[tp] = next
		}
	}
	return start, gens, rows.Err()
}

// claim finishes the pending assignments of tps: it bumps the generations
// of the rows now free (with wait, waiting up to LockTimeout for the
// others) and makes them this member's tokens. It returns the partitions
// it took.
func (s *Sink) claim(ctx context.Context, tps map[client.TopicPartition]int32, wait bool) (map[client.TopicPartition]bool, error) {
	topics, parts := columns(sortedKeys(tps))
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgsink: begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	if err := s.setLocal(ctx, tx); err != nil {
		return nil, err
	}
	// A row deleted meanwhile (by an operator) is created again, as
	// Assign would.
	err = s.insertRows(ctx, tx, topics, parts)
	var gens map[client.TopicPartition]int64
	if err == nil {
		_, gens, err = s.bump(ctx, tx, topics, parts, !wait)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if lockNotAvailable(err) || retryable(err) {
		return nil, nil // still held: pending a while longer
	}
	if err != nil {
		return nil, fmt.Errorf("pgsink: take over %d pending partitions: %w", len(tps), err)
	}
	took := map[client.TopicPartition]bool{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for tp, g := range gens {
		// Assigned again meanwhile (pending under another epoch, or
		// taken): that assignment's own state stands.
		if e, ok := s.pending[tp]; ok && e == tps[tp] {
			delete(s.pending, tp)
			s.tokens[tp] = token{generation: g, epoch: e}
			took[tp] = true
		}
	}
	return took, nil
}

// Apply applies recs (records a GroupConsumer's Poll returned) in one
// transaction: it locks the offsets rows of their partitions, leaves out
// the partitions this member no longer holds and the records already
// applied, calls fn with the rest in the transaction, moves the offsets
// past them and commits. fn is not called when nothing is left.
//
// A nil error means every record was applied or had been. An error
// matching client.ErrFenced means the records of the partitions in
// Result.Fenced were left out, and the others (Result.Applied) were
// committed; one matching ErrAssignPending, the same for Result.Pending,
// whose records must be given again. An error matching ErrGap (a
// *GapError, under FailOnGap) or ErrTopicRecreated means nothing was
// applied, and applying the same records again fails the same way. Any
// other error means nothing was applied (fn's error is wrapped); after a
// failed commit the outcome is unknown, and applying the same records
// again is safe: those that did commit are skipped.
func (s *Sink) Apply(ctx context.Context, recs []*client.Record, fn ApplyFunc) (Result, error) {
	res, fenced, err := s.apply(ctx, recs, fn)
	if err != nil {
		return Result{}, err
	}
	s.told(res)
	return res, errors.Join(fenced, pendingError(res.Pending))
}

// told logs the gaps res recorded and tells OnGap.
func (s *Sink) told(res Result) {
	for _, g := range res.Gaps {
		s.cfg.logger.Warn("pgsink: gap in the log: records deleted before they were applied; recorded, going on after it",
			"group", s.group, "topic", g.Topic, "partition", g.Partition, "from", g.From, "to", g.To, "records", g.To-g.From, "table", s.tableName)
		if s.cfg.onGap != nil {
			s.cfg.onGap(g)
		}
	}
}

// apply is Apply with the fence (records left out, others committed) and
// a failure (nothing committed) told apart.
func (s *Sink) apply(ctx context.Context, recs []*client.Record, fn ApplyFunc) (res Result, fenced, err error) {
	if fn == nil {
		return res, nil, errors.New("pgsink: Apply without an ApplyFunc")
	}
	why := map[client.TopicPartition]string{}
	toks := map[client.TopicPartition]token{}
	pend := map[client.TopicPartition]int32{}
	var cands, waiting []*client.Record
	s.mu.Lock()
	for _, r := range recs {
		tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		tok, ok := s.tokens[tp]
		pe, pending := s.pending[tp]
		switch {
		case pending && r.MemberEpoch >= pe:
			pend[tp] = pe
			waiting = append(waiting, r)
		case pending:
			why[tp] = fmt.Sprintf("records read under member epoch %d, before the partition was assigned again at epoch %d", r.MemberEpoch, pe)
		case !ok:
			why[tp] = "not assigned to this member through the sink"
		case r.MemberEpoch < tok.epoch:
			why[tp] = fmt.Sprintf("records read under member epoch %d, before the partition was assigned again at epoch %d", r.MemberEpoch, tok.epoch)
		default:
			toks[tp] = tok
			cands = append(cands, r)
		}
	}
	s.mu.Unlock()
	res.Next = map[client.TopicPartition]int64{}
	if len(pend) > 0 {
		// Wait for the rows only when nothing else is to be applied, so a
		// pending partition never holds up the others.
		took, err := s.claim(ctx, pend, len(cands) == 0)
		if err != nil {
			return res, nil, err
		}
		s.mu.Lock()
		for _, r := range waiting {
			tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
			if took[tp] {
				toks[tp] = s.tokens[tp]
				cands = append(cands, r)
			}
		}
		s.mu.Unlock()
		for tp := range pend {
			if !took[tp] {
				res.Pending = append(res.Pending, tp)
			}
		}
		slices.SortFunc(res.Pending, cmpTP)
	}
	if len(cands) == 0 {
		res = s.fenced(res, why)
		return res, fencedError(res.Fenced, why), nil
	}
	slices.SortStableFunc(cands, func(a, b *client.Record) int {
		return cmpRecord(a, b)
	})

	tx, err := s.db.Begin(ctx)
	if err != nil {
		return res, nil, fmt.Errorf("pgsink: begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	if err := s.setLocal(ctx, tx); err != nil {
		return res, nil, err
	}
	held := sortedKeys(toks)
	topics, parts := columns(held)
	gens := make([]int64, len(held))
	for i, tp := range held {
		gens[i] = toks[tp].generation
	}
	// Only the rows still at this member's generation are locked: a
	// zombie never holds up the row of a partition it lost.
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT o.topic, o.partition_index, o.next_offset, o.topic_id FROM %s AS o
JOIN unnest($2::text[], $3::integer[], $4::bigint[]) AS v(topic, partition_index, generation)
  ON o.topic = v.topic AND o.partition_index = v.partition_index AND o.generation = v.generation
WHERE o.group_id = $1
ORDER BY o.topic, o.partition_index FOR UPDATE OF o`, s.table), s.group, topics, parts, gens)
	if err != nil {
		return res, nil, fmt.Errorf("pgsink: lock offsets: %w", err)
	}
	from := map[client.TopicPartition]int64{} // partitions this member still holds -> stored offset
	rowIDs := map[client.TopicPartition]string{}
	for rows.Next() {
		var tp client.TopicPartition
		var next int64
		var id string
		if err := rows.Scan(&tp.Topic, &tp.Partition, &next, &id); err != nil {
			rows.Close()
			return res, nil, fmt.Errorf("pgsink: lock offsets: %w", err)
		}
		from[tp], rowIDs[tp] = next, id
	}
	if err := rows.Err(); err != nil {
		return res, nil, fmt.Errorf("pgsink: lock offsets: %w", err)
	}
	if len(from) < len(held) {
		if err := s.whyLost(ctx, tx, toks, from, why); err != nil {
			return res, nil, err
		}
	}

	recIDs := map[client.TopicPartition]string{}
	var kept []*client.Record
	first := map[client.TopicPartition]int64{}
	for _, r := range cands {
		tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		next, ok := from[tp]
		if !ok {
			continue
		}
		if r.TopicID != "" && recIDs[tp] == "" {
			recIDs[tp] = r.TopicID
		}
		switch {
		case r.Offset < next || r.Offset < res.Next[tp]:
			res.Skipped++
		default:
			if _, seen := first[tp]; !seen {
				first[tp] = r.Offset
			}
			kept = append(kept, r)
			res.Next[tp] = r.Offset + 1
		}
	}
	for _, tp := range sortedKeys(recIDs) {
		if row := rowIDs[tp]; row != "" && row != recIDs[tp] {
			return Result{}, nil, fmt.Errorf("%w: %s: the sink's offsets row (next offset %d) was written for topic id %s, and these records are of topic id %s; "+
				"a recreated topic is a new log, so nothing was applied. To start the new topic afresh, delete its rows "+
				"(DELETE FROM %s WHERE group_id = '%s' AND topic = '%s') and reset the group's offsets (strata group reset %s --topic %s --to earliest)",
				ErrTopicRecreated, tp, from[tp], row, recIDs[tp], s.tableName, s.group, tp.Topic, s.group, tp.Topic)
		}
	}
	gapOf := map[client.TopicPartition]Gap{}
	if s.cfg.logStart != nil {
		for _, tp := range sortedKeys(first) {
			next, f := from[tp], first[tp]
			if next < 0 || f <= next {
				continue
			}
			// A jump past the sink's offset is a gap only when the log
			// no longer starts at or before it: offsets a compacted
			// topic or control batches leave out are not lost records.
			lso, ok := s.cfg.logStart(tp)
			if !ok || lso <= next {
				continue
			}
			g := Gap{TopicPartition: tp, From: next, To: min(f, lso)}
			if s.cfg.gapPolicy == FailOnGap {
				return Result{}, nil, &GapError{Gap: g, Group: s.group, Table: s.tableName}
			}
			gapOf[tp] = g
			res.Gaps = append(res.Gaps, g)
		}
	}
	if len(kept) == 0 {
		res = s.fenced(res, why)
		return res, fencedError(res.Fenced, why), nil
	}
	if err := fn(ctx, tx, kept); err != nil {
		return Result{}, nil, fmt.Errorf("pgsink: apply %d records: %w", len(kept), err)
	}
	applied := sortedKeys(res.Next)
	topics, parts = columns(applied)
	n := len(applied)
	nexts, ugens, ids, gapFrom, gapTo := make([]int64, n), make([]int64, n), make([]string, n), make([]int64, n), make([]int64, n)
	for i, tp := range applied {
		nexts[i], ugens[i], ids[i] = res.Next[tp], toks[tp].generation, recIDs[tp]
		gapFrom[i], gapTo[i] = -1, -1
		if g, ok := gapOf[tp]; ok {
			gapFrom[i], gapTo[i] = g.From, g.To
		}
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s AS o SET next_offset = v.next_offset, updated_at = now(),
    topic_id = CASE WHEN v.topic_id = '' THEN o.topic_id ELSE v.topic_id END,
    gap_offsets = o.gap_offsets + CASE WHEN v.gap_from >= 0 THEN v.gap_to - v.gap_from ELSE 0 END,
    last_gap_from = CASE WHEN v.gap_from >= 0 THEN v.gap_from ELSE o.last_gap_from END,
    last_gap_to = CASE WHEN v.gap_from >= 0 THEN v.gap_to ELSE o.last_gap_to END,
    last_gap_at = CASE WHEN v.gap_from >= 0 THEN now() ELSE o.last_gap_at END
FROM unnest($2::text[], $3::integer[], $4::bigint[], $5::bigint[], $6::text[], $7::bigint[], $8::bigint[])
     AS v(topic, partition_index, next_offset, generation, topic_id, gap_from, gap_to)
WHERE o.group_id = $1 AND o.topic = v.topic AND o.partition_index = v.partition_index AND o.generation = v.generation`, s.table),
		s.group, topics, parts, nexts, ugens, ids, gapFrom, gapTo)
	if err != nil {
		return Result{}, nil, fmt.Errorf("pgsink: move offsets: %w", err)
	}
	if int(tag.RowsAffected()) != len(applied) {
		return Result{}, nil, fmt.Errorf("pgsink: move offsets: %d of %d rows at this member's generation", tag.RowsAffected(), len(applied))
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, nil, fmt.Errorf("pgsink: commit %d records: %w (the outcome is unknown; applying them again is safe)", len(kept), err)
	}
	res.Applied = kept
	res = s.fenced(res, why)
	return res, fencedError(res.Fenced, why), nil
}

// whyLost says, for each partition of toks whose row was not at this
// member's generation, what became of it, and drops this member's token.
func (s *Sink) whyLost(ctx context.Context, tx pgx.Tx, toks map[client.TopicPartition]token, from map[client.TopicPartition]int64, why map[client.TopicPartition]string) error {
	var lost []client.TopicPartition
	for _, tp := range sortedKeys(toks) {
		if _, ok := from[tp]; !ok {
			lost = append(lost, tp)
		}
	}
	topics, parts := columns(lost)
	rows, err := s.readRows(ctx, tx, topics, parts)
	if err != nil {
		return fmt.Errorf("pgsink: read offsets: %w", err)
	}
	now := map[client.TopicPartition]int64{}
	for _, r := range rows {
		now[r.TopicPartition] = r.Generation
	}
	for _, tp := range lost {
		if gen, ok := now[tp]; ok {
			why[tp] = fmt.Sprintf("assigned to another member since (generation %d, this member's %d)", gen, toks[tp].generation)
		} else {
			why[tp] = "its offsets row is gone"
		}
		s.dropToken(tp, toks[tp])
	}
	return nil
}

// fenced fills res.Fenced from why.
func (s *Sink) fenced(res Result, why map[client.TopicPartition]string) Result {
	res.Fenced = sortedKeys(why)
	return res
}

// pendingError is the error of an Apply that left out pending partitions.
func pendingError(tps []client.TopicPartition) error {
	var errs []error
	for _, tp := range tps {
		errs = append(errs, fmt.Errorf("%w: %s: records left out: another session's transaction still holds the partition's offsets row; give them again", ErrAssignPending, tp))
	}
	return errors.Join(errs...)
}

// fencedError is the error of an Apply that left out fenced partitions.
func fencedError(tps []client.TopicPartition, why map[client.TopicPartition]string) error {
	var errs []error
	for _, tp := range tps {
		errs = append(errs, fmt.Errorf("%w: pgsink: %s: records left out: %s", client.ErrFenced, tp, why[tp]))
	}
	return errors.Join(errs...)
}

// dropToken forgets tp's token if it is still tok (an Assign may have
// replaced it meanwhile).
func (s *Sink) dropToken(tp client.TopicPartition, tok token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokens[tp] == tok {
		delete(s.tokens, tp)
	}
}

// holds reports whether records of tp read under memberEpoch belong to
// this member's current assignment of tp, as far as the sink knows.
func (s *Sink) holds(tp client.TopicPartition, memberEpoch int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.pending[tp]; ok {
		return memberEpoch >= e
	}
	tok, ok := s.tokens[tp]
	return ok && memberEpoch >= tok.epoch
}

// lockNotAvailable reports a lock_timeout (or NOWAIT) that ran out.
func lockNotAvailable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

func setOf(tps []client.TopicPartition) map[client.TopicPartition]bool {
	m := make(map[client.TopicPartition]bool, len(tps))
	for _, tp := range tps {
		m[tp] = true
	}
	return m
}

// retryable reports a deadlock or serialization failure, which the
// statement can simply be run again after.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

func columns(tps []client.TopicPartition) ([]string, []int32) {
	topics, parts := make([]string, len(tps)), make([]int32, len(tps))
	for i, tp := range tps {
		topics[i], parts[i] = tp.Topic, tp.Partition
	}
	return topics, parts
}

func cmpTP(a, b client.TopicPartition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition) - int(b.Partition)
}

func cmpRecord(a, b *client.Record) int {
	if c := cmpTP(client.TopicPartition{Topic: a.Topic, Partition: a.Partition}, client.TopicPartition{Topic: b.Topic, Partition: b.Partition}); c != 0 {
		return c
	}
	switch {
	case a.Offset < b.Offset:
		return -1
	case a.Offset > b.Offset:
		return 1
	}
	return 0
}

func sortedKeys[V any](m map[client.TopicPartition]V) []client.TopicPartition {
	out := make([]client.TopicPartition, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	slices.SortFunc(out, cmpTP)
	return out
}
