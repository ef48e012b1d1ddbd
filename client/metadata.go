package client

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
)

// cluster is the metadata cache a producer or consumer routes by: topics
// with their partitions' leaders and leader epochs, and the storage nodes'
// addresses. It bootstraps from the gateway's Metadata RPC, refreshes on
// demand (after errors that mean it is stale) and every metadataMaxAge, and
// never goes back to an answer older than the one it has. Safe for
// concurrent use.
type cluster struct {
	gatewayURL string
	gw         gatewayv1connect.GatewayServiceClient
	httpc      connect.HTTPClient
	copts      []connect.ClientOption
	cfg        *config

	mu         sync.Mutex
	version    int64
	answered   bool // a Metadata call has succeeded at least once
	nodes      map[int32]string
	topics     map[string]*topicInfo
	missing    map[string]bool // topics the last answer listed as unknown
	interest   map[string]struct{}
	storages   map[string]storagev1connect.StorageServiceClient
	refreshing chan struct{} // closed when the running refresh ends; nil when none runs
	refreshErr error         // result of the last refresh
	// refreshStarted and refreshEnded number the refreshes: the last one
	// started and the last one ended (they run one at a time).
	refreshStarted, refreshEnded uint64
	throttled                    map[string]time.Time // node address -> no request before (throttle.go)

	ctx       context.Context // canceled by close
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// topicInfo is one topic's routing; replaced whole on refresh, never
// modified, so readers may keep a pointer.
type topicInfo struct {
	id    string
	parts []partInfo
	// maxMessageBytes is the topic's max.message.bytes when its
	// metadata sets it, else 0 (the cluster's default applies).
	maxMessageBytes int64
}

type partInfo struct {
	leader int32  // node id, -1 when offline
	epoch  int32  // leader epoch
	addr   string // leader's base URL; empty when unknown
}

func newCluster(gateway string, cfg *config) *cluster {
	httpc := cfg.httpc
	if httpc == nil { // a cluster built without NewProducer or NewConsumer (tests)
		httpc = newHTTPClient(nil)
	}
	copts := cfg.connectOptions() // trace context on every RPC (tracing.go)
	c := &cluster{
		gatewayURL: gateway,
		gw:         gatewayv1connect.NewGatewayServiceClient(httpc, gateway, copts...),
		httpc:      httpc,
		copts:      copts,
		cfg:        cfg,
		nodes:      map[int32]string{},
		topics:     map[string]*topicInfo{},
		missing:    map[string]bool{},
		interest:   map[string]struct{}{},
		storages:   map[string]storagev1connect.StorageServiceClient{},
		throttled:  map[string]time.Time{},
		done:       make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.refreshLoop()
	return c
}

// close stops the periodic refresh and the TLS files' watcher. Safe to
// call twice.
func (c *cluster) close() {
	c.closeOnce.Do(func() {
		c.cancel()
		c.cfg.closeTransport()
	})
	<-c.done
}

func (c *cluster) refreshLoop() {
	defer close(c.done)
	t := time.NewTicker(c.cfg.metadataMaxAge)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.mu.Lock()
			idle := len(c.interest) == 0
			c.mu.Unlock()
			if idle {
				continue
			}
			_ = c.refresh(c.ctx) // errors surface on the data path
		}
	}
}

// refresh asks the gateway for the metadata of every topic of interest. A
// caller joins a refresh that starts after its call, never one already
// running when it called: that one may have asked before the change the
// caller has just seen (a topic created again, a new leader), so the caller
// waits for it to end and then starts, or joins, the next.
func (c *cluster) refresh(ctx context.Context) error {
	c.mu.Lock()
	need := c.refreshStarted + 1
	for c.refreshEnded < need {
		ch := c.refreshing
		if ch == nil {
			break
		}
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
	}
	if c.refreshEnded >= need {
		err := c.refreshErr
		c.mu.Unlock()
		return err
	}
	ch := make(chan struct{})
	c.refreshing = ch
	c.refreshStarted++
	seq := c.refreshStarted
	topics := make([]string, 0, len(c.interest))
	for t := range c.interest {
		topics = append(topics, t)
	}
	c.mu.Unlock()

	var err error
	if len(topics) > 0 {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
		var resp *connect.Response[gatewayv1.MetadataResponse]
		resp, err = c.gw.Metadata(rctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: topics}))
		cancel()
		if err == nil {
			c.apply(resp.Msg)
		} else {
			err = fromConnect(err)
		}
	}

	c.mu.Lock()
	c.refreshing = nil
	c.refreshErr = err
	c.refreshEnded = seq
	c.mu.Unlock()
	close(ch)
	return err
}

// apply merges a Metadata answer. An answer older than the cache only adds
// topics the cache does not have: a load balancer may send us to a gateway
// that lags behind the one that answered last.
func (c *cluster) apply(m *gatewayv1.MetadataResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answered = true
	stale := m.GetMetadataVersion() < c.version
	if !stale {
		c.version = m.GetMetadataVersion()
		for _, n := range m.GetNodes() {
			c.nodes[n.GetNodeId()] = n.GetAddress()
		}
	}
	for _, t := range m.GetTopics() {
		if stale && c.topics[t.GetName()] != nil {
			continue
		}
		ti := &topicInfo{id: t.GetTopicId(), parts: make([]partInfo, len(t.GetPartitions()))}
		if v, err := strconv.ParseInt(t.GetConfigs()["max.message.bytes"], 10, 64); err == nil && v > 0 {
			ti.maxMessageBytes = v
		}
		for _, p := range t.GetPartitions() {
			i := int(p.GetPartition())
			if i < 0 || i >= len(ti.parts) {
				continue
			}
			ti.parts[i] = c.partInfoLocked(p, m.GetNodes())
		}
		c.topics[t.GetName()] = ti
		delete(c.missing, t.GetName())
	}
	for _, name := range m.GetUnknownTopics() {
		if stale {
			continue
		}
		delete(c.topics, name)
		c.missing[name] = true
	}
}

func (c *cluster) partInfoLocked(p *commonv1.PartitionMetadata, nodes []*commonv1.Node) partInfo {
	pi := partInfo{leader: p.GetLeaderId(), epoch: p.GetLeaderEpoch()}
	for _, n := range nodes {
		if n.GetNodeId() == pi.leader {
			pi.addr = n.GetAddress()
		}
	}
	if pi.addr == "" && pi.leader >= 0 {
		pi.addr = c.nodes[pi.leader]
	}
	return pi
}

// topic returns a topic's routing, asking the gateway when it is not
// cached. A topic the gateway does not know is asked for again for up to
// UnknownTopicWait before *UnknownTopicError is returned. A gateway that
// never answered fails at once, so a wrong address is reported quickly, and
// so does a refusal of the caller's credentials or permissions.
func (c *cluster) topic(ctx context.Context, name string) (*topicInfo, error) {
	deadline := time.Now().Add(c.cfg.unknownTopicWait)
	bo := newBackoff(c.cfg)
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		t := c.topics[name]
		c.interest[name] = struct{}{}
		answered := c.answered
		c.mu.Unlock()
		if t != nil {
			return t, nil
		}
		err := c.refresh(ctx)
		c.mu.Lock()
		t = c.topics[name]
		missing := c.missing[name]
		c.mu.Unlock()
		switch {
		case t != nil:
			return t, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil && (!answered || refused(err)):
			return nil, err
		case time.Now().After(deadline):
			if err != nil && !missing {
				return nil, err
			}
			return nil, &UnknownTopicError{Topic: name}
		}
		if err := sleep(ctx, min(bo.NextBackOff(), time.Until(deadline)+time.Millisecond)); err != nil {
			return nil, err
		}
	}
}

// known returns a cached topic without asking the gateway.
func (c *cluster) known(name string) *topicInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.topics[name]
}

// isMissing reports whether the last answer said the topic does not exist.
func (c *cluster) isMissing(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.missing[name]
}

// leader returns the leader of a partition with a client for it.
func (c *cluster) leader(ctx context.Context, topic string, partition int32) (partInfo, storagev1connect.StorageServiceClient, error) {
	t, err := c.topic(ctx, topic)
	if err != nil {
		return partInfo{}, nil, err
	}
	if partition < 0 || int(partition) >= len(t.parts) {
		return partInfo{}, nil, fmt.Errorf("client: topic %q has no partition %d", topic, partition)
	}
	p := t.parts[partition]
	if p.leader < 0 || p.addr == "" {
		return p, nil, scoped(topicPartition{topic, partition}, fmt.Errorf("%w: %s/%d", ErrNoLeader, topic, partition))
	}
	return p, c.storage(p.addr), nil
}

// storage returns the (shared) client for a storage node.
func (c *cluster) storage(addr string) storagev1connect.StorageServiceClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.storages[addr]
	if s == nil {
		// Record batches are already compressed by the producer's codec:
		// ask for uncompressed answers (Connect's clients accept gzip by
		// default and its handlers then gzip every answer).
		opts := append([]connect.ClientOption{connect.WithAcceptCompression("gzip", nil, nil)}, c.copts...)
		s = storagev1connect.NewStorageServiceClient(c.httpc, addr, opts...)
		c.storages[addr] = s
	}
	return s
}

// applyHint takes a not-leader answer's hint about the new leader when it
// is newer than the cache, saving a metadata round trip. It reports
// whether it changed anything.
func (c *cluster) applyHint(err error) bool {
	var d *commonv1.ErrorDetail
	if e, ok := err.(*Error); ok {
		d = e.Detail
	}
	h := d.GetLeader()
	if h == nil || h.GetLeaderAddress() == "" || h.GetLeaderId() < 0 {
		return false
	}
	topic, part := h.GetTopicPartition().GetTopic(), h.GetTopicPartition().GetPartition()
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.topics[topic]
	if t == nil || part < 0 || int(part) >= len(t.parts) || h.GetLeaderEpoch() <= t.parts[part].epoch {
		return false
	}
	// The hint names the leader's default address; the gateway's metadata
	// may have given this client another listener's address for the same
	// node (advertised listeners), which is the one it can reach.
	addr := h.GetLeaderAddress()
	if a, ok := c.nodes[h.GetLeaderId()]; ok && a != "" {
		addr = a
	}
	nt := &topicInfo{id: t.id, parts: append([]partInfo(nil), t.parts...), maxMessageBytes: t.maxMessageBytes}
	nt.parts[part] = partInfo{leader: h.GetLeaderId(), epoch: h.GetLeaderEpoch(), addr: addr}
	c.topics[topic] = nt
	return true
}

// retryJitter spreads each retry wait by ±20% at random, as Kafka's own
// clients do, so that the clients a gateway restart or a leader election
// interrupted together do not all retry in step.
const retryJitter = 0.2

// newBackoff returns the retry waits of one request: doubling from
// RetryBackoff to MaxRetryBackoff, spread by retryJitter.
func newBackoff(cfg *config) *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     cfg.retryBackoff,
		RandomizationFactor: retryJitter,
		Multiplier:          2,
		MaxInterval:         max(cfg.maxRetryBackoff, cfg.retryBackoff),
	}
	b.Reset()
	return b
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
