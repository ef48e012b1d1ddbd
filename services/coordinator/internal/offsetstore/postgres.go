package offsetstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrationLockKey is the pg_advisory_xact_lock key that serializes
// migrations of instances starting at once ("strata" in ASCII).
const migrationLockKey = 0x737472617461

// Postgres is the Store on PostgreSQL through pgxpool.
type Postgres struct {
	pool      *pgxpool.Pool
	closeOnce sync.Once
}

// OpenPostgres connects to dsn (a libpq URL or key=value string), checks
// the connection and applies the migrations.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("offsetstore: bad postgres dsn: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("offsetstore: postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("offsetstore: cannot reach postgres at %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	p := &Postgres{pool: pool}
	if err := p.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return p, nil
}

func (p *Postgres) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLockKey)); err != nil {
			return fmt.Errorf("offsetstore: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS strata_schema_migrations (version TEXT PRIMARY KEY, applied_ms BIGINT NOT NULL)`); err != nil {
			return fmt.Errorf("offsetstore: migrate: %w", err)
		}
		return applyMigrations("postgres", func(name, sql string) (bool, error) {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM strata_schema_migrations WHERE version = $1`, name).Scan(&n); err != nil {
				return false, err
			}
			if n > 0 {
				return false, nil
			}
			if _, err := tx.Exec(ctx, sql); err != nil {
				return false, err
			}
			_, err := tx.Exec(ctx, `INSERT INTO strata_schema_migrations (version, applied_ms) VALUES ($1, $2)`, name, ms(time.Now()))
			return true, err
		})
	})
}

// applyMigrations runs apply for each file of migrations/<dialect>, in name
// order.
func applyMigrations(dialect string, apply func(name, sql string) (bool, error)) error {
	dir := "migrations/" + dialect
	entries, err := fs.ReadDir(migrations, dir)
	if err != nil {
		return fmt.Errorf("offsetstore: migrations: %w", err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		b, err := migrations.ReadFile(dir + "/" + e.Name())
		if err != nil {
			return fmt.Errorf("offsetstore: migrations: %w", err)
		}
		if _, err := apply(e.Name(), string(b)); err != nil {
			return fmt.Errorf("offsetstore: migration %s: %w", e.Name(), err)
		}
	}
	return nil
}

// claimSQL is the claim of a key of the kind whose table and key column
// are given: it succeeds only for a free, expired or own lease, and bumps
// the owner epoch. $1 key, $2 owner, $3 address, $4 lease end, $5 now.
func claimSQL(table, key string) string {
	return `
INSERT INTO ` + table + ` (` + key + `, owner_id, owner_address, owner_epoch, lease_expires_ms)
VALUES ($1, $2, $3, 1, $4)
ON CONFLICT (` + key + `) DO UPDATE
   SET owner_id = excluded.owner_id, owner_address = excluded.owner_address,
       owner_epoch = ` + table + `.owner_epoch + 1, lease_expires_ms = excluded.lease_expires_ms
 WHERE ` + table + `.owner_id = '' OR ` + table + `.owner_id = $2 OR ` + table + `.lease_expires_ms <= $5
RETURNING owner_epoch`
}

// Claim implements Store.
func (p *Postgres) Claim(ctx context.Context, group, owner, address string, lease time.Duration) (Ownership, bool, error) {
	return p.claim(ctx, GroupKey, group, owner, address, lease)
}

// ClaimTxn implements Store.
func (p *Postgres) ClaimTxn(ctx context.Context, id, owner, address string, lease time.Duration) (Ownership, bool, error) {
	return p.claim(ctx, TxnKey, id, owner, address, lease)
}

func (p *Postgres) claim(ctx context.Context, kind KeyKind, id, owner, address string, lease time.Duration) (Ownership, bool, error) {
	now := time.Now()
	exp := now.Add(lease)
	var epoch int64
	err := p.pool.QueryRow(ctx, claimSQL(ownerTable(kind)), id, owner, address, ms(exp), ms(now)).Scan(&epoch)
	if err == nil {
		return Ownership{Kind: kind, GroupID: id, OwnerID: owner, OwnerAddress: address, OwnerEpoch: epoch, LeaseExpires: fromMS(ms(exp))}, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Ownership{}, false, fmt.Errorf("offsetstore: claim %s: %w", id, err)
	}
	o, _, err := p.owner(ctx, kind, id)
	return o, false, err
}

// Owner implements Store.
func (p *Postgres) Owner(ctx context.Context, group string) (Ownership, bool, error) {
	return p.owner(ctx, GroupKey, group)
}

// TxnOwner implements Store.
func (p *Postgres) TxnOwner(ctx context.Context, id string) (Ownership, bool, error) {
	return p.owner(ctx, TxnKey, id)
}

func (p *Postgres) owner(ctx context.Context, kind KeyKind, id string) (Ownership, bool, error) {
	o := Ownership{Kind: kind, GroupID: id}
	table, key := ownerTable(kind)
	var exp int64
	err := p.pool.QueryRow(ctx, `SELECT owner_id, owner_address, owner_epoch, lease_expires_ms FROM `+table+` WHERE `+key+` = $1`, id).
		Scan(&o.OwnerID, &o.OwnerAddress, &o.OwnerEpoch, &exp)
	if errors.Is(err, pgx.ErrNoRows) {
		return o, false, nil
	}
	if err != nil {
		return o, false, fmt.Errorf("offsetstore: owner of %s: %w", id, err)
	}
	o.LeaseExpires = fromMS(exp)
	return o, true, nil
}

// fenced runs fn in a transaction after locking the group row and checking
// that f still holds.
func (p *Postgres) fenced(ctx context.Context, f Fence, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var owner string
		var epoch int64
		table, key := ownerTable(f.Kind)
		err := tx.QueryRow(ctx, `SELECT owner_id, owner_epoch FROM `+table+` WHERE `+key+` = $1 FOR UPDATE`, f.GroupID).Scan(&owner, &epoch)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotOwner
		}
		if err != nil {
			return fmt.Errorf("offsetstore: %s: %w", f.GroupID, err)
		}
		if owner != f.OwnerID || epoch != f.OwnerEpoch {
			return ErrNotOwner
		}
		return fn(tx)
	})
}

// Renew implements Store.
func (p *Postgres) Renew(ctx context.Context, f Fence, lease time.Duration) error {
	table, key := ownerTable(f.Kind)
	tag, err := p.pool.Exec(ctx, `UPDATE `+table+` SET lease_expires_ms = $4 WHERE `+key+` = $1 AND owner_id = $2 AND owner_epoch = $3`,
		f.GroupID, f.OwnerID, f.OwnerEpoch, ms(time.Now().Add(lease)))
	if err != nil {
		return fmt.Errorf("offsetstore: renew %s: %w", f.GroupID, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotOwner
	}
	return nil
}

// Release implements Store.
func (p *Postgres) Release(ctx context.Context, f Fence) error {
	table, key := ownerTable(f.Kind)
	tag, err := p.pool.Exec(ctx, `UPDATE `+table+` SET lease_expires_ms = 0 WHERE `+key+` = $1 AND owner_id = $2 AND owner_epoch = $3`,
		f.GroupID, f.OwnerID, f.OwnerEpoch)
	if err != nil {
		return fmt.Errorf("offsetstore: release %s: %w", f.GroupID, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotOwner
	}
	return nil
}

// SaveGroup implements Store.
func (p *Postgres) SaveGroup(ctx context.Context, f Fence, g Group) error {
	return p.fenced(ctx, f, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE strata_groups SET has_state = TRUE, state = $2, member_count = $3, data = $4, updated_ms = $5, protocol_type = $6 WHERE group_id = $1`,
			f.GroupID, g.State, g.MemberCount, g.Data, ms(time.Now()), g.ProtocolType)
		return err
	})
}

// LoadGroup implements Store.
func (p *Postgres) LoadGroup(ctx context.Context, group string) (Group, bool, error) {
	g := Group{GroupID: group}
	err := p.pool.QueryRow(ctx, `SELECT state, member_count, data, protocol_type FROM strata_groups WHERE group_id = $1 AND has_state`, group).
		Scan(&g.State, &g.MemberCount, &g.Data, &g.ProtocolType)
	if errors.Is(err, pgx.ErrNoRows) {
		return g, false, nil
	}
	if err != nil {
		return g, false, fmt.Errorf("offsetstore: load %s: %w", group, err)
	}
	return g, true, nil
}

const commitSQL = `
INSERT INTO strata_offsets (group_id, topic, partition_index, committed_offset, leader_epoch, metadata, commit_time_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (group_id, topic, partition_index) DO UPDATE
   SET committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch,
       metadata = excluded.metadata, commit_time_ms = excluded.commit_time_ms`

// CommitOffsets implements Store.
func (p *Postgres) CommitOffsets(ctx context.Context, f Fence, offsets []Offset) error {
	now := time.Now()
	return p.fenced(ctx, f, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, o := range offsets {
			t := o.CommitTime
			if t.IsZero() {
				t = now
			}
			b.Queue(commitSQL, f.GroupID, o.Topic, o.Partition, o.Offset, o.LeaderEpoch, o.Metadata, ms(t))
		}
		return tx.SendBatch(ctx, b).Close()
	})
}

// FetchOffsets implements Store.
func (p *Postgres) FetchOffsets(ctx context.Context, group string) ([]Offset, error) {
	rows, err := p.pool.Query(ctx, `SELECT topic, partition_index, committed_offset, leader_epoch, metadata, commit_time_ms
		FROM strata_offsets WHERE group_id = $1 ORDER BY topic, partition_index`, group)
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

const listSQL = `
SELECT g.group_id, CASE WHEN g.has_state THEN g.state ELSE 'empty' END, CASE WHEN g.has_state THEN g.member_count ELSE 0 END,
       CASE WHEN g.has_state THEN g.protocol_type ELSE '' END
  FROM strata_groups g
 WHERE g.has_state OR EXISTS (SELECT 1 FROM strata_offsets o WHERE o.group_id = g.group_id)
 ORDER BY g.group_id`

// ListGroups implements Store.
func (p *Postgres) ListGroups(ctx context.Context) ([]Group, error) {
	rows, err := p.pool.Query(ctx, listSQL)
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
func (p *Postgres) DeleteOffsets(ctx context.Context, f Fence, parts []Offset) error {
	return p.fenced(ctx, f, func(tx pgx.Tx) error {
		for _, o := range parts {
			if _, err := tx.Exec(ctx, `DELETE FROM strata_offsets WHERE group_id = $1 AND topic = $2 AND partition_index = $3`,
				f.GroupID, o.Topic, o.Partition); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteGroup implements Store.
func (p *Postgres) DeleteGroup(ctx context.Context, f Fence) error {
	return p.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM strata_offsets WHERE group_id = $1`, f.GroupID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE strata_groups SET has_state = FALSE, state = 'empty', member_count = 0, data = NULL, protocol_type = '', updated_ms = $2 WHERE group_id = $1`,
			f.GroupID, ms(time.Now()))
		return err
	})
}

// Close implements Store.
func (p *Postgres) Close() error {
	p.closeOnce.Do(p.pool.Close)
	return nil
}

// Pool returns the connection pool, for tests and tools.
func (p *Postgres) Pool() *pgxpool.Pool { return p.pool }
