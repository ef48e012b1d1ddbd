package pgsink

import (
	"context"
	"fmt"
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
}

func defaultConfig() config {
	return config{table: DefaultTable, groupCommitTimeout: 10 * time.Second}
}

// tableName is an unquoted identifier, optionally schema-qualified.
var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]*\.)?[a-z_][a-z0-9_]*$`)

func (c config) validate() error {
	if !tableName.MatchString(c.table) || len(c.table) > 127 {
		return fmt.Errorf("pgsink: table %q: must be a lower-case identifier, optionally schema.table", c.table)
	}
	if c.groupCommitTimeout <= 0 {
		return fmt.Errorf("pgsink: GroupCommitTimeout %s must be positive", c.groupCommitTimeout)
	}
	return nil
}

// Table names the offsets table (lower-case, optionally schema.table).
// Default DefaultTable. Groups share it: rows are keyed by group id.
func Table(name string) Opt { return func(c *config) { c.table = name } }

// GroupOptions passes options to the consumer's client.GroupConsumer
// (client id, fetch sizes, credentials, StartWhenNoCommit, OnAssigned,
// OnRevoked). The sink sets client.StartOffsets itself, so one passed
// here has no effect; AutoCommit must not be used (the sink commits).
// Default none.
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

// GroupCommitTimeout bounds the commit to the group coordinator after each
// applied batch, so an unreachable coordinator does not hold the sink up.
// Default 10s.
func GroupCommitTimeout(d time.Duration) Opt { return func(c *config) { c.groupCommitTimeout = d } }
