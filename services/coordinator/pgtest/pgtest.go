// Package pgtest gives tests a fresh, empty Postgres database on the
// machine's server and drops it when the test ends.
//
// The server is found at $STRATA_TEST_POSTGRES (a libpq URL of a database
// the test may connect to in order to create others), by default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. A test that
// asks for a database fails, never skips, when the server is unreachable:
// CI starts Postgres before the tests.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultAdminDSN is the server used when STRATA_TEST_POSTGRES is unset.
const DefaultAdminDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminDSN returns the DSN tests create databases through.
func AdminDSN() string {
	if v := os.Getenv("STRATA_TEST_POSTGRES"); v != "" {
		return v
	}
	return DefaultAdminDSN
}

// NewDatabase creates database strata_test_<random> and returns its DSN.
// The database is dropped (connections forced out) when the test ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin := AdminDSN()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: Postgres is required for this test and is not reachable at %s: %v "+
			"(start it, or point STRATA_TEST_POSTGRES at a server where this user may CREATE DATABASE)", redact(admin), err)
	}
	defer conn.Close(context.Background())
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "strata_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("pgtest: STRATA_TEST_POSTGRES must be a URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}
