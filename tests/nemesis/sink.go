package nemesis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/client/pgsink"
	"github.com/strata-mq/strata/tests/nemesis/history"
)

// The sink: members of a consumer group that apply the pipelined topic's
// records to PostgreSQL through client/pgsink, one effect row per record,
// in the transaction that moves the sink's offsets. Once the run is over
// the rows go into the history (an effects note) and the checker asks for
// exactly one per record of the log.
//
// The sink uses the machine's PostgreSQL (127.0.0.1:5432, database test),
// not the bed's: the bed's is the coordinator's, which postgres-restart
// crashes, and the sink is judged on what it writes, not on surviving a
// database crash. Its two tables are the run's own and are dropped at the
// end.

const (
	sinkMembers = 2
	sinkGroup   = "nemesis-sink"
	sinkDSN     = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	// sinkCatchUp bounds the wait, after the final read, for the sink to
	// apply every partition to its end; what it has not applied by then
	// is not judged (the effects note says where it stopped).
	sinkCatchUp = 2 * time.Minute
)

// sink is the run's sink: its database and tables, and its members.
type sink struct {
	pool    *pgxpool.Pool
	offsets string // pgsink's offsets table
	effects string // one row per record applied

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// startSink makes the sink's tables and starts its members; they run
// until stopSink.
func (r *run) startSink(ctx context.Context) (*sink, error) {
	pool, err := pgxpool.New(ctx, sinkDSN)
	if err != nil {
		return nil, fmt.Errorf("sink: %w", err)
	}
	name := fmt.Sprintf("nemesis_%d_%d", os.Getpid(), time.Now().UnixNano())
	s := &sink{pool: pool, offsets: name + "_offsets", effects: name + "_effects"}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (
		id bigserial PRIMARY KEY, topic text NOT NULL, partition_index integer NOT NULL,
		record_offset bigint NOT NULL, value text NOT NULL)`, s.effects)); err != nil {
		pool.Close()
		return nil, fmt.Errorf("sink: %s on %s: %w", s.effects, sinkDSN, err)
	}
	r.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, t := range []string{s.effects, s.offsets} {
			if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
				r.t.Logf("nemesis: dropping %s: %v", t, err)
			}
		}
		pool.Close()
	})
	mctx, stop := context.WithCancel(ctx)
	s.stop = stop
	for i := range sinkMembers {
		s.wg.Go(func() { r.sinkMember(mctx, s, i+1) })
	}
	return s, nil
}

// sinkMember is one member of the sink's group: it polls and applies
// until ctx ends, then leaves the group. A failed Apply rewinds its
// partitions (pgsink), so the records come again.
func (r *run) sinkMember(ctx context.Context, s *sink, id int) {
	name := fmt.Sprintf("sink-%d", id)
	c, err := pgsink.NewConsumer(ctx, s.pool, r.bed.group.Gateway.URL, sinkGroup, []string{pipelineTopic},
		pgsink.Table(s.offsets), pgsink.GroupOptions(client.ClientID(name)))
	if err != nil {
		r.t.Errorf("nemesis: %s: %v", name, err)
		return
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		c.Close(cctx)
	}()
	write := func(ctx context.Context, tx pgx.Tx, recs []*client.Record) error {
		rows := make([][]any, len(recs))
		for i, rec := range recs {
			rows[i] = []any{rec.Topic, rec.Partition, rec.Offset, string(rec.Value)}
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{s.effects}, []string{"topic", "partition_index", "record_offset", "value"}, pgx.CopyFromRows(rows))
		return err
	}
	for ctx.Err() == nil {
		recs, err := pollOnce(ctx, 2*time.Second, c.Poll)
		if err != nil || len(recs) == 0 {
			if err != nil {
				sleep(ctx, 100*time.Millisecond)
			}
			continue
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_, err = c.Apply(actx, recs, write)
		cancel()
		if err != nil && !errors.Is(err, client.ErrFenced) {
			sleep(ctx, 100*time.Millisecond)
		}
	}
}

// finishSink waits until the sink has applied every partition of the
// pipelined topic up to ends (from the final read), up to sinkCatchUp,
// stops its members, and records its rows and offsets in the history.
func (r *run) finishSink(ctx context.Context, s *sink, ends map[history.TopicPartition]int64) error {
	wctx, cancel := context.WithTimeout(ctx, sinkCatchUp)
	defer cancel()
	var next []history.PartitionOffset
	var behind string
	for {
		var err error
		next, err = r.sinkOffsets(wctx, s)
		behind = ""
		if err != nil {
			behind = err.Error()
		}
		for tp, end := range ends {
			if tp.Topic != pipelineTopic {
				continue
			}
			i := slices.IndexFunc(next, func(po history.PartitionOffset) bool { return po.TP() == tp })
			if i < 0 || next[i].Offset < end {
				behind += fmt.Sprintf(" %v (end %d)", tp, end)
			}
		}
		if behind == "" || !sleep(wctx, 250*time.Millisecond) {
			break
		}
	}
	s.stop()
	s.wg.Wait()
	// The members are gone: the offsets and rows read now are final.
	next, err := r.sinkOffsets(ctx, s)
	if err != nil {
		return err
	}
	rows, err := s.pool.Query(ctx, fmt.Sprintf("SELECT topic, partition_index, record_offset, value FROM %s ORDER BY id", s.effects))
	if err != nil {
		return fmt.Errorf("sink: reading %s: %w", s.effects, err)
	}
	var recs []history.Record
	for rows.Next() {
		var rec history.Record
		if err := rows.Scan(&rec.Topic, &rec.Partition, &rec.Offset, &rec.Value); err != nil {
			rows.Close()
			return fmt.Errorf("sink: reading %s: %w", s.effects, err)
		}
		recs = append(recs, rec)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sink: reading %s: %w", s.effects, err)
	}
	r.rec.Note("sink", history.EffectsOp(history.Effects{Group: sinkGroup, Topics: []string{pipelineTopic}, Next: next, Rows: recs}))
	if behind != "" {
		return fmt.Errorf("sink: not caught up within %v:%s", sinkCatchUp, behind)
	}
	return nil
}

// sinkOffsets reads the sink's offsets table: each partition's next
// offset to apply.
func (r *run) sinkOffsets(ctx context.Context, s *sink) ([]history.PartitionOffset, error) {
	rows, err := s.pool.Query(ctx, fmt.Sprintf("SELECT topic, partition_index, next_offset FROM %s WHERE group_id = $1", s.offsets), sinkGroup)
	if err != nil {
		return nil, fmt.Errorf("sink: reading %s: %w", s.offsets, err)
	}
	defer rows.Close()
	var out []history.PartitionOffset
	for rows.Next() {
		var po history.PartitionOffset
		if err := rows.Scan(&po.Topic, &po.Partition, &po.Offset); err != nil {
			return nil, fmt.Errorf("sink: reading %s: %w", s.offsets, err)
		}
		out = append(out, po)
	}
	return out, rows.Err()
}
