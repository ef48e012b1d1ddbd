package harness

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// OTLPReceiver is an OTLP/HTTP trace receiver in the test process: what a
// collector would be, without one. Processes export to URL (as
// OTEL_EXPORTER_OTLP_ENDPOINT or strata dev --otlp); the receiver decodes
// each ExportTraceServiceRequest (protobuf, gzip or not) and keeps every
// span with its process's resource. Safe for concurrent use.
type OTLPReceiver struct {
	// URL is the endpoint's base URL; spans are posted to URL/v1/traces.
	URL string

	mu       sync.Mutex
	spans    []Span
	requests int
}

// Span is one received span, flattened for assertions.
type Span struct {
	TraceID, SpanID, ParentID string // hex; ParentID empty for a root
	Name                      string
	Kind                      string            // SPAN_KIND_SERVER, ...
	Attrs                     map[string]string // span attributes, values as text
	Events                    []string          // event names
	Links                     []string          // linked span ids
	// Process identifies the exporting process: service.name, then
	// service.instance.id and process.pid where present.
	Process string
	// Service is the resource's service.name.
	Service string
}

// StartOTLPReceiver serves an OTLP/HTTP receiver on a loopback port until
// the test ends.
func StartOTLPReceiver(t testing.TB) *OTLPReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("harness: otlp receiver: %v", err)
	}
	r := &OTLPReceiver{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(r.serve)}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

func (r *OTLPReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "only POST /v1/traces", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range msg.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		process := res["service.name"]
		for _, k := range []string{"service.instance.id", "process.pid"} {
			if v := res[k]; v != "" {
				process += "/" + v
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Name: s.GetName(), Kind: s.GetKind().String(), Attrs: attrMap(s.GetAttributes()),
					Process: process, Service: res["service.name"],
				}
				if len(s.GetParentSpanId()) > 0 {
					sp.ParentID = hex.EncodeToString(s.GetParentSpanId())
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, e.GetName())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetSpanId()))
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.requests++
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(v.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(v.DoubleValue)
		default:
			m[kv.GetKey()] = strings.TrimSpace(kv.GetValue().String())
		}
	}
	return m
}

// Spans returns a copy of every span received so far.
func (r *OTLPReceiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace returns the received spans of one trace (id in hex).
func (r *OTLPReceiver) Trace(id string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

// Requests is how many export requests arrived.
func (r *OTLPReceiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}
