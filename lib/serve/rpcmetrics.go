package serve

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/semconv/v1.43.0/rpcconv"
)

// rpcMetrics records the rpc.server.call.duration and
// rpc.client.call.duration histograms of unary calls, with the attributes
// otelconnect gives them (rpc.system.name, rpc.method,
// rpc.response.status_code, error.type on failure, and server.address and
// server.port on the client side), but with each distinct attribute set
// built once and kept: otelconnect builds, sorts and hashes a new set for
// every call, the largest part of what telemetry cost a storage node per
// Produce, Fetch and Replicate. Streams keep otelconnect's metrics (they
// are few and long).
type rpcMetrics struct {
	server, client metric.Float64Histogram

	mu   sync.RWMutex
	sets map[rpcKey][]metric.RecordOption
}

// rpcMetricsScope is the instrumentation scope of the unary call metrics.
const rpcMetricsScope = "github.com/strata-mq/strata/lib/serve"

type rpcKey struct {
	client      bool
	procedure   string
	protocol    string
	peer        string // client side: the server's host:port
	code        connect.Code
	failed      bool
	notModified bool
}

// maxRPCSets bounds the cache; past it, it starts over.
const maxRPCSets = 4096

func newRPCMetrics(meter metric.Meter) (*rpcMetrics, error) {
	buckets := metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
	server, err := meter.Float64Histogram(rpcconv.ServerCallDuration{}.Name(), metric.WithUnit(rpcconv.ServerCallDuration{}.Unit()),
		metric.WithDescription(rpcconv.ServerCallDuration{}.Description()), buckets)
	if err != nil {
		return nil, err
	}
	client, err := meter.Float64Histogram(rpcconv.ClientCallDuration{}.Name(), metric.WithUnit(rpcconv.ClientCallDuration{}.Unit()),
		metric.WithDescription(rpcconv.ClientCallDuration{}.Description()), buckets)
	if err != nil {
		return nil, err
	}
	return &rpcMetrics{server: server, client: client, sets: map[rpcKey][]metric.RecordOption{}}, nil
}

func (m *rpcMetrics) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		spec, peer := req.Spec(), req.Peer()
		k := rpcKey{client: spec.IsClient, procedure: spec.Procedure, protocol: peer.Protocol}
		if spec.IsClient {
			k.peer = peer.Addr
		}
		if err != nil {
			k.failed = true
			if connect.IsNotModifiedError(err) {
				k.notModified = true
			} else {
				k.code = connect.CodeOf(err)
			}
		}
		h := m.server
		if spec.IsClient {
			h = m.client
		}
		h.Record(ctx, time.Since(start).Seconds(), m.set(k)...)
		return resp, err
	}
}

func (m *rpcMetrics) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (m *rpcMetrics) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// set returns the record options of k's attribute set, building it once.
func (m *rpcMetrics) set(k rpcKey) []metric.RecordOption {
	m.mu.RLock()
	o, ok := m.sets[k]
	m.mu.RUnlock()
	if ok {
		return o
	}
	o = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(rpcAttributes(k)...))}
	m.mu.Lock()
	if len(m.sets) >= maxRPCSets {
		clear(m.sets)
	}
	m.sets[k] = o
	m.mu.Unlock()
	return o
}

// rpcAttributes are otelconnect's metric attributes of a unary call.
func rpcAttributes(k rpcKey) []attribute.KeyValue {
	system := k.protocol
	switch k.protocol {
	case connect.ProtocolConnect:
		system = "connectrpc"
	case connect.ProtocolGRPC, connect.ProtocolGRPCWeb:
		system = "grpc"
	}
	attrs := []attribute.KeyValue{
		attribute.String("rpc.system.name", system),
		attribute.String("rpc.method", strings.TrimLeft(k.procedure, "/")),
	}
	if k.client && k.peer != "" {
		if host, port, err := net.SplitHostPort(k.peer); err == nil {
			if p, err := strconv.Atoi(port); err == nil {
				attrs = append(attrs, attribute.String("server.address", host), attribute.Int("server.port", p))
			} else {
				attrs = append(attrs, attribute.String("server.address", k.peer))
			}
		} else {
			attrs = append(attrs, attribute.String("server.address", k.peer))
		}
	}
	switch {
	case !k.failed:
		attrs = append(attrs, attribute.String("rpc.response.status_code", "OK"))
	case k.notModified:
		attrs = append(attrs, attribute.String("rpc.response.status_code", "OK"), attribute.Int("http.response.status_code", 304))
	default:
		code := strings.ToUpper(k.code.String())
		attrs = append(attrs, attribute.String("rpc.response.status_code", code), attribute.String("error.type", code))
	}
	return attrs
}

var _ connect.Interceptor = (*rpcMetrics)(nil)
