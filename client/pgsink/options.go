package pgsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/strata-mq/strata/client"
)

// DefaultTable is the offsets table when Table is not given.
const DefaultTable = "strata_sink_offsets"

// Opt configures a Sink or a Consumer. Options about the group consumer
// (GroupOptions, AfterCommit, OnGroupCommitError, GroupCommitTimeout) do
// nothing for a Sink made with New.
type Opt func(*config)

type config struct {
	table              string
	groupOpts          []client.GroupOpt
	afterCommit        func(ctx context.Context, next map[client.TopicPartition]int64)
	onGroupCommitError func(error)
	groupCommitTimeout time.Duration
	lockTimeout        time.Duration
	idleTimeout        time.Duration
	gapPolicy          GapPolicy
	onGap              func(Gap)
	logStart           func(client.TopicPartition) (int64, bool)
	logger             *slog.Logger
}

// Defaults of the options that have one.
const (
	DefaultLockTimeout              = 10 * time.Second
	DefaultIdleInTransactionTimeout = time.Minute
	DefaultGroupCommitTimeout       = 10 * time.Second
)

func defaultConfig() config {
	return config{table: DefaultTable, groupCommitTimeout: DefaultGroupCommitTimeout,
		lockTimeout: DefaultLockTimeout, idleTimeout: DefaultIdleInTransactionTimeout, gapPolicy: FailOnGap}
}

// tableName is an unquoted identifier, optionally schema-qualified.
var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]*\.)?[a-z_][a-z0-9_]*$`)

func (c config) validate() error {
	if !tableName.MatchString(c.table) || len(c.table) > 127 {
		return fmt.Errorf("pgsink: table %q: must be a lower-case identifier, optionally schema.table", c.table)
	}
	var errs []error
	if c.groupCommitTimeout <= 0 {
		errs = append(errs, fmt.Errorf("pgsink: GroupCommitTimeout %s must be positive", c.groupCommitTimeout))
	}
	if c.lockTimeout < 0 || c.lockTimeout%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("pgsink: LockTimeout %s must be whole milliseconds, 0 or more", c.lockTimeout))
	}
	if c.idleTimeout < 0 || c.idleTimeout%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("pgsink: IdleInTransactionTimeout %s must be whole milliseconds, 0 or more", c.idleTimeout))
	}
	if c.gapPolicy != FailOnGap && c.gapPolicy != RecordGapAndContinue {
		errs = append(errs, fmt.Errorf("pgsink: unknown GapPolicy %d", c.gapPolicy))
	}
	return errors.Join(errs...)
}

// Table names the offsets table (lower-case, optionally schema.table).
// Default DefaultTable. Groups share it: rows are keyed by group id.
func Table(name string) Opt { return func(c *config) { c.table = name } }

// GroupOptions passes options to the consumer's client.GroupConsumer
// (client id, fetch sizes, credentials, StartWhenNoCommit, OnAssigned,
// OnRevoked). The sink sets client.StartOffsets itself, and turns
// client.AutoCommit off (it would commit what Poll returned, applied or
// not), so those passed here have no effect. Default none.
func GroupOptions(opts ...client.GroupOpt) Opt {
	return func(c *config) { c.groupOpts = append(c.groupOpts, opts...) }
}

// AfterCommit is called by Consumer.Apply after the database transaction
// committed and before the offsets are committed to the group
// coordinator, with the sink's next offset of each partition the
// transaction applied records of. It runs on Apply's goroutine and holds
// Apply up. Default none.
func AfterCommit(fn func(ctx context.Context, next map[client.TopicPartition]int64)) Opt {
	return func(c *config) { c.afterCommit = fn }
}

// OnGroupCommitError is told when committing the applied offsets to the
// group coordinator failed. Nothing is lost (the offsets that count are in
// the database), only `strata group describe` shows a larger lag until
// the next commit. Default none: the error is dropped.
func OnGroupCommitError(fn func(error)) Opt { return func(c *config) { c.onGroupCommitError = fn } }

// GroupCommitTimeout bounds each call a Consumer makes to the group
// coordinator: the commit after each applied batch, so an unreachable
// coordinator does not hold the sink up, and the heartbeat that confirms
// the member still belongs to the group before it takes partitions
// (ConfirmMembership). Default DefaultGroupCommitTimeout (10s).
func GroupCommitTimeout(d time.Duration) Opt { return func(c *config) { c.groupCommitTimeout = d } }

// LockTimeout is PostgreSQL's lock_timeout for the sink's transactions
// (SET LOCAL, so the pool's sessions keep their own setting): how long
// Apply waits for an offsets row another session holds (a previous owner's
// transaction, or a paused member's) before it fails, and how long it
// waits to take over a partition whose assignment is pending (see
// Sink.Assign). 0 waits without end. Default DefaultLockTimeout (10s).
func LockTimeout(d time.Duration) Opt { return func(c *config) { c.lockTimeout = d } }

// IdleInTransactionTimeout is PostgreSQL's
// idle_in_transaction_session_timeout for the sink's transactions (SET
// LOCAL): the server ends the session of a transaction left idle that
// long, releasing its row locks, so a member paused inside Apply (a
// stopped process, a long GC pause, an ApplyFunc waiting on something else
// than the database) cannot hold its partitions' rows, and so their next
// owner, for good. The ApplyFunc must not leave the transaction idle for
// longer. 0 leaves it to the server's setting. Default
// DefaultIdleInTransactionTimeout (1 minute).
func IdleInTransactionTimeout(d time.Duration) Opt { return func(c *config) { c.idleTimeout = d } }

// GapPolicy says what Apply does when the log no longer holds records the
// sink has not applied: retention, or a deletion of records, moved the
// partition's log start past the sink's next offset.
type GapPolicy int

const (
	// FailOnGap (the default) fails Apply with an error matching ErrGap
	// and applies nothing, until an operator decides: a consumer group
	// with auto.offset.reset=none fails the same way in Kafka. The error
	// says how to go on.
	FailOnGap GapPolicy = iota
	// RecordGapAndContinue records the gap in the partition's offsets row
	// (gap_offsets, last_gap_from, last_gap_to, last_gap_at) in the
	// transaction that applies the records after it, logs it, tells
	// OnGap, lists it in Result.Gaps, and goes on.
	RecordGapAndContinue
)

// Gaps sets the GapPolicy. Default FailOnGap.
func Gaps(p GapPolicy) Opt { return func(c *config) { c.gapPolicy = p } }

// OnGap is told of each gap recorded under RecordGapAndContinue, after
// the transaction that recorded it committed, on Apply's goroutine.
// Default none (the gap is still logged and kept in the table).
func OnGap(fn func(Gap)) Opt { return func(c *config) { c.onGap = fn } }

// LogStartOffsets tells a Sink made with New where each partition's log
// starts, so it can tell a gap (records deleted before they were applied)
// from offsets a compacted topic or control batches leave out; a Consumer
// uses its group consumer's (client.GroupConsumer.LogStartOffset). Without
// it a Sink made with New detects no gap. Default none.
func LogStartOffsets(fn func(client.TopicPartition) (int64, bool)) Opt {
	return func(c *config) { c.logStart = fn }
}

// Logger receives the sink's log lines (a gap recorded). Default
// slog.Default().
func Logger(l *slog.Logger) Opt { return func(c *config) { c.logger = l } }
