package serve

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// seriesValue returns the value of the one series of metric name whose
// labels include every label in want, or "" if none does.
func seriesValue(t *testing.T, metrics, name string, want ...string) string {
	t.Helper()
	var found []string
	for l := range strings.SplitSeq(metrics, "\n") {
		if !strings.HasPrefix(l, name+"{") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			found = append(found, l[strings.LastIndex(l, " ")+1:])
		}
	}
	if len(found) > 1 {
		t.Fatalf("%d series of %s with %v", len(found), name, want)
	}
	if len(found) == 0 {
		return ""
	}
	return found[0]
}

// TestUnaryCallMetrics: unary calls are counted in the
// rpc.server.call.duration and rpc.client.call.duration histograms with
// otelconnect's attributes: the system, the method, the status code (and
// error.type on failure), and the server's address and port on the client
// side.
func TestUnaryCallMetrics(t *testing.T) {
	tel := newTestTelemetry(t)
	const proc = "/strata.test.v1.EchoService/Echo"
	mux := http.NewServeMux()
	mux.Handle(proc, connect.NewUnaryHandler(proc,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			if req.Msg.Value == "missing" {
				return nil, connect.NewError(connect.CodeNotFound, errors.New("no such thing"))
			}
			return connect.NewResponse(wrapperspb.String(req.Msg.Value)), nil
		}, tel.ConnectOption()))
	s := StartServer(listenLocal(t), mux)
	defer s.Close()
	hc := NewHTTPClient()
	defer hc.CloseIdleConnections()
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, s.URL()+proc, tel.ConnectOption())
	for _, v := range []string{"a", "b", "c", "missing"} {
		_, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String(v)))
		if (v == "missing") != (connect.CodeOf(err) == connect.CodeNotFound) {
			t.Fatalf("call %q: %v", v, err)
		}
	}
	_, metrics := admin(t, tel.MetricsHandler(), "/metrics")
	port := s.URL()[strings.LastIndex(s.URL(), ":")+1:]
	method := `rpc_method="strata.test.v1.EchoService/Echo"`
	for _, c := range []struct {
		name string
		want []string
		n    string
	}{
		{"rpc_server_call_duration_seconds_count", []string{method, `rpc_response_status_code="OK"`, `rpc_system_name="connectrpc"`}, "3"},
		{"rpc_server_call_duration_seconds_count", []string{method, `rpc_response_status_code="NOT_FOUND"`, `error_type="NOT_FOUND"`}, "1"},
		{"rpc_client_call_duration_seconds_count", []string{method, `rpc_response_status_code="OK"`, `server_address="127.0.0.1"`, `server_port="` + port + `"`}, "3"},
		{"rpc_client_call_duration_seconds_count", []string{method, `rpc_response_status_code="NOT_FOUND"`, `server_port="` + port + `"`}, "1"},
	} {
		if got := seriesValue(t, metrics, c.name, c.want...); got != c.n {
			t.Errorf("%s with %v = %q, want %s", c.name, c.want, got, c.n)
		}
	}
}

// TestUnaryCallMetricsReuseAttributeSets: recording a call whose
// attributes were seen before allocates nothing.
func TestUnaryCallMetricsReuseAttributeSets(t *testing.T) {
	m, err := newRPCMetrics(noop.NewMeterProvider().Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	k := rpcKey{client: true, procedure: "/strata.storage.v1.StorageService/Produce", protocol: connect.ProtocolConnect, peer: "127.0.0.1:9102"}
	m.set(k)
	if n := testing.AllocsPerRun(100, func() { m.set(k) }); n != 0 {
		t.Errorf("%v allocations per call, want 0", n)
	}
}
