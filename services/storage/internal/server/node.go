// Package server is a storage node: it keeps the partition replicas the
// controller's metadata assigns to this node, runs their replication, and
// serves the StorageService Connect API (produce, fetch, list offsets,
// replicate, offset for leader epoch, describe log).
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/topicconfig"
	"github.com/strata-mq/strata/lib/vfs"
	"github.com/strata-mq/strata/services/storage/internal/clock"
	"github.com/strata-mq/strata/services/storage/internal/metadata"
	"github.com/strata-mq/strata/services/storage/internal/replica"
	"github.com/strata-mq/strata/services/storage/internal/replication"
)

// Config configures a Node.
type Config struct {
	NodeID    int32  // this node's id (>= 0)
	Advertise string // Connect base URL others reach this node at
	// Listeners are further named addresses for clients on other networks
	// (advertised listeners); none by default.
	Listeners   []*commonv1.Listener
	Rack        string   // rack label; may be empty
	DataDir     string   // one subdirectory per partition replica
	Controllers []string // controller base URLs
	// ReplicaLagTime is replica.lag.time.max. Default 10s.
	ReplicaLagTime time.Duration
	// ISRCheckInterval is how often leaders look for ISR changes.
	// Default ReplicaLagTime/4, at most 1s.
	ISRCheckInterval time.Duration
	// RetentionInterval is how often retention runs. Default 1 minute.
	RetentionInterval time.Duration
	// CleanerBackoff is how long the log cleaner sleeps after a round that
	// found nothing to clean (log.cleaner.backoff.ms). Default 15s.
	CleanerBackoff time.Duration
	// CleanerIOMaxBytesPerSecond bounds the log cleaner's reads and
	// writes together (log.cleaner.io.max.bytes.per.second). Default and
	// any value <= 0: no limit.
	CleanerIOMaxBytesPerSecond int64
	// ReplicaMaxWait is the follower long-poll wait. Default 500ms.
	ReplicaMaxWait time.Duration
	// ReplicaWalkEvery is how often a follower's fetch session looks at
	// every partition it follows, not only the changed ones
	// (replication.Fetcher.WalkEvery). Default 10s; tests change it.
	ReplicaWalkEvery time.Duration
	// Tiering is the tiering service's base URL; empty disables tiered
	// storage on this node (tiering.go).
	Tiering string
	// TierInterval is how often the tiering loop runs. Default 5s.
	TierInterval time.Duration
	// FS holds the replicas' partition logs. Default vfs.Default (the OS);
	// fault tests give a faulty one (--fault-injection, faults.go).
	FS vfs.FS
	// OnLogFailure is called once for each replica whose partition log
	// fails (a write or fsync error: EIO, a full disk), from the goroutine
	// that met the error. The log refuses writes from then on, so the
	// replica can neither lead nor follow until reopened. strata-storage
	// stops the process (fail-stop, as Kafka stops a broker whose last log
	// directory fails): leadership moves when its lease expires, and
	// recovery runs at the next start. Default: only logged.
	OnLogFailure func(topic string, partition int32, err error)
	// HTTPClient makes every call the node sends: to the controller, to
	// the leaders it follows and to tiering. strata-storage gives the
	// process's client, which presents the node's certificate (mutual TLS)
	// when TLS is on. Default http.DefaultClient.
	HTTPClient     *http.Client
	ClientOptions  []connect.ClientOption
	HandlerOptions []connect.HandlerOption
	Logger         *slog.Logger // default slog.Default()
	// Clock is the time source for leases and replica lag. Default
	// clock.System.
	Clock clock.Clock
	// Guard authorizes and throttles requests (security.go); the node
	// keeps it current with the users, ACLs and quotas of its metadata
	// view. strata-storage gives the process's (lib/serve). Default a
	// guard that does not enforce: everything allowed, no quotas until
	// the metadata stream brings some.
	Guard *guard.Guard
}

type tpKey struct {
	topic     string
	partition int32
}

type hosted struct {
	r            *replica.Replica
	configs      map[string]string  // the topic configs r runs with
	minISR       int32              // the partition's min.insync.replicas r runs with; 0 for the topic's
	stopFollow   context.CancelFunc // nil when no follower loop runs
	followEpoch  int32
	followLeader int32
}

// Node is a running storage node. Close it to stop.
type Node struct {
	cfg    Config
	logger *slog.Logger
	meta   *metadata.Client
	isr    *replication.ISRLoop // proposes the led replicas' ISR changes

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	view     *metaview.View
	replicas map[tpKey]*hosted
	// hosted is replicas' replicas as a slice, built on demand and
	// dropped (nil) at every change of replicas: the ISR loop, metrics
	// and rounds walk it each second, and the map rarely changes.
	hosted  []*replica.Replica
	clients map[string]storagev1connect.StorageServiceClient
	closed  bool

	fetchMu  sync.Mutex
	fetchers map[int32]*replication.Fetcher // by leader node id; started on first use, run until Close

	tier *tiering // tiered storage (tiering.go); nil when disabled

	throttle *moveThrottle // replication throttle of partition moves (throttle.go)

	cleaner cleanerState // what the log cleaner last saw (cleaner.go)

	straysChecked bool // removeStrays ran (strays.go); reconcile's goroutine only

	security *commonv1.SecurityState // last applied to cfg.Guard (security.go); reconcile's goroutine only

	passes reconcilePasses // what reconcile visits next (reconcile.go); reconcile's goroutine only
}

// Start validates cfg and starts the node: registration, heartbeats and the
// metadata watch, the ISR loop and retention. Serve Handler on the listener
// whose address is cfg.Advertise.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	var errs []error
	if cfg.NodeID < 0 {
		errs = append(errs, fmt.Errorf("node id %d is negative", cfg.NodeID))
	}
	if cfg.Advertise == "" {
		errs = append(errs, errors.New("advertise address is empty"))
	}
	if cfg.DataDir == "" {
		errs = append(errs, errors.New("data dir is empty"))
	}
	if len(cfg.Controllers) == 0 {
		errs = append(errs, errors.New("no controller address"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if cfg.ReplicaLagTime <= 0 {
		cfg.ReplicaLagTime = 10 * time.Second
	}
	if cfg.ISRCheckInterval <= 0 {
		cfg.ISRCheckInterval = min(cfg.ReplicaLagTime/4, time.Second)
	}
	if cfg.RetentionInterval <= 0 {
		cfg.RetentionInterval = time.Minute
	}
	if cfg.CleanerBackoff <= 0 {
		cfg.CleanerBackoff = DefaultCleanerBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.Guard == nil {
		g, err := guard.New(ctx, guard.Config{Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		cfg.Guard = g
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("server: data dir: %w", err)
	}
	n := &Node{
		cfg: cfg, logger: cfg.Logger.With("node_id", cfg.NodeID),
		view:     &metaview.View{Topics: map[string]*commonv1.TopicMetadata{}},
		replicas: map[tpKey]*hosted{},
		clients:  map[string]storagev1connect.StorageServiceClient{},
		fetchers: map[int32]*replication.Fetcher{},
		throttle: newMoveThrottle(cfg.NodeID),
		cleaner:  cleanerState{last: map[tpKey]cleanerSeen{}},
	}
	n.meta = metadata.New(metadata.Config{
		NodeID: cfg.NodeID, Address: cfg.Advertise, Listeners: cfg.Listeners, Rack: cfg.Rack, Controllers: cfg.Controllers,
		HTTPClient: cfg.HTTPClient, Options: cfg.ClientOptions, Logger: n.logger, Clock: cfg.Clock,
		Quotas: quotaExchange{cfg.Guard}, // security.go
	})
	n.ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	n.isr = &replication.ISRLoop{Replicas: n.hostedReplicas, Meta: n.meta, Clock: cfg.Clock, Interval: cfg.ISRCheckInterval, Logger: n.logger}
	// Tiering first: reconcile, retention and the cleaner read n.tier,
	// which is set once here.
	n.startTiering() // tiered storage (tiering.go)
	n.goRun(func(ctx context.Context) { n.meta.Run(ctx, n.reconcile) })
	n.goRun(n.isr.Run)
	n.goRun(n.retentionLoop)
	n.goRun(n.cleanerLoop) // cleaner.go
	n.registerMetrics()    // telemetry.go
	return n, nil
}

func (n *Node) goRun(fn func(context.Context)) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		fn(n.ctx)
	}()
}

// Handler returns the StorageService path and handler.
func (n *Node) Handler() (string, http.Handler) {
	opts := append([]connect.HandlerOption{serve.DataPathHandlerOption(), connect.WithInterceptors(rules.Interceptor())}, n.cfg.HandlerOptions...)
	path, h := storagev1connect.NewStorageServiceHandler(&service{n: n}, opts...)
	return path, withReadBufs(h) // pooled read buffers (readbuf.go)
}

// Ready is the readiness check: nil once the node has registered and
// applied metadata. It reads a field and does no I/O.
func (n *Node) Ready(context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.view.Version == 0 {
		return errors.New("no metadata from the controller yet")
	}
	return nil
}

// Close stops every loop and closes every replica. Safe to call twice.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for k, h := range n.replicas {
		if h.stopFollow != nil {
			h.stopFollow()
		}
		errs = append(errs, h.r.Close())
		delete(n.replicas, k)
	}
	n.hosted = nil
	return errors.Join(errs...)
}

// hostedReplicas returns every hosted replica. The slice is shared: the
// caller must not change it.
func (n *Node) hostedReplicas() []*replica.Replica {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hosted == nil {
		n.hosted = make([]*replica.Replica, 0, len(n.replicas))
		for _, h := range n.replicas {
			n.hosted = append(n.hosted, h.r)
		}
	}
	return n.hosted
}

// replica returns the hosted replica of a partition, or nil.
func (n *Node) replica(topic string, partition int32) *replica.Replica {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h := n.replicas[tpKey{topic, partition}]; h != nil {
		return h.r
	}
	return nil
}

func (n *Node) currentView() *metaview.View {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.view
}

func (n *Node) storageClient(addr string) storagev1connect.StorageServiceClient {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.clients[addr]
	if c == nil {
		opts := append([]connect.ClientOption{serve.DataPathClientOption()}, n.cfg.ClientOptions...)
		c = storagev1connect.NewStorageServiceClient(n.cfg.HTTPClient, addr, opts...)
		n.clients[addr] = c
	}
	return c
}

// ensure opens the replica of a partition if it is not open yet, and
// applies the topic's configs and the partition's min.insync.replicas to
// an open one when they changed. A directory left by an older topic of the
// same name is wiped.
func (n *Node) ensure(t *commonv1.TopicMetadata, p *commonv1.PartitionMetadata) (*hosted, error) {
	partition := p.GetPartition()
	k := tpKey{t.GetName(), partition}
	n.mu.Lock()
	h := n.replicas[k]
	n.mu.Unlock()
	if h != nil {
		if !sameConfigs(h.configs, t.GetConfigs()) || h.minISR != p.GetMinInsyncReplicas() {
			cfg, err := partitionConfig(t, p)
			if err == nil {
				err = h.r.SetConfig(cfg)
			}
			if err != nil {
				// Keep running with the configuration in force; the next
				// change is tried again.
				n.logger.Error("cannot apply changed topic configs", "topic", k.topic, "partition", k.partition, "err", err)
			}
			h.configs, h.minISR = t.GetConfigs(), p.GetMinInsyncReplicas()
		}
		return h, nil
	}
	dir := replica.Dir(n.cfg.DataDir, k.topic, partition)
	idFile := filepath.Join(dir, "topic-id")
	if b, err := os.ReadFile(idFile); err == nil && t.GetTopicId() != "" && strings.TrimSpace(string(b)) != t.GetTopicId() {
		n.logger.Warn("replica directory belongs to an older topic of the same name; deleting", "dir", dir)
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	cfg, err := partitionConfig(t, p)
	if err != nil {
		return nil, err
	}
	r, err := replica.Open(dir, k.topic, t.GetTopicId(), partition, cfg, replica.Options{
		NodeID: n.cfg.NodeID, LagTime: n.cfg.ReplicaLagTime, Logger: n.logger, Clock: n.cfg.Clock, FS: n.cfg.FS,
		NodeEpoch: n.meta.NodeEpoch, OnLogFailure: n.logFailed(k), ObserveStage: observeStage, // telemetry.go
		ISRRecheck: n.isr.Recheck,
	})
	if err != nil {
		return nil, err
	}
	if t.GetTopicId() != "" {
		if err := os.WriteFile(idFile, []byte(t.GetTopicId()+"\n"), 0o644); err != nil {
			r.Close()
			return nil, err
		}
	}
	n.tierOpened(r)      // tiered topic: an empty log waits for the tier state (tiering.go)
	exportTopic(k.topic) // telemetry.go
	h = &hosted{r: r, configs: t.GetConfigs(), minISR: p.GetMinInsyncReplicas(), followEpoch: -1, followLeader: -1}
	n.mu.Lock()
	n.replicas[k] = h
	n.hosted = nil
	n.mu.Unlock()
	return h, nil
}

// partitionConfig is the replica configuration of partition p of topic t:
// the topic's configs (TopicConfig), with the partition's own
// min.insync.replicas when the controller sends one (it is per partition,
// since partitions of a topic can have different replication factors).
func partitionConfig(t *commonv1.TopicMetadata, p *commonv1.PartitionMetadata) (replica.Config, error) {
	cfg, err := TopicConfig(t.GetConfigs())
	if err != nil {
		return cfg, err
	}
	if mi := p.GetMinInsyncReplicas(); mi > 0 {
		cfg.MinISR = int(mi)
	}
	return cfg, nil
}

// logFailed is the failure hook of partition k's log.
func (n *Node) logFailed(k tpKey) func(error) {
	return func(err error) {
		n.logger.Error("partition log failed; the replica can neither lead nor follow until reopened",
			"topic", k.topic, "partition", k.partition, "err", err)
		if n.cfg.OnLogFailure != nil {
			n.cfg.OnLogFailure(k.topic, k.partition, err)
		}
	}
}

func sameConfigs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// syncFollower keeps exactly one Follower per (leader, epoch) in the fetch
// session with the leader node while the replica follows, and none
// otherwise.
func (n *Node) syncFollower(k tpKey, h *hosted) {
	v := h.r.View()
	following := v.Role == replica.RoleFollower
	if following && h.stopFollow != nil && h.followEpoch == v.State.LeaderEpoch && h.followLeader == v.State.LeaderID {
		return
	}
	if h.stopFollow != nil {
		h.stopFollow()
		h.stopFollow = nil
	}
	if !following {
		return
	}
	leader := v.State.LeaderID
	ctx, cancel := context.WithCancel(n.ctx)
	fetcher := n.fetcher(leader)
	f := &replication.Follower{
		Replica: h.r, LeaderEpoch: v.State.LeaderEpoch,
		Logger: n.logger.With("topic", k.topic, "partition", k.partition, "leader", leader),
	}
	fetcher.Add(ctx, f)
	h.stopFollow = func() {
		cancel()
		fetcher.Remove(f)
	}
	h.followEpoch, h.followLeader = v.State.LeaderEpoch, leader
}

// fetcher returns this node's fetch session with leader node id, starting
// it on first use. It runs until the node closes; with no partitions it
// waits without calling the leader.
func (n *Node) fetcher(leader int32) *replication.Fetcher {
	n.fetchMu.Lock()
	defer n.fetchMu.Unlock()
	if f := n.fetchers[leader]; f != nil {
		return f
	}
	f := &replication.Fetcher{
		NodeID: n.cfg.NodeID,
		Leader: func() storagev1connect.StorageServiceClient {
			addr := n.currentView().RegisteredAddress(leader)
			if addr == "" {
				return nil
			}
			return n.throttle.follower(n.storageClient(addr))
		},
		NodeEpoch: n.meta.NodeEpoch, MaxWait: n.cfg.ReplicaMaxWait, WalkEvery: n.cfg.ReplicaWalkEvery,
		Logger: n.logger.With("leader", leader),
	}
	n.fetchers[leader] = f
	n.goRun(f.Run)
	return f
}

func (n *Node) retentionLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.retentionRound(ctx)
	}
}

// retentionRound applies retention.ms and retention.bytes to every hosted
// replica, except replicas of tiered topics on a node that tiers: their
// local segments go only once the tier holds them (deleteTieredLocal,
// tiering.go). Deleting a segment the tier does not hold would leave a gap
// between the tier's end and the local log start that no upload can fill,
// even when the segment is past total retention, because the tier may hold
// older data that total retention keeps (by bytes, or newer timestamps).
func (n *Node) retentionRound(ctx context.Context) {
	for _, r := range n.hostedReplicas() {
		if n.tier != nil {
			if _, tiered := n.tieredTopic(r.Topic); tiered {
				continue
			}
		}
		if _, err := r.Log().ApplyRetention(ctx); err != nil && !errors.Is(err, partlog.ErrClosed) {
			n.logger.Warn("retention failed", "topic", r.Topic, "partition", r.Partition, "err", err)
		}
	}
}

// TopicConfig maps a topic's effective configs (Kafka key names) to the
// replica configuration. Unknown keys are ignored; missing keys take the
// partlog and replica defaults. Retention follows cleanup.policy: a topic
// without the delete policy keeps every segment (topicconfig.Retention).
// Millisecond counts saturate (topicconfig.Millis): Kafka accepts any
// long, and a value past time.Duration's range means "never", not a
// wrapped short time.
func TopicConfig(m map[string]string) (replica.Config, error) {
	var cfg replica.Config
	var errs []error
	num := func(key string, set func(int64)) {
		s, ok := m[key]
		if !ok || s == "" {
			return
		}
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("config %s=%q: not an integer", key, s))
			return
		}
		set(v)
	}
	num(topicconfig.SegmentBytes, func(v int64) { cfg.Log.SegmentBytes = v })
	num(topicconfig.SegmentMs, func(v int64) { cfg.Log.SegmentAge = topicconfig.Millis(v) })
	num(topicconfig.SegmentJitterMs, func(v int64) { cfg.Log.SegmentJitter = topicconfig.Millis(v) })
	num(topicconfig.IndexIntervalBytes, func(v int64) {
		// partlog takes zero as its default; Kafka's 0 indexes every
		// batch, as one byte does.
		cfg.Log.IndexIntervalBytes = int(max(v, 1))
	})
	// Checked here for the error; read through topicconfig.Retention.
	num(topicconfig.RetentionMs, func(int64) {})
	num(topicconfig.RetentionBytes, func(int64) {})
	retMs, retBytes := topicconfig.Retention(m)
	switch {
	case retMs < 0:
		cfg.Log.RetentionAge = -1
	case retMs == 0:
		// partlog takes zero as its default; one nanosecond is zero
		// milliseconds to its comparison, as Kafka's retention.ms=0.
		cfg.Log.RetentionAge = 1
	default:
		cfg.Log.RetentionAge = topicconfig.Millis(retMs)
	}
	switch {
	case retBytes < 0:
		cfg.Log.RetentionBytes = -1
	case retBytes == 0:
		cfg.Log.RetentionBytes = retainNoBytes
	default:
		cfg.Log.RetentionBytes = retBytes
	}
	num(topicconfig.MaxMessageBytes, func(v int64) {
		if v > 0 {
			// The limit is on the records; allow the batch framing too.
			cfg.Log.MaxBatchBytes = int(v) + 64<<10
		}
	})
	num(topicconfig.MinInsyncReplicas, func(v int64) { cfg.MinISR = int(v) })
	cfg.Produce = produceRules(m)
	// Flush policy, with Kafka's keys: flush.messages=1 fsyncs before every
	// ack (group commit); a flush.ms below a day fsyncs on that interval;
	// otherwise durability comes from replication.
	num(topicconfig.FlushMs, func(v int64) {
		if v > 0 && v < 24*3600*1000 {
			cfg.Log.Flush = partlog.FlushPolicy{Mode: partlog.FlushInterval, Interval: topicconfig.Millis(v)}
		}
	})
	num(topicconfig.FlushMessages, func(v int64) {
		if v == 1 {
			cfg.Log.Flush = partlog.FlushPolicy{Mode: partlog.FlushSync}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return cfg, err
	}
	return cfg, cfg.Log.Validate()
}
