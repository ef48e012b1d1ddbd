// Package serve is the process runtime of every Strata service binary
// (controller, storage, gateway, coordinator, tiering), so that each
// service's cmd/main.go is a few lines and every service behaves the same
// way to an operator. docs/design/services.md describes the resulting
// process layout.
//
// A binary declares a config struct that embeds [Base] and implements
// [Config], and hands it with a [SetupFunc] to [Main]:
//
//	func main() {
//		cfg := &storage.Config{Base: serve.Base{Listen: ":9102", AdminListen: ":9202"}}
//		serve.Main(serve.Command{
//			Name:   "strata-storage",
//			Config: cfg,
//			Setup: func(ctx context.Context, p *serve.Process) (http.Handler, error) {
//				return storage.New(ctx, cfg, p) // registers checks and hooks on p
//			},
//		})
//	}
//
// Main then provides:
//
//   - flags with STRATA_* environment equivalents ([Flags]): a flag on the
//     command line beats the environment, which beats the default; --help
//     lists each flag with its variable and default;
//   - validation that reports every problem in one line and exits 2
//     ([Problems], [ConfigError]);
//   - a JSON slog logger on stderr (--log-format text for terminals) that
//     adds trace_id and span_id ([TraceHandler]), and one "starting" line
//     holding the resolved config with secrets redacted;
//   - OpenTelemetry: tracing configured by the standard OTEL_* variables,
//     metrics exported for Prometheus, and otelconnect for Connect handlers
//     and clients ([Telemetry], [Process.ConnectOption]);
//   - the API listener speaking HTTP/2 cleartext and HTTP/1.1 with large
//     flow-control windows ([StartServer]), and the matching client for
//     calls between services ([NewHTTPClient]);
//   - an admin listener with /healthz, /readyz, /metrics and /debug/pprof/
//     ([AdminHandler], [Health]), to which a service may add its own
//     endpoints ([Process.HandleAdmin]);
//   - graceful shutdown on SIGTERM or SIGINT: unready, drain, cancel,
//     shutdown hooks in reverse order, flush, exit 0 ([Command.Run]).
//
// The pieces are usable on their own: a test serves a handler with
// StartServer on 127.0.0.1:0 and calls it with NewHTTPClient.
package serve
