// Package server is the gateway: the GatewayService Connect API answered
// from a metadata cache fed by the controller's WatchMetadata stream, admin
// calls passed through to the controller and the coordinators, and the
// JSON produce/fetch proxy in front of the storage nodes.
//
// The gateway keeps no state of its own beyond that cache and a block of
// producer ids, so any number of gateways can run behind one load balancer.
// See docs/design/gateway.md.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/lib/pidblock"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/gateway/internal/console"
	"github.com/strata-mq/strata/services/kafka"
)

// Options are the gateway's dependencies, separate from Config so tests can
// inject them.
type Options struct {
	// HTTPClient carries every upstream call. Required; services pass
	// serve.Process.HTTPClient().
	HTTPClient connect.HTTPClient
	// ClientOptions are added to every upstream Connect client (otelconnect
	// in a service). Optional.
	ClientOptions []connect.ClientOption
	// Logger is the gateway's logger. Nil means slog.Default().
	Logger *slog.Logger
	// Guard authenticates, authorizes and throttles the gateway's callers
	// (services pass serve.Process.Guard()); the gateway feeds it the
	// security state of the metadata stream. Nil means a guard that does
	// not enforce: every caller may do everything, as without
	// --require-auth.
	Guard *guard.Guard
	// WatchMinBackoff and WatchMaxBackoff bound the metadata watch's
	// reconnect waits. Zero means the metaview defaults (100ms, 5s).
	WatchMinBackoff, WatchMaxBackoff time.Duration
	// Draining, when closed, ends every WatchCluster stream so a graceful
	// shutdown does not wait for them (services pass
	// serve.Process.Draining()); clients reconnect, to another gateway
	// behind a load balancer. Nil means never.
	Draining <-chan struct{}
	// RetryBackoff is the first wait before a data-path retry on another
	// leader; it doubles per attempt up to 1s, each wait spread ±20% at
	// random. Zero means 50ms.
	RetryBackoff time.Duration
}

// Gateway serves GatewayService. Create it with Start; Close stops it.
// Safe for concurrent use.
type Gateway struct {
	gatewayv1connect.UnimplementedGatewayServiceHandler

	log   *slog.Logger
	cache *metaview.Cache
	guard *guard.Guard
	// security is the state last given to guard.Apply; only the watch
	// goroutine touches it.
	security     *commonv1.SecurityState
	controllers  *controllerPool
	coordinators []coordinatorv1connect.CoordinatorServiceClient
	coordURLs    []string
	// clientListener is --client-listener: the name of the advertised
	// listener whose addresses Metadata and FindCoordinator hand out;
	// empty means every endpoint's default address.
	clientListener string
	kafkaCoords    kafka.LocatedCoordinators
	pids           *pidblock.Allocator
	retryBackoff   time.Duration
	keyless        atomic.Uint32 // round-robin position for records without a key

	httpClient connect.HTTPClient
	clientOpts []connect.ClientOption
	storageMu  sync.Mutex
	storage    map[string]storagev1connect.StorageServiceClient // by node address

	// changes is signalled after every metadata message (WatchCluster
	// waits on it); logs shares DescribeLog samples between streams.
	changes  changeSignal
	logs     sampler
	draining <-chan struct{}

	cancel    context.CancelFunc
	watchDone chan struct{}
	closeOnce sync.Once
}

// Start builds the gateway from a validated cfg and starts the metadata
// watch, which runs until ctx ends or Close is called. It does not wait for
// the first snapshot: Ready reports when it has arrived.
func Start(ctx context.Context, cfg *Config, opts Options) (*Gateway, error) {
	if opts.HTTPClient == nil {
		return nil, errors.New("gateway: Options.HTTPClient is required")
	}
	if len(cfg.controllerURLs) == 0 {
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	gd := opts.Guard
	if gd == nil {
		var err error
		if gd, err = guard.New(ctx, guard.Config{Logger: logger}); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	g := &Gateway{
		log:          logger,
		cache:        metaview.NewCache(),
		guard:        gd,
		retryBackoff: opts.RetryBackoff,
		draining:     opts.Draining,
		httpClient:   opts.HTTPClient,
		clientOpts:   opts.ClientOptions,
		storage:      make(map[string]storagev1connect.StorageServiceClient),
		coordURLs:    cfg.coordinatorURLs,
		watchDone:    make(chan struct{}),

		clientListener: cfg.ClientListener,
	}
	if g.retryBackoff <= 0 {
		g.retryBackoff = 50 * time.Millisecond
	}
	g.controllers = newControllerPool(cfg.controllerURLs, opts.HTTPClient, opts.ClientOptions)
	for _, u := range cfg.coordinatorURLs {
		g.coordinators = append(g.coordinators, coordinatorv1connect.NewCoordinatorServiceClient(opts.HTTPClient, u, opts.ClientOptions...))
	}
	g.pids = pidblock.New(g.allocateProducerIDs(int32(cfg.ProducerIDBlockSize)))

	ctx, g.cancel = context.WithCancel(ctx)
	go func() {
		defer close(g.watchDone)
		metaview.Watch(ctx, g.cache, metaview.WatchConfig{
			Controllers: g.controllers.clients,
			Names:       g.controllers.urls,
			NodeID:      metaview.NotANode,
			MinBackoff:  opts.WatchMinBackoff,
			MaxBackoff:  opts.WatchMaxBackoff,
			Notify: func(v *metaview.View) {
				g.applySecurity(v)
				g.changes.signal()
			},
			Logger: logger,
		})
	}()
	return g, nil
}

// Handler returns the GatewayService handler and the path to mount it on.
func (g *Gateway) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	opts = append(opts[:len(opts):len(opts)], connect.WithInterceptors(rules.Interceptor()))
	return gatewayv1connect.NewGatewayServiceHandler(g, opts...)
}

// Ready is the readiness check: nil once the first metadata snapshot has
// arrived. It reads a flag and does no I/O.
func (g *Gateway) Ready(context.Context) error {
	if !g.cache.Ready() {
		return errors.New("waiting for the first metadata snapshot from the controller")
	}
	return nil
}

// ReadyNotify is closed when the first metadata snapshot has arrived.
func (g *Gateway) ReadyNotify() <-chan struct{} { return g.cache.ReadyNotify() }

// Close stops the metadata watch and waits for it. Safe to call twice;
// it has nothing to flush, so it returns nil.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() {
		g.cancel()
		<-g.watchDone
	})
	return nil
}

// Setup is the serve.SetupFunc of the strata-gateway binary: it starts the
// gateway with the process's HTTP client, otelconnect and logger, makes
// /readyz wait for the first snapshot, and closes the gateway at shutdown.
func Setup(cfg *Config) serve.SetupFunc {
	return func(ctx context.Context, p *serve.Process) (http.Handler, error) {
		g, err := Start(ctx, cfg, Options{
			HTTPClient:    p.HTTPClient(),
			ClientOptions: []connect.ClientOption{p.ConnectOption()},
			Logger:        p.Logger(),
			Guard:         p.Guard(),
			Draining:      p.Draining(),
		})
		if err != nil {
			return nil, err
		}
		p.OnShutdown("gateway", func(context.Context) error { return g.Close() })
		p.AddReadinessCheck("metadata", g.Ready)
		kl, err := kafka.Listen(cfg.Kafka)
		if err != nil {
			return nil, err
		}
		if kl != nil {
			// The bridge calls this gateway in-process: a Kafka client's
			// bootstrap costs no extra hop.
			if err := kl.Serve(p, kafka.Config{Gateway: g, Transactions: true}); err != nil {
				return nil, err
			}
		}
		mux := http.NewServeMux()
		mux.Handle(g.Handler(p.HandlerOption()))
		// The console's files carry no cluster data; the page calls the
		// API above with the user's credentials.
		p.HandlePublic(console.Path, console.Handler())
		return mux, nil
	}
}

// storageClient returns the shared client of the storage node at addr.
func (g *Gateway) storageClient(addr string) storagev1connect.StorageServiceClient {
	g.storageMu.Lock()
	defer g.storageMu.Unlock()
	c := g.storage[addr]
	if c == nil {
		opts := append([]connect.ClientOption{serve.DataPathClientOption()}, g.clientOpts...)
		c = storagev1connect.NewStorageServiceClient(g.httpClient, addr, opts...)
		g.storage[addr] = c
	}
	return c
}

// controllerPool holds a client per --controller URL and remembers which
// one answered last, so calls go there first.
type controllerPool struct {
	urls      []string
	clients   []controllerv1connect.ControllerServiceClient
	preferred atomic.Int32
}

func newControllerPool(urls []string, hc connect.HTTPClient, opts []connect.ClientOption) *controllerPool {
	p := &controllerPool{urls: urls}
	for _, u := range urls {
		p.clients = append(p.clients, controllerv1connect.NewControllerServiceClient(hc, u, opts...))
	}
	return p
}

// callController runs call against the controllers, starting with the one
// that answered last, moving on while the answer is UNAVAILABLE (no active
// controller reachable through that member, or the member itself is
// unreachable). Any other answer, success or error, is final. The last
// error is returned as upstream's answer: code, message and details kept.
func callController[T any](ctx context.Context, p *controllerPool, call func(context.Context, controllerv1connect.ControllerServiceClient) (T, error)) (T, error) {
	start := int(p.preferred.Load())
	var lastErr error
	for k := range p.clients {
		i := (start + k) % len(p.clients)
		res, err := call(ctx, p.clients[i])
		if err == nil {
			p.preferred.Store(int32(i))
			return res, nil
		}
		lastErr = err
		if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
			break
		}
	}
	var zero T
	return zero, apierr.Forward(lastErr)
}
