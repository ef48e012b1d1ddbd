package devcluster

import (
	"errors"
	"net/url"
	"strings"
)

// withPostgres makes the coordinator keep its offsets in the PostgreSQL
// database dsn (--postgres) instead of embedded SQLite: the DSN goes in
// its environment as STRATA_DSN, as lib/launch.Coordinator asks, so it
// never shows in argv or cluster.json. An empty dsn changes nothing.
func (pl plan) withPostgres(dsn string) plan {
	if dsn == "" {
		return pl
	}
	pl.postgres = true
	pl.coordinator.env = append(pl.coordinator.env, "STRATA_DSN="+dsn)
	return pl
}

// checkPostgres validates --postgres: empty, a postgres:// or
// postgresql:// URL with a host, or libpq key=value pairs. Whether the
// server answers is the coordinator's to find out: it fails at start, and
// strata dev reports its last log line.
func checkPostgres(dsn string) error {
	if dsn == "" {
		return nil
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil || u.Host == "" {
			return errors.New("must be a postgres:// URL with a host, such as postgres://postgres@127.0.0.1:5432/strata_demo?sslmode=disable")
		}
		return nil
	}
	if !strings.Contains(dsn, "=") {
		return errors.New("must be a postgres:// URL or libpq key=value pairs (host=127.0.0.1 dbname=strata_demo)")
	}
	return nil
}

// redactDSN is dsn as strata dev prints it: a URL with its password
// replaced by xxxxx, key=value pairs with the password's value hidden.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	fields := strings.Fields(dsn)
	for i, f := range fields {
		if k, _, ok := strings.Cut(f, "="); ok && strings.EqualFold(k, "password") {
			fields[i] = k + "=xxxxx"
		}
	}
	return strings.Join(fields, " ")
}
