package harness

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPostgresRestart: a committed row survives each kind of restart, a
// transaction open across one fails instead of hanging, and a stopped
// server refuses connections until it is started again.
func TestPostgresRestart(t *testing.T) {
	ctx := Deadline(t, 3*time.Minute)
	pg := StartPostgres(t)
	if err := pg.CreateDatabase(ctx, "restart"); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("restart")
	connect := func(t *testing.T) *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect after start: %v\nserver log:\n%s", err, pg.LogTail())
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	rows := func(t *testing.T) []string {
		t.Helper()
		r, err := connect(t).Query(ctx, "SELECT v FROM kv ORDER BY v")
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(r, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if _, err := connect(t).Exec(ctx, "CREATE TABLE kv (v text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}

	var want []string
	for _, tc := range []struct {
		mode StopMode
		// logLine is what the server logs at the next start.
		logLine string
	}{
		{Immediate, "was not properly shut down; automatic recovery in progress"},
		{Fast, "database system was shut down at"},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			committed := "committed-" + tc.mode.String()
			if _, err := connect(t).Exec(ctx, "INSERT INTO kv VALUES ($1)", committed); err != nil {
				t.Fatal(err)
			}
			want = append(want, committed)
			slices.Sort(want) // as rows reads them
			tx, err := connect(t).Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO kv VALUES ($1)", "open-"+tc.mode.String()); err != nil {
				t.Fatal(err)
			}

			if err := pg.Restart(ctx, tc.mode); err != nil {
				t.Fatal(err)
			}

			commitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := tx.Commit(commitCtx); err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("commit of a transaction open across the restart: %v, want a broken connection", err)
			}
			if got := rows(t); !slices.Equal(got, want) {
				t.Fatalf("rows after the restart: %q, want %q", got, want)
			}
			log, err := os.ReadFile(filepath.Join(pg.DataDir(), "server.log"))
			if err != nil {
				t.Fatal(err)
			}
			starts := strings.Split(string(log), "starting PostgreSQL")
			if last := starts[len(starts)-1]; !strings.Contains(last, tc.logLine) {
				t.Fatalf("the server log of the last start lacks %q:\n%s", tc.logLine, last)
			}
		})
	}

	t.Run("stop and start", func(t *testing.T) {
		if len(pg.processes()) == 0 {
			t.Fatal("no process found in the data directory of a running server")
		}
		if err := pg.Stop(ctx, Immediate); err != nil {
			t.Fatal(err)
		}
		if left := pg.processes(); len(left) > 0 {
			t.Fatalf("processes %v left in the data directory after Stop", left)
		}
		if err := pg.Stop(ctx, Immediate); err != nil {
			t.Fatalf("stopping a stopped server: %v", err)
		}
		refused, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(refused, dsn); err == nil {
			_ = c.Close(context.Background())
			t.Fatal("a stopped server accepted a connection")
		}
		if err := pg.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := pg.Start(ctx); err != nil {
			t.Fatalf("starting a running server: %v", err)
		}
		if got := rows(t); !slices.Equal(got, want) {
			t.Fatalf("rows after stop and start: %q, want %q", got, want)
		}
	})
}
