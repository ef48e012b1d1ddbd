package pgsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// Sink keeps a group's offsets in a PostgreSQL table and applies batches of
// records in transactions fenced by a per-partition generation (see the
// package doc). One Sink serves one member of the group; its methods are
// safe for concurrent use.
type Sink struct {
	db    DB
	group string
	table string // quoted, ready for SQL

	mu     sync.Mutex
	tokens map[client.TopicPartition]token // partitions assigned through Assign
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
}

// New returns the sink of one member of group, keeping offsets in db. It
// creates the offsets table when it does not exist (under an advisory
// lock, so members starting together do not race).
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
	s := &Sink{db: db, group: group, table: pgx.Identifier(strings.Split(cfg.table, ".")).Sanitize(),
		tokens: map[client.TopicPartition]token{}}
	if err := s.createTable(ctx, cfg.table); err != nil {
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
    PRIMARY KEY (group_id, topic, partition_index)
)`

func (s *Sink) createTable(ctx context.Context, name string) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgsink: %w", err)
	}
	defer tx.Rollback(context.Background())
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.table).Scan(&exists); err != nil {
		return fmt.Errorf("pgsink: look up table %s: %w", name, err)
	}
	if exists {
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
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgsink: create table %s: %w", name, err)
	}
	return nil
}

// Assign takes partitions assigned to this member at memberEpoch: it bumps
// each one's generation (creating its row at -1 when there is none), keeps
// the new generation as this member's token, and returns each partition's
// stored offset, leaving out those at -1 (nothing applied yet). It is a
// client.StartOffsetsFunc: NewConsumer installs it. A deadlock with
// another member's assignment is retried.
func (s *Sink) Assign(ctx context.Context, memberEpoch int32, tps []client.TopicPartition) (map[client.TopicPartition]int64, error) {
	if len(tps) == 0 {
		return map[client.TopicPartition]int64{}, nil
	}
	topics, parts := columns(tps)
	q := fmt.Sprintf(`INSERT INTO %s AS o (group_id, topic, partition_index, next_offset, generation)
SELECT $1, v.topic, v.partition_index, -1, 1
FROM unnest($2::text[], $3::integer[]) AS v(topic, partition_index)
ORDER BY v.topic, v.partition_index
ON CONFLICT (group_id, topic, partition_index)
DO UPDATE SET generation = o.generation + 1, updated_at = now()
RETURNING topic, partition_index, next_offset, generation`, s.table)
	var (
		start map[client.TopicPartition]int64
		gens  map[client.TopicPartition]int64
		err   error
	)
	for attempt := 1; ; attempt++ {
		start, gens, err = s.assignOnce(ctx, q, topics, parts)
		if err == nil {
			break
		}
		if attempt == 5 || !retryable(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("pgsink: assign %d partitions: %w", len(tps), err)
		}
	}
	if len(gens) != len(tps) {
		return nil, fmt.Errorf("pgsink: assign %d partitions: %d offsets rows returned", len(tps), len(gens))
	}
	s.mu.Lock()
	for tp, g := range gens {
		s.tokens[tp] = token{generation: g, epoch: memberEpoch}
	}
	s.mu.Unlock()
	return start, nil
}

func (s *Sink) assignOnce(ctx context.Context, q string, topics []string, parts []int32) (start, gens map[client.TopicPartition]int64, err error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback(context.Background())
	rows, err := tx.Query(ctx, q, s.group, topics, parts)
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
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return start, gens, tx.Commit(ctx)
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
// committed. Any other error means nothing was applied (fn's error is
// wrapped); after a failed commit the outcome is unknown, and applying the
// same records again is safe: those that did commit are skipped.
func (s *Sink) Apply(ctx context.Context, recs []*client.Record, fn ApplyFunc) (Result, error) {
	res, fenced, err := s.apply(ctx, recs, fn)
	if err != nil {
		return Result{}, err
	}
	return res, fenced
}

// apply is Apply with the fence (records left out, others committed) and
// a failure (nothing committed) told apart.
func (s *Sink) apply(ctx context.Context, recs []*client.Record, fn ApplyFunc) (res Result, fenced, err error) {
	if fn == nil {
		return res, nil, errors.New("pgsink: Apply without an ApplyFunc")
	}
	why := map[client.TopicPartition]string{}
	toks := map[client.TopicPartition]token{}
	var cands []*client.Record
	s.mu.Lock()
	for _, r := range recs {
		tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		tok, ok := s.tokens[tp]
		switch {
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
	topics, parts := columns(sortedKeys(toks))
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT topic, partition_index, next_offset, generation FROM %s
WHERE group_id = $1 AND (topic, partition_index) IN (SELECT * FROM unnest($2::text[], $3::integer[]))
ORDER BY topic, partition_index FOR UPDATE`, s.table), s.group, topics, parts)
	if err != nil {
		return res, nil, fmt.Errorf("pgsink: lock offsets: %w", err)
	}
	from := map[client.TopicPartition]int64{} // partitions this member still holds -> stored offset
	for rows.Next() {
		var tp client.TopicPartition
		var next, gen int64
		if err := rows.Scan(&tp.Topic, &tp.Partition, &next, &gen); err != nil {
			rows.Close()
			return res, nil, fmt.Errorf("pgsink: lock offsets: %w", err)
		}
		if mine := toks[tp].generation; gen != mine {
			why[tp] = fmt.Sprintf("assigned to another member since (generation %d, this member's %d)", gen, mine)
			s.dropToken(tp, toks[tp])
			continue
		}
		from[tp] = next
	}
	if err := rows.Err(); err != nil {
		return res, nil, fmt.Errorf("pgsink: lock offsets: %w", err)
	}
	for tp := range toks {
		if _, ok := from[tp]; !ok && why[tp] == "" {
			why[tp] = "its offsets row is gone"
		}
	}

	var kept []*client.Record
	for _, r := range cands {
		tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		next, ok := from[tp]
		switch {
		case !ok:
		case r.Offset < next || r.Offset < res.Next[tp]:
			res.Skipped++
		default:
			kept = append(kept, r)
			res.Next[tp] = r.Offset + 1
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
	nexts, gens := make([]int64, len(applied)), make([]int64, len(applied))
	for i, tp := range applied {
		nexts[i], gens[i] = res.Next[tp], toks[tp].generation
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s AS o SET next_offset = v.next_offset, updated_at = now()
FROM unnest($2::text[], $3::integer[], $4::bigint[], $5::bigint[]) AS v(topic, partition_index, next_offset, generation)
WHERE o.group_id = $1 AND o.topic = v.topic AND o.partition_index = v.partition_index AND o.generation = v.generation`, s.table),
		s.group, topics, parts, nexts, gens)
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

// fenced fills res.Fenced from why.
func (s *Sink) fenced(res Result, why map[client.TopicPartition]string) Result {
	res.Fenced = sortedKeys(why)
	return res
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
	tok, ok := s.tokens[tp]
	return ok && memberEpoch >= tok.epoch
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
