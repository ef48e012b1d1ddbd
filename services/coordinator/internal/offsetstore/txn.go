package offsetstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Transaction state (docs/design/transactions.md, "Tables"): one row per
// transactional id in strata_txn_state, its partitions and groups in
// strata_txn_partitions and strata_txn_groups, offsets staged by
// TxnOffsetCommit in strata_txn_pending_offsets. The rules that move a
// row from state to state are the coordinator's (package txn); the store
// runs each in one database transaction, with the transactional id's
// ownership fence checked and its row locked, so two instances never both
// change a transaction and a change is durable before it is answered.
//
// Lock order, to keep PostgreSQL free of deadlocks: a transaction's row
// before any group row, and group rows before offsets. UpdateTxn takes
// the ownership row, then the transaction's row, then (committing staged
// offsets) the groups' rows in id order; StageTxnOffsets the transaction's
// row, then the group's.

// TxnState is a transactional id's state, Kafka's TransactionState. The
// strings are stored in strata_txn_state.state: part of the format, do
// not change.
type TxnState string

// The states of a transactional id.
const (
	TxnEmpty          TxnState = "Empty"
	TxnOngoing        TxnState = "Ongoing"
	TxnPrepareCommit  TxnState = "PrepareCommit"
	TxnPrepareAbort   TxnState = "PrepareAbort"
	TxnCompleteCommit TxnState = "CompleteCommit"
	TxnCompleteAbort  TxnState = "CompleteAbort"
)

// TxnPartition is a partition of a transaction.
type TxnPartition struct {
	Topic     string
	Partition int32
}

// Txn is a transactional id's row with its partitions and groups.
type Txn struct {
	ID            string
	ProducerID    int64
	ProducerEpoch int16
	// LastProducerID and LastProducerEpoch are the producer id and
	// epoch before the last bump, -1 when none: a producer that retries
	// an InitProducerId whose answer it lost names them (KIP-360).
	LastProducerID    int64
	LastProducerEpoch int16
	State             TxnState
	TimeoutMs         int32     // transaction.timeout.ms
	Started           time.Time // when the current transaction became Ongoing; zero when none has
	Updated           time.Time // when the row last changed
	// Partitions of the current transaction, sorted; in Prepare* those
	// whose marker is still to be written.
	Partitions []TxnPartition
	// Groups whose offsets the current transaction commits, sorted.
	Groups []string
}

// StagedOffsets says what a state change does with the transaction's
// staged offsets.
type StagedOffsets uint8

const (
	// KeepStaged leaves them; the zero value.
	KeepStaged StagedOffsets = iota
	// CommitStaged moves them into the groups' committed offsets
	// (PrepareCommit).
	CommitStaged
	// DropStaged deletes them (PrepareAbort).
	DropStaged
)

// TxnWrite is what UpdateTxn writes.
type TxnWrite struct {
	// Row replaces the transaction's row, partitions and groups
	// included; nil writes nothing.
	Row *Txn
	// Staged is what becomes of the staged offsets, in the same
	// database transaction.
	Staged StagedOffsets
	// Delete removes the row, its partitions, groups and staged
	// offsets (the transactional id expired); Row and Staged are then
	// ignored. The ownership row stays, so the owner epoch keeps
	// growing.
	Delete bool
}

// TxnStore keeps transaction state. Implementations are safe for
// concurrent use.
type TxnStore interface {
	// UpdateTxn calls fn with the row of the transactional id f names
	// (f.Kind TxnKey; cur nil when the id has none) and writes what fn
	// returns, all in one database transaction in which f is checked and
	// the row locked. ErrNotOwner when f no longer holds; fn's error is
	// returned as it is, and nothing is written.
	UpdateTxn(ctx context.Context, f Fence, fn func(cur *Txn) (TxnWrite, error)) error
	// LoadTxn returns the row with its partitions and groups; false when
	// the id has none.
	LoadTxn(ctx context.Context, id string) (Txn, bool, error)
	// ListTxns returns the rows in any of states (every row when none),
	// sorted by id, without partitions and groups.
	ListTxns(ctx context.Context, states ...TxnState) ([]Txn, error)
	// StageTxnOffsets stages offsets of the group f names (f.Kind
	// GroupKey) for transaction id, replacing earlier staged offsets of
	// the same partitions: in one database transaction it locks the
	// transaction's row, calls check with it (nil when none), checks f,
	// and stages only when both pass. ErrNotOwner when f no longer holds;
	// check's error is returned as it is.
	StageTxnOffsets(ctx context.Context, f Fence, id string, check func(cur *Txn) error, offsets []Offset) error
	// StagedTxnOffsets returns the offsets staged for transaction id,
	// sorted by group, topic and partition; groups[i] is the group of
	// offsets[i].
	StagedTxnOffsets(ctx context.Context, id string) (groups []string, offsets []Offset, err error)
	// UnstableTxnOffsets returns the partitions of group for which some
	// ongoing transaction has offsets staged, sorted by topic and
	// partition, each once: the partitions an OffsetFetch with
	// require_stable (KIP-447) must not answer yet.
	UnstableTxnOffsets(ctx context.Context, group string) ([]Offset, error)
}

// dbq is one database transaction, or the pool outside one, in either
// dialect. Queries are written with PostgreSQL's $n placeholders; the
// SQLite implementation rewrites them to ?n.
type dbq interface {
	exec(ctx context.Context, q string, args ...any) error
	query(ctx context.Context, q string, args ...any) (rowIter, error)
	// forUpdate is the row-locking suffix of a SELECT: " FOR UPDATE" on
	// PostgreSQL, empty on SQLite, whose one connection serializes
	// transactions.
	forUpdate() string
}

// rowIter is the part of pgx.Rows and *sql.Rows the queries use.
type rowIter interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// txnDB is what each dialect provides to the shared code below.
type txnDB interface {
	// inTx runs fn in one database transaction, committed when fn
	// returns nil.
	inTx(ctx context.Context, fn func(q dbq) error) error
	// outside is the pool, for reads outside a transaction.
	outside() dbq
}

func sqliteParams(q string) string { return strings.ReplaceAll(q, "$", "?") }

// checkFence fails with ErrNotOwner unless f still holds, locking its
// ownership row.
func checkFence(ctx context.Context, q dbq, f Fence) error {
	table, key := ownerTable(f.Kind)
	rows, err := q.query(ctx, `SELECT owner_id, owner_epoch FROM `+table+` WHERE `+key+` = $1`+q.forUpdate(), f.GroupID)
	if err != nil {
		return fmt.Errorf("offsetstore: %s: %w", f.GroupID, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fmt.Errorf("offsetstore: %s: %w", f.GroupID, err)
		}
		return ErrNotOwner
	}
	var owner string
	var epoch int64
	if err := rows.Scan(&owner, &epoch); err != nil {
		return fmt.Errorf("offsetstore: %s: %w", f.GroupID, err)
	}
	if owner != f.OwnerID || epoch != f.OwnerEpoch {
		return ErrNotOwner
	}
	return nil
}

const txnColumns = `transactional_id, producer_id, producer_epoch, last_producer_id, last_producer_epoch, state, timeout_ms, started_ms, updated_ms`

func scanTxn(rows rowIter) (Txn, error) {
	var t Txn
	var epoch, lastEpoch int64
	var timeout int64
	var state string
	var started, updated int64
	if err := rows.Scan(&t.ID, &t.ProducerID, &epoch, &t.LastProducerID, &lastEpoch, &state, &timeout, &started, &updated); err != nil {
		return t, err
	}
	t.ProducerEpoch, t.LastProducerEpoch, t.State, t.TimeoutMs = int16(epoch), int16(lastEpoch), TxnState(state), int32(timeout)
	if started >= 0 {
		t.Started = fromMS(started)
	}
	t.Updated = fromMS(updated)
	return t, nil
}

// loadTxn reads id's row, its partitions and groups; nil when none. With
// lock the row is locked for the rest of the database transaction.
func loadTxn(ctx context.Context, q dbq, id string, lock bool) (*Txn, error) {
	suffix := ""
	if lock {
		suffix = q.forUpdate()
	}
	rows, err := q.query(ctx, `SELECT `+txnColumns+` FROM strata_txn_state WHERE transactional_id = $1`+suffix, id)
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		err := rows.Err()
		rows.Close()
		return nil, err
	}
	t, err := scanTxn(rows)
	rows.Close()
	if err != nil {
		return nil, err
	}
	if rows, err = q.query(ctx, `SELECT topic, partition_index FROM strata_txn_partitions WHERE transactional_id = $1 ORDER BY topic, partition_index`, id); err != nil {
		return nil, err
	}
	for rows.Next() {
		var p TxnPartition
		if err := rows.Scan(&p.Topic, &p.Partition); err != nil {
			rows.Close()
			return nil, err
		}
		t.Partitions = append(t.Partitions, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if rows, err = q.query(ctx, `SELECT group_id FROM strata_txn_groups WHERE transactional_id = $1 ORDER BY group_id`, id); err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return nil, err
		}
		t.Groups = append(t.Groups, g)
	}
	return &t, rows.Err()
}

// writeTxn replaces id's row, partitions and groups with t's.
func writeTxn(ctx context.Context, q dbq, t *Txn) error {
	started := int64(-1)
	if !t.Started.IsZero() {
		started = ms(t.Started)
	}
	updated := t.Updated
	if updated.IsZero() {
		updated = time.Now()
	}
	if err := q.exec(ctx, `
INSERT INTO strata_txn_state (`+txnColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (transactional_id) DO UPDATE
   SET producer_id = excluded.producer_id, producer_epoch = excluded.producer_epoch,
       last_producer_id = excluded.last_producer_id, last_producer_epoch = excluded.last_producer_epoch,
       state = excluded.state, timeout_ms = excluded.timeout_ms, started_ms = excluded.started_ms, updated_ms = excluded.updated_ms`,
		t.ID, t.ProducerID, int32(t.ProducerEpoch), t.LastProducerID, int32(t.LastProducerEpoch), string(t.State), t.TimeoutMs, started, ms(updated)); err != nil {
		return err
	}
	if err := q.exec(ctx, `DELETE FROM strata_txn_partitions WHERE transactional_id = $1`, t.ID); err != nil {
		return err
	}
	for _, p := range t.Partitions {
		if err := q.exec(ctx, `INSERT INTO strata_txn_partitions (transactional_id, topic, partition_index) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
			t.ID, p.Topic, p.Partition); err != nil {
			return err
		}
	}
	if err := q.exec(ctx, `DELETE FROM strata_txn_groups WHERE transactional_id = $1`, t.ID); err != nil {
		return err
	}
	for _, g := range t.Groups {
		if err := q.exec(ctx, `INSERT INTO strata_txn_groups (transactional_id, group_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, t.ID, g); err != nil {
			return err
		}
	}
	return nil
}

// commitStaged moves id's staged offsets into the groups' committed
// offsets, after locking the groups' rows (in id order) so that the move
// is serialized with the groups' own commits.
func commitStaged(ctx context.Context, q dbq, id string) error {
	rows, err := q.query(ctx, `SELECT group_id FROM strata_groups WHERE group_id IN
		(SELECT group_id FROM strata_txn_pending_offsets WHERE transactional_id = $1) ORDER BY group_id`+q.forUpdate(), id)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if err := q.exec(ctx, `
INSERT INTO strata_offsets (group_id, topic, partition_index, committed_offset, leader_epoch, metadata, commit_time_ms)
SELECT group_id, topic, partition_index, committed_offset, leader_epoch, metadata, commit_time_ms
  FROM strata_txn_pending_offsets WHERE transactional_id = $1
ON CONFLICT (group_id, topic, partition_index) DO UPDATE
   SET committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch,
       metadata = excluded.metadata, commit_time_ms = excluded.commit_time_ms`, id); err != nil {
		return err
	}
	return q.exec(ctx, `DELETE FROM strata_txn_pending_offsets WHERE transactional_id = $1`, id)
}

func updateTxn(ctx context.Context, db txnDB, f Fence, fn func(cur *Txn) (TxnWrite, error)) error {
	if f.Kind != TxnKey {
		return fmt.Errorf("offsetstore: UpdateTxn under a group's fence (%s)", f.GroupID)
	}
	var fnErr error
	err := db.inTx(ctx, func(q dbq) error {
		if err := checkFence(ctx, q, f); err != nil {
			return err
		}
		cur, err := loadTxn(ctx, q, f.GroupID, true)
		if err != nil {
			return fmt.Errorf("offsetstore: load transaction %s: %w", f.GroupID, err)
		}
		w, err := fn(cur)
		if err != nil {
			fnErr = err
			return err
		}
		if w.Delete {
			for _, table := range []string{"strata_txn_state", "strata_txn_partitions", "strata_txn_groups", "strata_txn_pending_offsets"} {
				if err := q.exec(ctx, `DELETE FROM `+table+` WHERE transactional_id = $1`, f.GroupID); err != nil {
					return fmt.Errorf("offsetstore: delete transaction %s: %w", f.GroupID, err)
				}
			}
			return nil
		}
		if w.Row != nil {
			if w.Row.ID != f.GroupID {
				return fmt.Errorf("offsetstore: transaction %s written under the fence of %s", w.Row.ID, f.GroupID)
			}
			if err := writeTxn(ctx, q, w.Row); err != nil {
				return fmt.Errorf("offsetstore: write transaction %s: %w", f.GroupID, err)
			}
		}
		switch w.Staged {
		case CommitStaged:
			if err := commitStaged(ctx, q, f.GroupID); err != nil {
				return fmt.Errorf("offsetstore: commit staged offsets of %s: %w", f.GroupID, err)
			}
		case DropStaged:
			if err := q.exec(ctx, `DELETE FROM strata_txn_pending_offsets WHERE transactional_id = $1`, f.GroupID); err != nil {
				return fmt.Errorf("offsetstore: drop staged offsets of %s: %w", f.GroupID, err)
			}
		}
		return nil
	})
	if fnErr != nil && errors.Is(err, fnErr) {
		return fnErr // as fn returned it, unwrapped by the dialect
	}
	return err
}

func stageTxnOffsets(ctx context.Context, db txnDB, f Fence, id string, check func(cur *Txn) error, offsets []Offset) error {
	if f.Kind != GroupKey {
		return fmt.Errorf("offsetstore: StageTxnOffsets under a transaction's fence (%s)", f.GroupID)
	}
	now := time.Now()
	var checkErr error
	err := db.inTx(ctx, func(q dbq) error {
		cur, err := loadTxn(ctx, q, id, true)
		if err != nil {
			return fmt.Errorf("offsetstore: load transaction %s: %w", id, err)
		}
		if err := checkFence(ctx, q, f); err != nil {
			return err
		}
		if err := check(cur); err != nil {
			checkErr = err
			return err
		}
		for _, o := range offsets {
			t := o.CommitTime
			if t.IsZero() {
				t = now
			}
			if err := q.exec(ctx, `
INSERT INTO strata_txn_pending_offsets (transactional_id, group_id, topic, partition_index, committed_offset, leader_epoch, metadata, commit_time_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (transactional_id, group_id, topic, partition_index) DO UPDATE
   SET committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch,
       metadata = excluded.metadata, commit_time_ms = excluded.commit_time_ms`,
				id, f.GroupID, o.Topic, o.Partition, o.Offset, o.LeaderEpoch, o.Metadata, ms(t)); err != nil {
				return fmt.Errorf("offsetstore: stage offsets of %s for %s: %w", f.GroupID, id, err)
			}
		}
		return nil
	})
	if checkErr != nil && errors.Is(err, checkErr) {
		return checkErr
	}
	return err
}

func loadTxnOutside(ctx context.Context, db txnDB, id string) (Txn, bool, error) {
	t, err := loadTxn(ctx, db.outside(), id, false)
	if err != nil {
		return Txn{}, false, fmt.Errorf("offsetstore: load transaction %s: %w", id, err)
	}
	if t == nil {
		return Txn{}, false, nil
	}
	return *t, true, nil
}

func listTxns(ctx context.Context, db txnDB, states []TxnState) ([]Txn, error) {
	where := ""
	args := make([]any, len(states))
	for i, st := range states {
		if i == 0 {
			where = " WHERE state IN ("
		} else {
			where += ", "
		}
		where += fmt.Sprintf("$%d", i+1)
		args[i] = string(st)
	}
	if where != "" {
		where += ")"
	}
	rows, err := db.outside().query(ctx, `SELECT `+txnColumns+` FROM strata_txn_state`+where+` ORDER BY transactional_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("offsetstore: list transactions: %w", err)
	}
	defer rows.Close()
	var out []Txn
	for rows.Next() {
		t, err := scanTxn(rows)
		if err != nil {
			return nil, fmt.Errorf("offsetstore: list transactions: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func unstableTxnOffsets(ctx context.Context, db txnDB, group string) ([]Offset, error) {
	rows, err := db.outside().query(ctx, `SELECT DISTINCT topic, partition_index FROM strata_txn_pending_offsets
		WHERE group_id = $1 ORDER BY topic, partition_index`, group)
	if err != nil {
		return nil, fmt.Errorf("offsetstore: offsets staged for %s: %w", group, err)
	}
	defer rows.Close()
	var out []Offset
	for rows.Next() {
		var o Offset
		if err := rows.Scan(&o.Topic, &o.Partition); err != nil {
			return nil, fmt.Errorf("offsetstore: offsets staged for %s: %w", group, err)
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

func stagedTxnOffsets(ctx context.Context, db txnDB, id string) ([]string, []Offset, error) {
	rows, err := db.outside().query(ctx, `SELECT group_id, topic, partition_index, committed_offset, leader_epoch, metadata, commit_time_ms
		FROM strata_txn_pending_offsets WHERE transactional_id = $1 ORDER BY group_id, topic, partition_index`, id)
	if err != nil {
		return nil, nil, fmt.Errorf("offsetstore: staged offsets of %s: %w", id, err)
	}
	defer rows.Close()
	var groups []string
	var out []Offset
	for rows.Next() {
		var g string
		var o Offset
		var t int64
		if err := rows.Scan(&g, &o.Topic, &o.Partition, &o.Offset, &o.LeaderEpoch, &o.Metadata, &t); err != nil {
			return nil, nil, fmt.Errorf("offsetstore: staged offsets of %s: %w", id, err)
		}
		o.CommitTime = fromMS(t)
		groups, out = append(groups, g), append(out, o)
	}
	return groups, out, rows.Err()
}
