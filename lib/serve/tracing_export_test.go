package serve

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// spanNames collects the names of exported spans.
type spanNames struct {
	mu    sync.Mutex
	names []string
}

func (s *spanNames) add(req *coltracepb.ExportTraceServiceRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s.names = append(s.names, sp.GetName())
			}
		}
	}
}

func (s *spanNames) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.names...)
}

type grpcTraceService struct {
	coltracepb.UnimplementedTraceServiceServer
	got *spanNames
}

func (g grpcTraceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.got.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestSpansReachAnOTLPReceiver exports a span over each protocol the
// OTEL_EXPORTER_OTLP_PROTOCOL variable can name to a receiver in the test
// (gRPC and HTTP/protobuf), flushed by Shutdown.
func TestSpansReachAnOTLPReceiver(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			got := &spanNames{}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if protocol == "grpc" {
				srv := grpc.NewServer()
				coltracepb.RegisterTraceServiceServer(srv, grpcTraceService{got: got})
				go srv.Serve(ln) //nolint:errcheck // ends with Stop
				t.Cleanup(srv.Stop)
			} else {
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					body, _ := io.ReadAll(r.Body)
					var req coltracepb.ExportTraceServiceRequest
					if err := proto.Unmarshal(body, &req); err != nil {
						http.Error(w, err.Error(), http.StatusBadRequest)
						return
					}
					got.add(&req)
					out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
					w.Header().Set("Content-Type", "application/x-protobuf")
					_, _ = w.Write(out)
				})}
				go srv.Serve(ln) //nolint:errcheck // ends with Close
				t.Cleanup(func() { _ = srv.Close() })
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "")
			t.Setenv("OTEL_TRACES_EXPORTER", "")
			t.Setenv("OTEL_SDK_DISABLED", "")

			ctx := context.Background()
			tp, where, err := NewTracerProvider(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, span := tp.Tracer("test").Start(ctx, "exported over "+protocol)
			span.End()
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				t.Fatalf("shutdown (%s): %v", where, err)
			}
			if names := got.get(); len(names) != 1 || names[0] != "exported over "+protocol {
				t.Errorf("receiver got %v (%s)", names, where)
			}
		})
	}
}
