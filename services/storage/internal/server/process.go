package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/kafka"
)

// DefaultListen is the storage node's default API address (--listen).
const DefaultListen = "127.0.0.1:9102"

// ProcessConfig is the strata-storage process's configuration: serve.Base
// plus the node's flags. Setup turns it into the Config that Start takes.
type ProcessConfig struct {
	serve.Base
	NodeID         int           // --node-id; required, >= 0
	Advertise      string        // --advertise; default the --listen URL
	Listeners      string        // --advertise-listeners; NAME=URL,...; default none
	DataDir        string        // --data-dir; default ./data
	Controller     string        // --controller; comma-separated URLs
	Rack           string        // --rack; default empty
	ReplicaLagTime time.Duration // --replica-lag-time; default 10s
	Tiering        string        // --tiering; tiering service URL, empty disables tiered storage
	TierInterval   time.Duration // --tier-interval; how often tiered partitions are uploaded and trimmed; default 5s
	// RetentionInterval is --retention-interval: how often retention.ms and
	// retention.bytes are applied; default 1m.
	RetentionInterval time.Duration
	// CleanerBackoff is --cleaner-backoff (log.cleaner.backoff.ms): how
	// long the log cleaner sleeps when it finds nothing to clean; default
	// 15s.
	CleanerBackoff time.Duration
	// CleanerIOMaxBytesPerSecond is --cleaner-io-max-bytes-per-second
	// (log.cleaner.io.max.bytes.per.second); default 0, no limit.
	CleanerIOMaxBytesPerSecond int64
	// FaultInjection is --fault-injection, for fault tests only: the
	// replicas' logs run over a filesystem whose I/O errors and power cut
	// are driven through /debug/faults on the admin port (faults.go).
	// Default false: the OS filesystem, no wrapper, no endpoint.
	FaultInjection bool
	// Kafka is the node's Kafka protocol listener (--kafka-listener,
	// --kafka-advertise, --gateway); default none.
	Kafka kafka.ListenerConfig
}

// RegisterFlags declares the storage node's own flags.
func (c *ProcessConfig) RegisterFlags(f *serve.Flags) {
	f.IntVar(&c.NodeID, "node-id", -1, "this storage node's id, unique in the cluster and stable across restarts (>= 0)")
	f.StringVar(&c.Advertise, "advertise", "", "Connect base URL or host:port others reach this node at; default the --listen address")
	f.StringVar(&c.Listeners, "advertise-listeners", "", "further named addresses for clients on other networks, NAME=URL comma-separated (e.g. external=http://node-1.example.com:31102); a gateway with --client-listener NAME hands these out")
	f.StringVar(&c.DataDir, "data-dir", "./data", "directory holding one subdirectory per partition replica")
	f.StringVar(&c.Controller, "controller", "http://127.0.0.1:9093", "controller base URLs, comma-separated")
	f.StringVar(&c.Rack, "rack", "", "rack or availability-zone label for rack-aware placement")
	f.DurationVar(&c.ReplicaLagTime, "replica-lag-time", 10*time.Second, "replica.lag.time.max: a follower not caught up for this long leaves the ISR")
	f.StringVar(&c.Tiering, "tiering", "", "tiering service base URL for topics with remote.storage.enable=true; empty disables tiered storage")
	f.DurationVar(&c.TierInterval, "tier-interval", 5*time.Second, "how often tiered partitions upload sealed segments and delete tiered local ones")
	f.DurationVar(&c.RetentionInterval, "retention-interval", time.Minute, "how often retention.ms and retention.bytes delete old segments (tiered topics: see --tier-interval)")
	f.DurationVar(&c.CleanerBackoff, "cleaner-backoff", DefaultCleanerBackoff, "log.cleaner.backoff.ms: how long the log cleaner of compacted topics sleeps when no log needs cleaning")
	f.Int64Var(&c.CleanerIOMaxBytesPerSecond, "cleaner-io-max-bytes-per-second", 0, "log.cleaner.io.max.bytes.per.second: the log cleaner's read and write rate limit; 0 for none")
	c.Kafka.RegisterFlags(f, true)
	f.BoolVar(&c.FaultInjection, "fault-injection", false, "FOR FAULT TESTS ONLY, never in production: serve /debug/faults on the admin port, which fails disk writes and fsyncs on demand and cuts the power (dropping what was not fsynced, then SIGKILL); needs --admin-listen")
}

// Validate checks every field and reports all problems at once.
func (c *ProcessConfig) Validate() error {
	var p serve.Problems
	if c.NodeID < 0 {
		p.Flag("node-id", c.NodeID, "required, must be >= 0")
	}
	if c.DataDir == "" {
		p.Flag("data-dir", c.DataDir, "must not be empty")
	}
	if _, err := serve.ParseListeners(c.Listeners); err != nil {
		p.Flag("advertise-listeners", c.Listeners, err.Error())
	}
	if urls, err := serve.ParseURLs(c.Controller); err != nil {
		p.Flag("controller", c.Controller, err.Error())
	} else if len(urls) == 0 {
		p.Flag("controller", c.Controller, "needs at least one URL")
	}
	if c.ReplicaLagTime <= 0 {
		p.Flag("replica-lag-time", c.ReplicaLagTime, "must be positive")
	}
	if c.TierInterval <= 0 {
		p.Flag("tier-interval", c.TierInterval, "must be positive")
	}
	if c.RetentionInterval <= 0 {
		p.Flag("retention-interval", c.RetentionInterval, "must be positive")
	}
	if c.CleanerBackoff <= 0 {
		p.Flag("cleaner-backoff", c.CleanerBackoff, "must be positive")
	}
	if c.CleanerIOMaxBytesPerSecond < 0 {
		p.Flag("cleaner-io-max-bytes-per-second", c.CleanerIOMaxBytesPerSecond, "must be 0 (no limit) or positive")
	}
	c.Kafka.Validate(&p, &c.Security, true)
	if c.FaultInjection && !c.AdminEnabled() {
		p.Flag("fault-injection", c.FaultInjection, "needs --admin-listen, where /debug/faults is served")
	}
	return p.Err()
}

// Setup returns the serve.SetupFunc of strata-storage: it starts the node
// (Start), registers its shutdown and readiness, and serves StorageService.
func Setup(cfg *ProcessConfig) serve.SetupFunc {
	return func(ctx context.Context, p *serve.Process) (http.Handler, error) {
		advertise := advertiseURL(cfg.Advertise, p.URL(), cfg.TLSEnabled())
		listeners, _ := serve.ParseListeners(cfg.Listeners) // checked by Validate
		var adv []*commonv1.Listener
		for _, l := range listeners {
			adv = append(adv, &commonv1.Listener{Name: l.Name, Address: l.URL})
		}
		controllers, _ := serve.ParseURLs(cfg.Controller) // checked by Validate
		// The Kafka listener is bound before the node registers, so its
		// address is in the registration Kafka's Metadata answers from.
		kl, err := kafka.Listen(cfg.Kafka)
		if err != nil {
			return nil, err
		}
		if kl != nil {
			adv = append(adv, &commonv1.Listener{Name: serve.KafkaListenerName, Address: serve.KafkaScheme + kl.Advertise()})
		}
		faults, err := setupFaults(cfg, p, killSelf)
		if err != nil {
			return nil, err
		}
		node, err := Start(ctx, Config{
			NodeID: int32(cfg.NodeID), Advertise: advertise, Listeners: adv, Rack: cfg.Rack, DataDir: cfg.DataDir,
			Controllers:                controllers,
			ReplicaLagTime:             cfg.ReplicaLagTime,
			Tiering:                    cfg.Tiering,
			TierInterval:               cfg.TierInterval,
			RetentionInterval:          cfg.RetentionInterval,
			CleanerBackoff:             cfg.CleanerBackoff,
			CleanerIOMaxBytesPerSecond: cfg.CleanerIOMaxBytesPerSecond,
			FS:                         faults.FS(),
			OnLogFailure:               haltOnLogFailure(p.Logger(), os.Exit),
			HTTPClient:                 p.HTTPClient(),
			ClientOptions:              []connect.ClientOption{p.ConnectOption()},
			HandlerOptions:             []connect.HandlerOption{p.HandlerOption()},
			Logger:                     p.Logger(),
			Guard:                      p.Guard(),
		})
		if err != nil {
			return nil, err
		}
		p.OnShutdown("storage node", func(context.Context) error { return node.Close() })
		if kl != nil {
			logDir, err := filepath.Abs(cfg.DataDir)
			if err != nil {
				logDir = cfg.DataDir
			}
			err = kl.Serve(p, kafka.Config{
				Gateway: gatewayv1connect.NewGatewayServiceClient(p.HTTPClient(), cfg.Kafka.GatewayURL(), p.ConnectOption()),
				Storage: node.LocalStorage(),
				LogDir:  logDir,
				View:    node.currentView,
				// The node verifies transactional batches with the
				// transaction coordinator (KIP-890), so the listener
				// offers transactions.
				Transactions: true,
			})
			if err != nil {
				return nil, err
			}
		}
		p.AddReadinessCheck("metadata", node.Ready)
		mux := http.NewServeMux()
		mux.Handle(node.Handler())
		return mux, nil
	}
}

// haltOnLogFailure stops the process when a partition log fails: a
// storage node with a failed disk holds leadership it cannot serve, and
// nothing else takes it away until its lease expires. Exiting at once
// (code 3, no graceful shutdown that could write more) lets the
// controller move leadership, and recovery runs at the next start; a
// supervisor restarts the process.
func haltOnLogFailure(logger *slog.Logger, exit func(int)) func(topic string, partition int32, err error) {
	var once sync.Once
	return func(topic string, partition int32, err error) {
		once.Do(func() {
			logger.Error(fmt.Sprintf("storage: stopping: the log of %s-%d failed (%v); restart the node once the disk is healthy", topic, partition, err))
			exit(3)
		})
	}
}

// setupFaults returns the faulty disk when --fault-injection is on, with
// its endpoints on the admin listener and a warning in the log, and nil
// otherwise.
func setupFaults(cfg *ProcessConfig, p *serve.Process, kill func()) (*diskFaults, error) {
	if !cfg.FaultInjection {
		return nil, nil
	}
	d := newDiskFaults(p.Logger(), kill)
	for pattern, h := range d.routes() {
		if err := p.HandleAdmin(pattern, h); err != nil {
			return nil, err
		}
	}
	p.Logger().Warn("fault injection is on: /debug/faults on the admin port fails disk I/O and cuts the power on request; for fault tests only, never in production",
		"admin", p.AdminAddr().String())
	return d, nil
}

// advertiseURL is the URL the node registers: --advertise, given the
// scheme its listener speaks (https with TLS) when it has none, or the
// listener's own URL.
func advertiseURL(advertise, listenURL string, tls bool) string {
	switch {
	case advertise == "":
		return listenURL
	case hasScheme(advertise):
		return advertise
	case tls:
		return "https://" + advertise
	}
	return "http://" + advertise
}

func hasScheme(s string) bool {
	return len(s) > 7 && (s[:7] == "http://" || (len(s) > 8 && s[:8] == "https://"))
}
