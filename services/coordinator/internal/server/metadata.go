package server

import (
	"context"
	"regexp"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
)

// metadataMaxAge is how long a topic's metadata is used before it is asked
// again; a rebalance notices a partition count change within it.
const metadataMaxAge = 2 * time.Second

// metadataTimeout bounds one Metadata or ListOffsets call.
const metadataTimeout = 3 * time.Second

// metaSource reads topic metadata from the gateway (Metadata) and offsets
// from partition leaders (ListOffsets). Answers are cached per topic for
// metadataMaxAge; when the gateway cannot be asked the last answer is used.
// Safe for concurrent use.
type metaSource struct {
	gw    gatewayv1connect.GatewayServiceClient
	httpc connect.HTTPClient
	opts  []connect.ClientOption

	mu       sync.Mutex
	all      allTopics
	topics   map[string]topicEntry
	nodes    map[int32]string
	storages map[string]storagev1connect.StorageServiceClient
}

// allTopics is the last list of every topic's name, and when it was asked.
type allTopics struct {
	names   []string
	fetched time.Time
}

type topicEntry struct {
	md      *commonv1.TopicMetadata // nil when the topic does not exist
	fetched time.Time
}

func newMetaSource(gateway string, httpc connect.HTTPClient, opts []connect.ClientOption) *metaSource {
	return &metaSource{
		gw:    gatewayv1connect.NewGatewayServiceClient(httpc, gateway, opts...),
		httpc: httpc, opts: opts,
		topics: map[string]topicEntry{}, nodes: map[int32]string{},
		storages: map[string]storagev1connect.StorageServiceClient{},
	}
}

// lookup returns the metadata of the named topics that exist.
func (m *metaSource) lookup(ctx context.Context, names []string) map[string]*commonv1.TopicMetadata {
	now := time.Now()
	var stale []string
	m.mu.Lock()
	for _, n := range names {
		if e, ok := m.topics[n]; !ok || now.Sub(e.fetched) > metadataMaxAge {
			stale = append(stale, n)
		}
	}
	m.mu.Unlock()
	if len(stale) > 0 {
		cctx, cancel := context.WithTimeout(ctx, metadataTimeout)
		resp, err := m.gw.Metadata(cctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: stale}))
		cancel()
		if err == nil {
			m.mu.Lock()
			for _, n := range resp.Msg.GetNodes() {
				m.nodes[n.GetNodeId()] = n.GetAddress()
			}
			for _, t := range resp.Msg.GetTopics() {
				m.topics[t.GetName()] = topicEntry{md: t, fetched: now}
			}
			for _, u := range resp.Msg.GetUnknownTopics() {
				m.topics[u] = topicEntry{fetched: now}
			}
			m.mu.Unlock()
		}
	}
	out := map[string]*commonv1.TopicMetadata{}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range names {
		if e := m.topics[n]; e.md != nil {
			out[n] = e.md
		}
	}
	return out
}

// matching returns the names of the topics whose whole name re matches,
// sorted: a regular expression subscription. The list of every topic is
// asked of the gateway at most once per metadataMaxAge, so a topic
// created later joins within that; when the gateway cannot be asked the
// last list is used.
func (m *metaSource) matching(ctx context.Context, re *regexp.Regexp) []string {
	m.mu.Lock()
	all := m.all
	m.mu.Unlock()
	if now := time.Now(); now.Sub(all.fetched) > metadataMaxAge {
		cctx, cancel := context.WithTimeout(ctx, metadataTimeout)
		resp, err := m.gw.Metadata(cctx, connect.NewRequest(&gatewayv1.MetadataRequest{}))
		cancel()
		if err == nil {
			all = allTopics{fetched: now}
			for _, t := range resp.Msg.GetTopics() {
				all.names = append(all.names, t.GetName())
			}
			m.mu.Lock()
			m.all = all
			m.mu.Unlock()
		}
	}
	var out []string
	for _, n := range all.names {
		if re.MatchString(n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// partitionCounts returns the partition count of each named topic that
// exists.
func (m *metaSource) partitionCounts(ctx context.Context, names []string) map[string]int32 {
	out := map[string]int32{}
	for n, md := range m.lookup(ctx, names) {
		out[n] = int32(len(md.GetPartitions()))
	}
	return out
}

func (m *metaSource) storage(addr string) storagev1connect.StorageServiceClient {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.storages[addr]
	if c == nil {
		c = storagev1connect.NewStorageServiceClient(m.httpc, addr, m.opts...)
		m.storages[addr] = c
	}
	return c
}

// offsetAnswer is one partition's ListOffsets result.
type offsetAnswer struct {
	offset int64
	err    *commonv1.ErrorDetail
}

// listOffsets asks each partition's leader for the offset spec names
// (timestamp for OFFSET_SPEC_TIMESTAMP). Partitions without a reachable
// leader get an UNAVAILABLE error.
func (m *metaSource) listOffsets(ctx context.Context, topic string, parts []int32, spec storagev1.OffsetSpec, ts int64) map[int32]offsetAnswer {
	out := map[int32]offsetAnswer{}
	md := m.lookup(ctx, []string{topic})[topic]
	type req struct {
		addr  string
		parts []*storagev1.ListOffsetsPartition
	}
	byLeader := map[string]*req{}
	m.mu.Lock()
	for _, p := range parts {
		if md == nil || p < 0 || int(p) >= len(md.GetPartitions()) {
			out[p] = offsetAnswer{offset: -1, err: apierr.Detail(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "partition %s-%d does not exist", topic, p)}
			continue
		}
		pm := md.GetPartitions()[p]
		addr := m.nodes[pm.GetLeaderId()]
		if pm.GetLeaderId() < 0 || addr == "" {
			out[p] = offsetAnswer{offset: -1, err: apierr.Detail(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "partition %s-%d has no leader", topic, p)}
			continue
		}
		r := byLeader[addr]
		if r == nil {
			r = &req{addr: addr}
			byLeader[addr] = r
		}
		r.parts = append(r.parts, &storagev1.ListOffsetsPartition{Topic: topic, Partition: p, CurrentLeaderEpoch: -1, Spec: spec, TimestampMs: ts})
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, r := range byLeader {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, metadataTimeout)
			defer cancel()
			resp, err := m.storage(r.addr).ListOffsets(cctx, connect.NewRequest(&storagev1.ListOffsetsRequest{Partitions: r.parts}))
			mu.Lock()
			defer mu.Unlock()
			for i, lp := range r.parts {
				switch {
				case err != nil:
					out[lp.GetPartition()] = offsetAnswer{offset: -1, err: apierr.Detail(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "cannot ask the leader of %s-%d: %v", topic, lp.GetPartition(), connect.CodeOf(err))}
				case i >= len(resp.Msg.GetPartitions()):
					out[lp.GetPartition()] = offsetAnswer{offset: -1, err: apierr.Detail(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "no answer for %s-%d", topic, lp.GetPartition())}
				default:
					pr := resp.Msg.GetPartitions()[i]
					out[lp.GetPartition()] = offsetAnswer{offset: pr.GetOffset(), err: pr.GetError()}
				}
			}
			if err != nil {
				// Routing may be stale: ask the gateway again next time.
				m.mu.Lock()
				delete(m.topics, topic)
				m.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// resolve is lookup that also names the topics the gateway answered do
// not exist; a name in neither map could not be asked about (the gateway
// unreachable and nothing cached).
func (m *metaSource) resolve(ctx context.Context, names []string) (found map[string]*commonv1.TopicMetadata, missing map[string]bool) {
	found = m.lookup(ctx, names)
	missing = map[string]bool{}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range names {
		if e, ok := m.topics[n]; ok && e.md == nil && found[n] == nil {
			missing[n] = true
		}
	}
	return found, missing
}

// leader returns the address of the leader of partition p of md, false
// when it has none or its address is unknown.
func (m *metaSource) leader(md *commonv1.TopicMetadata, p int32) (string, bool) {
	if p < 0 || int(p) >= len(md.GetPartitions()) {
		return "", false
	}
	id := md.GetPartitions()[p].GetLeaderId()
	m.mu.Lock()
	defer m.mu.Unlock()
	addr := m.nodes[id]
	return addr, id >= 0 && addr != ""
}

// forget drops a topic's cached metadata, so the next lookup asks the
// gateway: routing to its leaders failed.
func (m *metaSource) forget(topic string) {
	m.mu.Lock()
	delete(m.topics, topic)
	m.mu.Unlock()
}
