package server

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/kafka"
)

// Defaults of Config.
const (
	DefaultListen         = "127.0.0.1:9094"
	DefaultAdminListen    = "127.0.0.1:9194"
	DefaultGateway        = "http://127.0.0.1:9092"
	DefaultSessionTimeout = 45 * time.Second
	DefaultOwnershipLease = 10 * time.Second
	DefaultLagInterval    = 15 * time.Second
	// DefaultTransactionMaxTimeout is Kafka's transaction.max.timeout.ms.
	DefaultTransactionMaxTimeout = 15 * time.Minute
	// DefaultTransactionAbortInterval is Kafka's
	// transaction.abort.timed.out.transaction.cleanup.interval.ms.
	DefaultTransactionAbortInterval = 10 * time.Second
	// DefaultTransactionalIDExpiration is Kafka's
	// transactional.id.expiration.ms.
	DefaultTransactionalIDExpiration = 7 * 24 * time.Hour
	// DefaultTransactionalIDExpirationInterval is Kafka's
	// transaction.remove.expired.transaction.cleanup.interval.ms.
	DefaultTransactionalIDExpirationInterval = time.Hour
)

// Config is the coordinator's configuration: serve.Base plus its own flags.
type Config struct {
	serve.Base
	// InstanceID names this instance in group ownership rows
	// (--instance-id). Default: the host name and the --listen port.
	// Must be unique among live instances sharing one offsets database.
	InstanceID string
	// AdvertiseURL is the Connect base URL clients and other instances use
	// to reach this instance (--advertise-url). Default the bound --listen
	// URL (https:// with TLS).
	AdvertiseURL string
	// AdvertiseListeners are further named addresses, NAME=URL
	// comma-separated (--advertise-listeners), for clients on other
	// networks: a gateway with --client-listener NAME hands out this
	// instance's NAME address from FindCoordinator. Default none.
	AdvertiseListeners string
	// DSN is the Postgres connection string (--dsn). Empty means the
	// embedded SQLite store at DataDir/offsets.db.
	DSN string
	// DataDir holds offsets.db when DSN is empty (--data-dir). Default
	// ./data/coordinator.
	DataDir string
	// Gateway is the gateway base URL the coordinator reads topic metadata
	// from (--gateway). Default DefaultGateway.
	Gateway string
	// Controller lists the controllers' base URLs, comma-separated
	// (--controller). When set, the coordinator registers with them
	// (register.go) and watches their metadata stream for the users, ACLs
	// and quotas its guard enforces (security.go), and is not ready before
	// the first snapshot and an answered registration. Required
	// with --require-auth. Default empty: no watch.
	Controller string
	// SessionTimeout removes members silent for this long
	// (--session-timeout). Default 45s, as Kafka.
	SessionTimeout time.Duration
	// HeartbeatInterval is what members are told to heartbeat at
	// (--heartbeat-interval). Default: a fifth of SessionTimeout, at most 5s.
	HeartbeatInterval time.Duration
	// OwnershipLease is how long a group's ownership lasts without renewal
	// (--ownership-lease); a crashed instance's groups move after it.
	// Default 10s. Renewed every third of it.
	OwnershipLease time.Duration
	// LagInterval is how often the lag metric is refreshed for owned
	// groups (--lag-interval). Default 15s.
	LagInterval time.Duration
	// TransactionMaxTimeout is the longest transaction timeout a
	// transactional producer may ask for (--transaction-max-timeout,
	// Kafka's transaction.max.timeout.ms). Default (and zero) 15m.
	TransactionMaxTimeout time.Duration
	// TransactionAbortInterval is how often Ongoing transactions past
	// their timeout are aborted and decided ones without a marker writer
	// are taken up (--transaction-abort-interval, Kafka's
	// transaction.abort.timed.out.transaction.cleanup.interval.ms).
	// Default (and zero) 10s.
	TransactionAbortInterval time.Duration
	// TransactionalIDExpiration deletes a transactional id without a
	// transaction that nobody used for this long
	// (--transactional-id-expiration, Kafka's
	// transactional.id.expiration.ms). Default (and zero) 7 days.
	TransactionalIDExpiration time.Duration
	// TransactionalIDExpirationInterval is how often expired
	// transactional ids are looked for
	// (--transactional-id-expiration-interval, Kafka's
	// transaction.remove.expired.transaction.cleanup.interval.ms).
	// Default (and zero) 1h.
	TransactionalIDExpirationInterval time.Duration
	// Kafka is the coordinator's Kafka protocol listener
	// (--kafka-listener, --kafka-advertise), the group coordinator of
	// Kafka clients; it asks --gateway for metadata. Default none.
	Kafka kafka.ListenerConfig

	listeners []serve.Listener // parsed AdvertiseListeners; set by Validate
}

// RegisterFlags declares the coordinator's flags.
func (c *Config) RegisterFlags(f *serve.Flags) {
	f.StringVar(&c.InstanceID, "instance-id", c.InstanceID, "unique id of this instance among those sharing the offsets database; empty: host name and listen port")
	f.StringVar(&c.AdvertiseURL, "advertise-url", c.AdvertiseURL, "Connect base URL clients use to reach this instance; empty: the bound --listen URL (https with TLS)")
	f.StringVar(&c.AdvertiseListeners, "advertise-listeners", c.AdvertiseListeners, "further named addresses for clients on other networks, NAME=URL comma-separated (e.g. external=http://coordinator-0.example.com:31094)")
	f.SecretVar(&c.DSN, "dsn", c.DSN, "Postgres connection string for offsets and group state; empty: embedded SQLite at --data-dir/offsets.db")
	f.StringVar(&c.DataDir, "data-dir", or(c.DataDir, "./data/coordinator"), "directory of offsets.db when --dsn is empty")
	f.StringVar(&c.Gateway, "gateway", or(c.Gateway, DefaultGateway), "gateway base URL to read topic metadata from")
	f.StringVar(&c.Controller, "controller", c.Controller, "controller base URLs, comma-separated, to register with (so every gateway names the Kafka listener) and whose metadata stream brings the ACLs to enforce; required with --require-auth")
	f.DurationVar(&c.SessionTimeout, "session-timeout", orDur(c.SessionTimeout, DefaultSessionTimeout), "members silent for this long are removed from their group")
	f.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval, "heartbeat interval told to members; 0: a fifth of --session-timeout, at most 5s")
	f.DurationVar(&c.OwnershipLease, "ownership-lease", orDur(c.OwnershipLease, DefaultOwnershipLease), "group ownership lease; a dead instance's groups move to another after it")
	f.DurationVar(&c.LagInterval, "lag-interval", orDur(c.LagInterval, DefaultLagInterval), "how often the lag metric of owned groups is refreshed")
	f.DurationVar(&c.TransactionMaxTimeout, "transaction-max-timeout", orDur(c.TransactionMaxTimeout, DefaultTransactionMaxTimeout), "longest transaction timeout a transactional producer may ask for (Kafka's transaction.max.timeout.ms)")
	f.DurationVar(&c.TransactionAbortInterval, "transaction-abort-interval", orDur(c.TransactionAbortInterval, DefaultTransactionAbortInterval), "how often transactions past their timeout are aborted (Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms)")
	f.DurationVar(&c.TransactionalIDExpiration, "transactional-id-expiration", orDur(c.TransactionalIDExpiration, DefaultTransactionalIDExpiration), "transactional ids without a transaction unused for this long are deleted (Kafka's transactional.id.expiration.ms)")
	f.DurationVar(&c.TransactionalIDExpirationInterval, "transactional-id-expiration-interval", orDur(c.TransactionalIDExpirationInterval, DefaultTransactionalIDExpirationInterval), "how often expired transactional ids are looked for (Kafka's transaction.remove.expired.transaction.cleanup.interval.ms)")
	c.Kafka.RegisterFlags(f, false)
}

// Validate checks every field and reports all problems at once.
func (c *Config) Validate() error {
	var p serve.Problems
	if c.DSN == "" && c.DataDir == "" {
		p.Flag("data-dir", c.DataDir, "required when --dsn is empty")
	}
	if err := serve.CheckBaseURL(c.Gateway); err != nil {
		p.Flag("gateway", c.Gateway, "must be an http(s) base URL")
	}
	if c.AdvertiseURL != "" {
		if err := serve.CheckBaseURL(c.AdvertiseURL); err != nil {
			p.Flag("advertise-url", c.AdvertiseURL, "must be an http(s) base URL")
		}
	}
	var err error
	if c.listeners, err = serve.ParseListeners(c.AdvertiseListeners); err != nil {
		p.Flag("advertise-listeners", c.AdvertiseListeners, err.Error())
	}
	if urls, err := serve.ParseURLs(c.Controller); err != nil {
		p.Flag("controller", c.Controller, err.Error())
	} else if len(urls) == 0 && c.RequireAuth {
		p.Flag("controller", c.Controller, "required with --require-auth: the ACLs to enforce come from the controller's metadata stream")
	}
	if c.SessionTimeout < 100*time.Millisecond || c.SessionTimeout > time.Hour {
		p.Flag("session-timeout", c.SessionTimeout, "must be 100ms..1h")
	}
	if c.HeartbeatInterval < 0 || c.HeartbeatInterval > 0 && c.HeartbeatInterval >= c.SessionTimeout {
		p.Flag("heartbeat-interval", c.HeartbeatInterval, "must be 0 or shorter than --session-timeout")
	}
	if c.OwnershipLease < 300*time.Millisecond || c.OwnershipLease > 10*time.Minute {
		p.Flag("ownership-lease", c.OwnershipLease, "must be 300ms..10m")
	}
	if c.LagInterval < 100*time.Millisecond {
		p.Flag("lag-interval", c.LagInterval, "must be at least 100ms")
	}
	// Zero is the default (a Config built in code; Start fills it in).
	if c.TransactionMaxTimeout != 0 && (c.TransactionMaxTimeout < time.Second || c.TransactionMaxTimeout > math.MaxInt32*time.Millisecond) {
		p.Flag("transaction-max-timeout", c.TransactionMaxTimeout, "must be 1s..596h (a timeout in ms fits 32 bits)")
	}
	if c.TransactionAbortInterval != 0 && c.TransactionAbortInterval < 10*time.Millisecond {
		p.Flag("transaction-abort-interval", c.TransactionAbortInterval, "must be at least 10ms")
	}
	if c.TransactionalIDExpiration < 0 || c.TransactionalIDExpiration != 0 && c.TransactionalIDExpiration < time.Second {
		p.Flag("transactional-id-expiration", c.TransactionalIDExpiration, "must be at least 1s")
	}
	if c.TransactionalIDExpirationInterval < 0 || c.TransactionalIDExpirationInterval != 0 && c.TransactionalIDExpirationInterval < 10*time.Millisecond {
		p.Flag("transactional-id-expiration-interval", c.TransactionalIDExpirationInterval, "must be at least 10ms")
	}
	if strings.ContainsAny(c.InstanceID, " \t\n") {
		p.Flag("instance-id", c.InstanceID, "must not contain spaces")
	}
	c.Kafka.Validate(&p, &c.Security, false)
	return p.Err()
}

// heartbeatInterval resolves the default.
func (c *Config) heartbeatInterval() time.Duration {
	if c.HeartbeatInterval > 0 {
		return c.HeartbeatInterval
	}
	return min(c.SessionTimeout/5, 5*time.Second)
}

// instanceID resolves the default from the host name and the bound port.
func (c *Config) instanceID(listen string) string {
	if c.InstanceID != "" {
		return c.InstanceID
	}
	h, _ := os.Hostname()
	port := listen
	if i := strings.LastIndex(listen, ":"); i >= 0 {
		port = listen[i+1:]
	}
	return fmt.Sprintf("%s-%s", h, port)
}

func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

func orDur(d, def time.Duration) time.Duration {
	if d != 0 {
		return d
	}
	return def
}
