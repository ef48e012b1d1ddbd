package offsetstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// SQLite is the embedded Store: one SQLite file, for single-machine use.
// It holds one connection, so every transaction is serialized in the
// process; two processes must not share the file.
type SQLite struct {
	db        *sql.DB
	closeOnce sync.Once
	closeErr  error
}

// OpenSQLite opens (creating it when missing) the database file at path,
// in WAL mode, and applies the migrations.
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("offsetstore: sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("offsetstore: sqlite %s: %w", path, err)
	}
	s := &SQLite{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *SQLite) migrate(ctx context.Context) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS strata_schema_migrations (version TEXT PRIMARY KEY, applied_ms BIGINT NOT NULL)`); err != nil {
			return fmt.Errorf("offsetstore: migrate: %w", err)
		}
		return applyMigrations("sqlite", func(name, stmt string) (bool, error) {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM strata_schema_migrations WHERE version = ?`, name).Scan(&n); err != nil {
				return false, err
			}
			if n > 0 {
				return false, nil
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return false, err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO strata_schema_migrations (version, applied_ms) VALUES (?, ?)`, name, ms(time.Now()))
			return true, err
		})
	})
}

func (s *SQLite) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("offsetstore: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("offsetstore: commit: %w", err)
	}
	return nil
}

// Claim implements Store.
func (s *SQLite) Claim(ctx context.Context, group, owner, address string, lease time.Duration) (Ownership, bool, error) {
	return s.claim(ctx, GroupKey, group, owner, address, lease)
}

// ClaimTxn implements Store.
func (s *SQLite) ClaimTxn(ctx context.Context, id, owner, address string, lease time.Duration) (Ownership, bool, error) {
	return s.claim(ctx, TxnKey, id, owner, address, lease)
}

func (s *SQLite) claim(ctx context.Context, kind KeyKind, id, owner, address string, lease time.Duration) (Ownership, bool, error) {
	now := time.Now()
	exp := now.Add(lease)
	var epoch int64
	err := s.db.QueryRowContext(ctx, sqliteParams(claimSQL(ownerTable(kind))), id, owner, address, ms(exp), ms(now)).Scan(&epoch)
	if err == nil {
		return Ownership{Kind: kind, GroupID: id, OwnerID: owner, OwnerAddress: address, OwnerEpoch: epoch, LeaseExpires: fromMS(ms(exp))}, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Ownership{}, false, fmt.Errorf("offsetstore: claim %s: %w", id, err)
	}
	o, _, err := s.owner(ctx, kind, id)
	return o, false, err
}

// Owner implements Store.
func (s *SQLite) Owner(ctx context.Context, group string) (Ownership, bool, error) {
	return s.owner(ctx, GroupKey, group)
}

// TxnOwner implements Store.
func (s *SQLite) TxnOwner(ctx context.Context, id string) (Ownership, bool, error) {
	return s.owner(ctx, TxnKey, id)
}

func (s *SQLite) owner(ctx context.Context, kind KeyKind, id string) (Ownership, bool, error) {
	o := Ownership{Kind: kind, GroupID: id}
	table, key := ownerTable(kind)
	var exp int64
	err := s.db.QueryRowContext(ctx, `SELECT owner_id, owner_address, owner_epoch, lease_expires_ms FROM `+table+` WHERE `+key+` = ?`, id).
		Scan(&o.OwnerID, &o.OwnerAddress, &o.OwnerEpoch, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return o, false, nil
	}
	if err != nil {
		return o, false, fmt.Errorf("offsetstore: owner of %s: %w", id, err)
	}
	o.LeaseExpires = fromMS(exp)
	return o, true, nil
}

// fenced runs fn in a transaction after checking that f still holds. The
// single connection serializes it with every other write.
func (s *SQLite) fenced(ctx context.Context, f Fence, fn func(tx *sql.Tx) error) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var owner string
		var epoch int64
		table, key := ownerTable(f.Kind)
		err := tx.QueryRowContext(ctx, `SELECT owner_id, owner_epoch FROM `+table+` WHERE `+key+` = ?`, f.GroupID).Scan(&owner, &epoch)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotOwner
		}
		if err != nil {
			return fmt.Errorf("offsetstore: %s: %w", f.GroupID, err)
		}
		if owner != f.OwnerID || epoch != f.OwnerEpoch {
			return ErrNotOwner
		}
		if err := fn(tx); err != nil {
			return fmt.Errorf("offsetstore: %s: %w", f.GroupID, err)
		}
		return nil
	})
}

func (s *SQLite) execFence(ctx context.Context, what, stmt string, args ...any) error {
	res, err := s.db.ExecContext(ctx, stmt, args...)
	if err != nil {
		return fmt.Errorf("offsetstore: %s: %w", what, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotOwner
	}
	return nil
}

// Renew implements Store.
func (s *SQLite) Renew(ctx context.Context, f Fence, lease time.Duration) error {
	table, key := ownerTable(f.Kind)
	return s.execFence(ctx, "renew "+f.GroupID, `UPDATE `+table+` SET lease_expires_ms = ? WHERE `+key+` = ? AND owner_id = ? AND owner_epoch = ?`,
		ms(time.Now().Add(lease)), f.GroupID, f.OwnerID, f.OwnerEpoch)
}

// Release implements Store.
func (s *SQLite) Release(ctx context.Context, f Fence) error {
	table, key := ownerTable(f.Kind)
	return s.execFence(ctx, "release "+f.GroupID, `UPDATE `+table+` SET lease_expires_ms = 0 WHERE `+key+` = ? AND owner_id = ? AND owner_epoch = ?`,
		f.GroupID, f.OwnerID, f.OwnerEpoch)
}

// SaveGroup implements Store.
func (s *SQLite) SaveGroup(ctx context.Context, f Fence, g Group) error {
	return s.fenced(ctx, f, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE strata_groups SET has_state = 1, state = ?, member_count = ?, data = ?, updated_ms = ?, protocol_type = ? WHERE group_id = ?`,
			g.State, g.MemberCount, g.Data, ms(time.Now()), g.ProtocolType, f.GroupID)
		return err
	})
}

// LoadGroup implements Store.
func (s *SQLite) LoadGroup(ctx context.Context, group string) (Group, bool, error) {
	g := Group{GroupID: group}
	err := s.db.QueryRowContext(ctx, `SELECT state, member_count, data, protocol_type FROM strata_groups WHERE group_id = ? AND has_state = 1`, group).
		Scan(&g.State, &g.MemberCount, &g.Data, &g.ProtocolType)
	if errors.Is(err, sql.ErrNoRows) {
		return g, false, nil
	}
	if err != nil {
		return g, false, fmt.Errorf("offsetstore: load %s: %w", group, err)
	}
	return g, true, nil
}

// CommitOffsets implements Store.
func (s *SQLite) CommitOffsets(ctx context.Context, f Fence, offsets []Offset) error {
	now := time.Now()
	return s.fenced(ctx, f, func(tx *sql.Tx) error {
		for _, o := range offsets {
			t := o.CommitTime
			if t.IsZero() {
				t = now
			}
			if _, err := tx.ExecContext(ctx, `
INSERT INTO strata_offsets (group_id, topic, partition_index, committed_offset, leader_epoch, metadata, commit_time_ms)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (group_id, topic, partition_index) DO UPDATE
   SET committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch,
       metadata = excluded.metadata, commit_time_ms = excluded.commit_time_ms`,
				f.GroupID, o.Topic, o.Partition, o.Offset, o.LeaderEpoch, o.Metadata, ms(t)); err != nil {
				return err
			}
		}
		return nil
	})
}

// FetchOffsets implements Store.
func (s *SQLite) FetchOffsets(ctx context.Context, group string) ([]Offset, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT topic, partition_index, committed_offset, leader_epoch, metadata, commit_time_ms
		FROM strata_offsets WHERE group_id = ? ORDER BY topic, partition_index`, group)
	if err != nil {
		return nil, fmt.Errorf("offsetstore: fetch offsets of %s: %w", group, err)
	}
	defer rows.Close()
	var out []Offset
	for rows.Next() {
		var o Offset
		var t int64
		if err := rows.Scan(&o.Topic, &o.Partition, &o.Offset, &o.LeaderEpoch, &o.Metadata, &t); err != nil {
			return nil, fmt.Errorf("offsetstore: fetch offsets of %s: %w", group, err)
		}
		o.CommitTime = fromMS(t)
		out = append(out, o)
	}
	return out, rows.Err()
}

// ListGroups implements Store.
func (s *SQLite) ListGroups(ctx context.Context) ([]Group, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT g.group_id, CASE WHEN g.has_state = 1 THEN g.state ELSE 'empty' END, CASE WHEN g.has_state = 1 THEN g.member_count ELSE 0 END,
       CASE WHEN g.has_state = 1 THEN g.protocol_type ELSE '' END
  FROM strata_groups g
 WHERE g.has_state = 1 OR EXISTS (SELECT 1 FROM strata_offsets o WHERE o.group_id = g.group_id)
 ORDER BY g.group_id`)
	if err != nil {
		return nil, fmt.Errorf("offsetstore: list groups: %w", err)
	}
	defer rows.Close()
	var out []Group
	for rows.Next() {
		var g Group
		if err := rows.Scan(&g.GroupID, &g.State, &g.MemberCount, &g.ProtocolType); err != nil {
			return nil, fmt.Errorf("offsetstore: list groups: %w", err)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// DeleteGroup implements Store.
// DeleteOffsets implements Store.
func (s *SQLite) DeleteOffsets(ctx context.Context, f Fence, parts []Offset) error {
	return s.fenced(ctx, f, func(tx *sql.Tx) error {
		for _, o := range parts {
			if _, err := tx.ExecContext(ctx, `DELETE FROM strata_offsets WHERE group_id = ? AND topic = ? AND partition_index = ?`,
				f.GroupID, o.Topic, o.Partition); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteGroup implements Store.
func (s *SQLite) DeleteGroup(ctx context.Context, f Fence) error {
	return s.fenced(ctx, f, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM strata_offsets WHERE group_id = ?`, f.GroupID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE strata_groups SET has_state = 0, state = 'empty', member_count = 0, data = NULL, protocol_type = '', updated_ms = ? WHERE group_id = ?`,
			ms(time.Now()), f.GroupID)
		return err
	})
}

// Close implements Store.
func (s *SQLite) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.db.Close() })
	return s.closeErr
}
