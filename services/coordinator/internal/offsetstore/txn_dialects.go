package offsetstore

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The two dialects of dbq and txnDB (txn.go).

type pgQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

type pgQ struct{ q pgQuerier }

func (p pgQ) exec(ctx context.Context, q string, args ...any) error {
	_, err := p.q.Exec(ctx, q, args...)
	return err
}

func (p pgQ) query(ctx context.Context, q string, args ...any) (rowIter, error) {
	return p.q.Query(ctx, q, args...)
}

func (pgQ) forUpdate() string { return " FOR UPDATE" }

type pgTxnDB struct{ pool *pgxpool.Pool }

func (d pgTxnDB) inTx(ctx context.Context, fn func(q dbq) error) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return fn(pgQ{tx}) })
}

func (d pgTxnDB) outside() dbq { return pgQ{d.pool} }

type liteQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

type liteQ struct{ q liteQuerier }

func (l liteQ) exec(ctx context.Context, q string, args ...any) error {
	_, err := l.q.ExecContext(ctx, sqliteParams(q), args...)
	return err
}

func (l liteQ) query(ctx context.Context, q string, args ...any) (rowIter, error) {
	rows, err := l.q.QueryContext(ctx, sqliteParams(q), args...)
	if err != nil {
		return nil, err
	}
	return liteRows{rows}, nil
}

func (liteQ) forUpdate() string { return "" }

// liteRows is *sql.Rows with pgx.Rows' Close.
type liteRows struct{ *sql.Rows }

func (r liteRows) Close() { _ = r.Rows.Close() }

type liteTxnDB struct{ s *SQLite }

func (d liteTxnDB) inTx(ctx context.Context, fn func(q dbq) error) error {
	return d.s.tx(ctx, func(tx *sql.Tx) error { return fn(liteQ{tx}) })
}

func (d liteTxnDB) outside() dbq { return liteQ{d.s.db} }

// UpdateTxn implements TxnStore.
func (p *Postgres) UpdateTxn(ctx context.Context, f Fence, fn func(cur *Txn) (TxnWrite, error)) error {
	return updateTxn(ctx, pgTxnDB{p.pool}, f, fn)
}

// LoadTxn implements TxnStore.
func (p *Postgres) LoadTxn(ctx context.Context, id string) (Txn, bool, error) {
	return loadTxnOutside(ctx, pgTxnDB{p.pool}, id)
}

// ListTxns implements TxnStore.
func (p *Postgres) ListTxns(ctx context.Context, states ...TxnState) ([]Txn, error) {
	return listTxns(ctx, pgTxnDB{p.pool}, states)
}

// StageTxnOffsets implements TxnStore.
func (p *Postgres) StageTxnOffsets(ctx context.Context, f Fence, id string, check func(cur *Txn) error, offsets []Offset) error {
	return stageTxnOffsets(ctx, pgTxnDB{p.pool}, f, id, check, offsets)
}

// UnstableTxnOffsets implements TxnStore.
func (p *Postgres) UnstableTxnOffsets(ctx context.Context, group string) ([]Offset, error) {
	return unstableTxnOffsets(ctx, pgTxnDB{p.pool}, group)
}

// StagedTxnOffsets implements TxnStore.
func (p *Postgres) StagedTxnOffsets(ctx context.Context, id string) ([]string, []Offset, error) {
	return stagedTxnOffsets(ctx, pgTxnDB{p.pool}, id)
}

// UpdateTxn implements TxnStore.
func (s *SQLite) UpdateTxn(ctx context.Context, f Fence, fn func(cur *Txn) (TxnWrite, error)) error {
	return updateTxn(ctx, liteTxnDB{s}, f, fn)
}

// LoadTxn implements TxnStore.
func (s *SQLite) LoadTxn(ctx context.Context, id string) (Txn, bool, error) {
	return loadTxnOutside(ctx, liteTxnDB{s}, id)
}

// ListTxns implements TxnStore.
func (s *SQLite) ListTxns(ctx context.Context, states ...TxnState) ([]Txn, error) {
	return listTxns(ctx, liteTxnDB{s}, states)
}

// StageTxnOffsets implements TxnStore.
func (s *SQLite) StageTxnOffsets(ctx context.Context, f Fence, id string, check func(cur *Txn) error, offsets []Offset) error {
	return stageTxnOffsets(ctx, liteTxnDB{s}, f, id, check, offsets)
}

// UnstableTxnOffsets implements TxnStore.
func (s *SQLite) UnstableTxnOffsets(ctx context.Context, group string) ([]Offset, error) {
	return unstableTxnOffsets(ctx, liteTxnDB{s}, group)
}

// StagedTxnOffsets implements TxnStore.
func (s *SQLite) StagedTxnOffsets(ctx context.Context, id string) ([]string, []Offset, error) {
	return stagedTxnOffsets(ctx, liteTxnDB{s}, id)
}
