package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/tests/harness"
)

// The pipelined producers: the part of the workload that keeps five
// batches in flight per partition and lives with short timeouts, so that
// a lost or late answer, or a failure of another topic's batch, meets
// batches that may already be in the log. That is where an idempotent
// producer can append a batch twice (a batch rebuilt under a new producer
// id after an earlier attempt landed); the checker counts the duplicates.

const (
	pipelinedProducers = 2
	// pipelineTopic is written by the pipelined producers alone, every
	// partition by each, in bursts of pipelineBurst records
	// pipelineInterval apart, with a pause of pipelinePause to twice that
	// between bursts (pacing: how many operations a run records). Within
	// a burst a partition gets records faster than the leader answers, so
	// batches pile up in flight; the pauses space out the batches'
	// delivery deadlines, so that when one batch fails at its deadline
	// the next is still live and goes again (where a producer that drops
	// its id for the first rebuilds the second).
	pipelineTopic    = "pipelined"
	pipelineBurst    = 24
	pipelineInterval = 2 * time.Millisecond
	pipelinePause    = 100 * time.Millisecond
	// pipelineInFlight bounds each pipelined producer's unacknowledged
	// records: enough that a partition whose answers stop fills its five
	// batches in flight and keeps more buffered, while the others go on.
	pipelineInFlight = 512
	// pipelineRequestTimeout and pipelineDeliveryTimeout are the
	// pipelined producers' RequestTimeout and DeliveryTimeout. A call is
	// given up after the request timeout plus 5s (client/produce_node.go),
	// well inside the delivery timeout, so a batch whose answer is late
	// is sent again before it fails; the faults that lose or delay
	// answers are sized from these.
	pipelineRequestTimeout  = time.Second
	pipelineCallTimeout     = pipelineRequestTimeout + 5*time.Second
	pipelineDeliveryTimeout = 14 * time.Second

	// oversizeTopic refuses what the pipelined producers send it while
	// the oversize fault lasts: one record larger than its
	// max.message.bytes every oversizeEvery, whose batch fails with
	// RECORD_TOO_LARGE, a fatal error on the same producer as the
	// pipelined topic's batches.
	oversizeTopic  = "oversize"
	oversizeLimit  = 1024
	oversizeRecord = 128 << 10 // above the limit plus the batch framing the node allows (64 KiB)
	oversizeEvery  = 100 * time.Millisecond
)

// oversizeCounts counts the oversized records sent and how they ended:
// refused as too large, or otherwise (their leader's answers lost under
// another fault, say), the first such error kept.
type oversizeCounts struct {
	sent, refused, other atomic.Int64
	firstOther           atomic.Pointer[string]
}

// clientProxies are TCP proxies in front of each storage node that only
// the pipelined producers go through (other processes and clients reach
// the nodes directly), so that a fault can delay the answers one node
// gives them alone (answers-late). Keyed by the node's host:port.
type clientProxies map[string]*harness.Proxy

// startClientProxies starts a proxy in front of every storage node.
func startClientProxies(t testing.TB, nodes []*harness.Node) clientProxies {
	out := clientProxies{}
	for _, n := range nodes {
		hp := hostPort(n.URL)
		out[hp] = harness.StartProxy(t, hp)
	}
	return out
}

// of returns the proxy in front of node n.
func (cp clientProxies) of(n *harness.Node) *harness.Proxy { return cp[hostPort(n.URL)] }

// hostPort is the host:port of a base URL.
func hostPort(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Host
}

// httpClient is the pipelined producers' transport: the client's default
// (HTTP/2 cleartext with prior knowledge, PINGs that notice a dead node
// in about 30 seconds), dialing a storage node through its proxy.
func (cp clientProxies) httpClient() *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	protos.SetHTTP2(true)
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Protocols: &protos,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerConnection: 16 << 20,
			MaxReceiveBufferPerStream:     4 << 20,
			SendPingTimeout:               15 * time.Second,
			PingTimeout:                   15 * time.Second,
		},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if px := cp[addr]; px != nil {
				addr = px.Addr()
			}
			return d.DialContext(ctx, network, addr)
		},
		IdleConnTimeout:   5 * time.Minute,
		ForceAttemptHTTP2: true,
	}}
}

// producePipelined runs pipelined producer id until ctx ends, then waits
// for its records' outcomes (up to the delivery timeout) and closes it.
// Its records are in the history like the other producers'; the oversized
// ones, which never land, are only counted (run.oversize).
func (r *run) producePipelined(ctx context.Context, id int, rng *rand.Rand) {
	name := fmt.Sprintf("pipelined-%d", id)
	p, err := client.NewProducer(r.bed.group.Gateway.URL,
		client.HTTPClient(r.bed.clientProxies.httpClient()),
		client.MaxInFlight(5), client.Linger(time.Millisecond),
		client.RequestTimeout(pipelineRequestTimeout), client.DeliveryTimeout(pipelineDeliveryTimeout))
	if err != nil {
		r.t.Errorf("nemesis: %s: %v", name, err)
		return
	}
	defer p.Close()
	s := r.newSender(ctx, p, name, pipelineInFlight)
	var lastOversize time.Time
	pace := func(n int) time.Duration {
		if n%pipelineBurst == 0 {
			return pipelinePause + time.Duration(rng.Int64N(int64(pipelinePause)))
		}
		return pipelineInterval
	}
	for n := 0; sleep(ctx, pace(n)); n++ {
		if r.oversizing.Load() && time.Since(lastOversize) >= oversizeEvery {
			lastOversize = time.Now()
			r.oversize.sent.Add(1)
			s.wg.Add(1)
			p.Produce(s.ctx, &client.Record{Topic: oversizeTopic, Value: make([]byte, oversizeRecord)}, func(_ *client.Record, err error) {
				defer s.wg.Done()
				if client.ReasonOf(err) == commonv1.Reason_REASON_RECORD_TOO_LARGE {
					r.oversize.refused.Add(1)
				} else {
					r.oversize.other.Add(1)
					msg := fmt.Sprint(err)
					r.oversize.firstOther.CompareAndSwap(nil, &msg)
				}
			})
		}
		s.send(ctx, pipelineTopic, n, rng)
	}
	s.wait()
}
