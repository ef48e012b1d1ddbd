package offsetstore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore/storetest"
	"github.com/strata-mq/strata/services/coordinator/pgtest"
)

func TestSQLiteConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) offsetstore.Store {
		s, err := offsetstore.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "offsets.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestPostgresConformance runs the suite against a fresh database on the
// machine's Postgres; it fails when Postgres is not there.
func TestPostgresConformance(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	storetest.Run(t, func(t *testing.T) offsetstore.Store {
		s, err := offsetstore.OpenPostgres(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		// One database for the whole run: start each subtest empty.
		if _, err := s.Pool().Exec(context.Background(), `TRUNCATE strata_groups, strata_offsets, strata_txn_owners, strata_txn_state, strata_txn_partitions, strata_txn_groups, strata_txn_pending_offsets`); err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestMigrationsIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "offsets.db")
	for range 2 {
		s, err := offsetstore.OpenSQLite(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	dsn := pgtest.NewDatabase(t)
	for range 2 {
		s, err := offsetstore.OpenPostgres(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
}
