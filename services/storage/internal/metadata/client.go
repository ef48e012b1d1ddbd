// Package metadata is a storage node's link to the controller: it
// registers the node (getting its node epoch), heartbeats, follows
// WatchMetadata through lib/metaview (snapshot, then deltas; a reconnect
// resumes from the last applied version or gets a fresh snapshot) and
// sends AlterPartition. The controller address is a list: RegisterNode,
// Heartbeat and AlterPartition go to the last one that answered and move
// on to the next, or to the one a NOT_CONTROLLER hint names; the watch,
// which any controller serves, moves to the next one when a stream breaks.
package metadata

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/services/storage/internal/clock"
)

// Config configures a Client.
type Config struct {
	NodeID  int32  // this node's id
	Address string // Connect base URL others reach this node at
	// Listeners are further named addresses (advertised listeners) sent
	// with the registration; none by default.
	Listeners   []*commonv1.Listener
	Rack        string       // rack label; may be empty
	Controllers []string     // controller base URLs; at least one
	HTTPClient  *http.Client // for Connect calls
	Options     []connect.ClientOption
	Logger      *slog.Logger // default slog.Default()
	Clock       clock.Clock  // default clock.System
	// AttemptTimeout bounds each attempt of a call to one controller
	// (register, heartbeat, AlterPartition); 0 means a third of the lease.
	AttemptTimeout time.Duration
	// Quotas, when set, is asked for the node's quota traffic before each
	// heartbeat and told what the controller answered (the nodes share
	// each quota; lib/quota). nil: no quota traffic is exchanged.
	Quotas QuotaExchange
}

// QuotaExchange is the node's side of the quota traffic exchanged with
// heartbeats.
type QuotaExchange interface {
	// QuotaUsage is what each principal with a quota moved through the
	// node since the last call, in bytes per second.
	QuotaUsage() []*controllerv1.QuotaUsage
	// SetQuotaCluster is what the controller answered: how many nodes
	// share the quotas and what the others moved.
	SetQuotaCluster(nodes int32, others []*controllerv1.QuotaUsage)
}

// Client is the controller link. Run drives it; the other methods are safe
// for concurrent use.
type Client struct {
	cfg         Config
	logger      *slog.Logger
	incarnation string

	mu      sync.Mutex
	clients map[string]controllerv1connect.ControllerServiceClient
	current int    // index into cfg.Controllers of the last controller that answered
	hinted  string // address named by a NOT_CONTROLLER hint, tried first

	nodeEpoch atomic.Int64
	version   atomic.Int64
	// leaseFrom is the monotonic reading (clock.Mono, ns) taken when the
	// last accepted RegisterNode or Heartbeat was sent. The controller
	// renewed the lease after that moment, so a lease measured from it
	// never outlives the controller's.
	leaseFrom  atomic.Int64
	leaseTTL   atomic.Int64 // ns
	fenced     atomic.Bool
	hbInterval atomic.Int64 // ms
}

// New returns a client; nothing happens until Run.
func New(cfg Config) *Client {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System
	}
	c := &Client{cfg: cfg, logger: cfg.Logger, incarnation: uuid.NewString(), clients: map[string]controllerv1connect.ControllerServiceClient{}}
	c.nodeEpoch.Store(-1)
	c.fenced.Store(true)
	return c
}

// NodeEpoch is the node epoch of the current registration, or -1.
func (c *Client) NodeEpoch() int64 { return c.nodeEpoch.Load() }

// Fenced reports whether this node must not accept produce requests as a
// leader: the controller says it is fenced, or the lease of the last
// accepted heartbeat has run out, so the controller may have declared it
// dead and elected other leaders. The lease is measured on the monotonic
// clock from when that heartbeat was sent, so stepping the wall clock
// changes nothing.
func (c *Client) Fenced() bool {
	if c.fenced.Load() {
		return true
	}
	from, ttl := c.leaseFrom.Load(), c.leaseTTL.Load()
	return ttl > 0 && int64(c.cfg.Clock.Mono())-from > ttl
}

func (c *Client) client(addr string) controllerv1connect.ControllerServiceClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.clients[addr]
	if cl == nil {
		cl = controllerv1connect.NewControllerServiceClient(c.cfg.HTTPClient, addr, c.cfg.Options...)
		c.clients[addr] = cl
	}
	return cl
}

// call runs fn against controllers until one answers with something other
// than UNAVAILABLE or a transport error, following NOT_CONTROLLER hints.
// Each attempt gets its own deadline (attemptTimeout): a controller that
// takes the call and never answers (cut off from its peers, paused) would
// otherwise hold it, and the node's heartbeats with it, until its lease
// ran out, though the other controllers answer.
func (c *Client) call(ctx context.Context, fn func(context.Context, controllerv1connect.ControllerServiceClient) error) error {
	attempt := func(addr string) error {
		actx, cancel := context.WithTimeout(ctx, c.attemptTimeout())
		defer cancel()
		return fn(actx, c.client(addr))
	}
	c.mu.Lock()
	start, hinted := c.current, c.hinted
	c.hinted = ""
	c.mu.Unlock()
	var order []string
	if hinted != "" {
		order = append(order, hinted)
	}
	n := len(c.cfg.Controllers)
	for i := range n {
		order = append(order, c.cfg.Controllers[(start+i)%n])
	}
	var last error
	for _, addr := range order {
		err := attempt(addr)
		if err == nil || !retryElsewhere(err) {
			if err == nil {
				c.mu.Lock()
				for i, a := range c.cfg.Controllers {
					if a == addr {
						c.current = i
					}
				}
				c.mu.Unlock()
			}
			return err
		}
		if h := controllerHint(err); h != "" && h != addr {
			c.mu.Lock()
			c.hinted = h
			c.mu.Unlock()
			if err2 := attempt(h); err2 == nil || !retryElsewhere(err2) {
				return err2
			}
		}
		last = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return last
}

// attemptTimeout bounds one attempt of a call to one controller: a third
// of the lease, so that a heartbeat that finds the first controller
// silent still renews the lease at another (Config.AttemptTimeout
// overrides it; at least a second before the first lease is known).
func (c *Client) attemptTimeout() time.Duration {
	if c.cfg.AttemptTimeout > 0 {
		return c.cfg.AttemptTimeout
	}
	return max(time.Second, time.Duration(c.leaseTTL.Load())/3)
}

func retryElsewhere(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeUnimplemented, connect.CodeDeadlineExceeded:
		return true
	}
	return false
}

func controllerHint(err error) string {
	if d := apierr.DetailOf(err); d != nil && d.GetReason() == commonv1.Reason_REASON_NOT_CONTROLLER {
		return d.GetController().GetAddress()
	}
	return ""
}

// Run registers the node, then heartbeats and watches metadata until ctx
// ends, calling apply with the view in force after each message of the
// stream, one at a time, in version order (the same view again for a
// progress notice, so apply also runs every few seconds while nothing
// changes). The watch resumes from the last applied version on reconnect.
func (c *Client) Run(ctx context.Context, apply func(*metaview.View)) {
	if !c.register(ctx) {
		return
	}
	go c.heartbeatLoop(ctx)
	clients := make([]controllerv1connect.ControllerServiceClient, len(c.cfg.Controllers))
	for i, addr := range c.cfg.Controllers {
		clients[i] = c.client(addr)
	}
	metaview.Watch(ctx, metaview.NewCache(), metaview.WatchConfig{
		Controllers: clients,
		Names:       c.cfg.Controllers,
		NodeID:      c.cfg.NodeID,
		Resume:      true,
		MinBackoff:  minBackoff,
		MaxBackoff:  maxBackoff,
		Logger:      c.logger,
		Notify: func(v *metaview.View) {
			c.version.Store(v.Version)
			apply(v)
		},
	})
}

// Waits before another attempt to reach the controllers, for both the
// metadata watch's reconnects and RegisterNode's retries: doubling from
// minBackoff up to maxBackoff, each spread ±50% at random so that nodes
// that lost the controller together do not come back in step.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// register retries RegisterNode until it succeeds or ctx ends.
func (c *Client) register(ctx context.Context) bool {
	bo := &backoff.ExponentialBackOff{
		InitialInterval:     minBackoff,
		RandomizationFactor: 0.5, // as the metadata watch's reconnects
		Multiplier:          2,
		MaxInterval:         maxBackoff,
	}
	bo.Reset()
	for {
		var resp *controllerv1.RegisterNodeResponse
		sent := c.cfg.Clock.Mono()
		err := c.call(ctx, func(ctx context.Context, cl controllerv1connect.ControllerServiceClient) error {
			r, err := cl.RegisterNode(ctx, connect.NewRequest(&controllerv1.RegisterNodeRequest{
				NodeId: c.cfg.NodeID, Address: c.cfg.Address, Listeners: c.cfg.Listeners, Rack: c.cfg.Rack, IncarnationId: c.incarnation,
			}))
			if err == nil {
				resp = r.Msg
			}
			return err
		})
		if err == nil {
			c.nodeEpoch.Store(resp.GetNodeEpoch())
			c.leaseTTL.Store(int64(time.Duration(resp.GetLeaseTtlMs()) * time.Millisecond))
			c.leaseFrom.Store(int64(sent))
			c.fenced.Store(false) // until a heartbeat says otherwise
			c.logger.Info("registered with controller", "node_epoch", resp.GetNodeEpoch(), "lease_ttl_ms", resp.GetLeaseTtlMs())
			c.hbInterval.Store(int64(max(resp.GetHeartbeatIntervalMs(), 50)))
			return true
		}
		c.logger.Warn("register failed; retrying", "err", err)
		if !sleep(ctx, bo.NextBackOff()) {
			return false
		}
	}
}

func (c *Client) heartbeatLoop(ctx context.Context) {
	for {
		if !sleep(ctx, time.Duration(c.hbInterval.Load())*time.Millisecond) {
			return
		}
		var resp *controllerv1.HeartbeatResponse
		var usage []*controllerv1.QuotaUsage
		if c.cfg.Quotas != nil {
			usage = c.cfg.Quotas.QuotaUsage()
		}
		sent := c.cfg.Clock.Mono()
		err := c.call(ctx, func(ctx context.Context, cl controllerv1connect.ControllerServiceClient) error {
			r, err := cl.Heartbeat(ctx, connect.NewRequest(&controllerv1.HeartbeatRequest{
				NodeId: c.cfg.NodeID, NodeEpoch: c.nodeEpoch.Load(), MetadataVersion: c.version.Load(), QuotaUsage: usage,
			}))
			if err == nil {
				resp = r.Msg
			}
			return err
		})
		switch {
		case err == nil:
			if resp.GetLeaseTtlMs() > 0 {
				c.leaseTTL.Store(int64(time.Duration(resp.GetLeaseTtlMs()) * time.Millisecond))
			}
			c.leaseFrom.Store(int64(sent))
			c.fenced.Store(resp.GetFenced())
			if c.cfg.Quotas != nil {
				c.cfg.Quotas.SetQuotaCluster(resp.GetQuotaNodes(), resp.GetQuotaOthers())
			}
		case connect.CodeOf(err) == connect.CodeAborted || connect.CodeOf(err) == connect.CodeNotFound:
			// Our registration is gone (stale node epoch): a new
			// incarnation of ourselves is needed.
			c.fenced.Store(true)
			c.logger.Warn("heartbeat rejected; registering again", "err", err)
			if !c.register(ctx) {
				return
			}
		default:
			if ctx.Err() == nil {
				c.logger.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

// AlterPartition sends the leader's ISR changes with the current node
// epoch.
func (c *Client) AlterPartition(ctx context.Context, items []*controllerv1.AlterPartitionItem) (*controllerv1.AlterPartitionResponse, error) {
	var resp *controllerv1.AlterPartitionResponse
	err := c.call(ctx, func(ctx context.Context, cl controllerv1connect.ControllerServiceClient) error {
		r, err := cl.AlterPartition(ctx, connect.NewRequest(&controllerv1.AlterPartitionRequest{
			NodeId: c.cfg.NodeID, NodeEpoch: c.nodeEpoch.Load(), Partitions: items,
		}))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("metadata: alter partition: %w", err)
	}
	return resp, nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
