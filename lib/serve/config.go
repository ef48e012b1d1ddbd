package serve

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// Config is what a service's config struct implements to be run by [Main].
// The struct embeds [Base] (which provides the unexported method), declares
// its own fields in RegisterFlags and checks them in Validate. Main
// registers and validates Base itself, before the service's own flags, so a
// service cannot forget them.
type Config interface {
	// RegisterFlags declares the service's own flags, each bound to a
	// field, with its default and help text.
	RegisterFlags(f *Flags)
	// Validate checks the service's own fields after parsing and returns
	// every problem at once, normally through [Problems].
	Validate() error

	base() *Base
}

// Defaults of [Base]; a service overrides them by setting the Base fields
// before calling [Main].
const (
	DefaultListen       = "127.0.0.1:9092"
	DefaultLogFormat    = "json"
	DefaultDrainTimeout = 20 * time.Second
)

// Base is the part of the config every service shares. Embed it in the
// service's config struct. Fields that are non-zero when [Main] registers
// the flags become the flags' defaults, so a service sets its own default
// ports like this:
//
//	cfg := storage.Config{Base: serve.Base{Listen: ":9102", AdminListen: ":9202"}}
type Base struct {
	// Listen is the address the service's Connect API listens on (--listen).
	// Default DefaultListen.
	Listen string
	// AdminListen is the address of the admin HTTP listener serving
	// /healthz, /readyz, /metrics and /debug/pprof/ (--admin-listen).
	// Empty or "0" disables it. Default empty.
	AdminListen string
	// LogFormat is "json" or "text" (--log-format). Default "json".
	LogFormat string
	// LogLevel is the lowest level logged (--log-level). Default info.
	LogLevel slog.Level
	// DrainTimeout is how long in-flight requests get to finish after
	// SIGTERM before connections are closed; shutdown hooks then get up to
	// the same time again (--drain-timeout). Default DefaultDrainTimeout.
	DrainTimeout time.Duration
	// CORSAllowedOrigins lists, comma-separated, the web origins allowed to
	// call the Connect API from a browser (--cors-allowed-origins; see
	// [ParseCORSOrigins]). Default empty: CORS off.
	CORSAllowedOrigins string
	// Probe, when set, makes the process GET this URL and exit 0 on a 200
	// answer, 1 otherwise, instead of serving (--probe): the health check
	// of container images that have no shell or curl. Default empty.
	Probe string
	// Security is the process's transport security and authentication
	// (security.go): TLS files, --require-auth, super users, OIDC.
	// Default: none of it, the plain local cluster.
	Security
}

func (b *Base) base() *Base { return b }

func (b *Base) registerFlags(f *Flags) {
	f.StringVar(&b.Listen, "listen", or(b.Listen, DefaultListen),
		"host:port the service's Connect API listens on (HTTP/2 cleartext and HTTP/1.1)")
	f.StringVar(&b.AdminListen, "admin-listen", b.AdminListen,
		"host:port for /healthz, /readyz, /metrics and /debug/pprof/; empty or 0 disables")
	f.StringVar(&b.LogFormat, "log-format", or(b.LogFormat, DefaultLogFormat),
		"log format on stderr: json or text")
	f.TextVar(&b.LogLevel, "log-level", b.LogLevel, "lowest log level: debug, info, warn or error")
	f.DurationVar(&b.DrainTimeout, "drain-timeout", orDur(b.DrainTimeout, DefaultDrainTimeout),
		"time in-flight requests get to finish after SIGTERM; shutdown hooks then get as long again")
	f.StringVar(&b.CORSAllowedOrigins, "cors-allowed-origins", b.CORSAllowedOrigins,
		"comma-separated web origins allowed to call the API from a browser (* for any, one * wildcard per entry as in http://localhost:*); empty disables CORS")
	f.StringVar(&b.Probe, "probe", "",
		"GET this URL (e.g. http://127.0.0.1:9192/readyz), exit 0 on 200 and 1 otherwise, instead of serving: a container health check without a shell")
	b.Security.registerFlags(f)
}

func (b *Base) validate(p *Problems) {
	if err := CheckListenAddr(b.Listen); err != nil {
		p.Flag("listen", b.Listen, err.Error())
	}
	if b.AdminEnabled() {
		if err := CheckListenAddr(b.AdminListen); err != nil {
			p.Flag("admin-listen", b.AdminListen, err.Error())
		} else if b.AdminListen == b.Listen && !strings.HasSuffix(b.Listen, ":0") {
			p.Flag("admin-listen", b.AdminListen, "same address as --listen")
		}
	}
	if b.LogFormat != "json" && b.LogFormat != "text" {
		p.Flag("log-format", b.LogFormat, "must be json or text")
	}
	if b.DrainTimeout <= 0 {
		p.Flag("drain-timeout", b.DrainTimeout, "must be positive")
	}
	if _, err := ParseCORSOrigins(b.CORSAllowedOrigins); err != nil {
		p.Flag("cors-allowed-origins", b.CORSAllowedOrigins, err.Error())
	}
	b.Security.validate(p)
}

// AdminEnabled reports whether the admin listener is configured.
func (b *Base) AdminEnabled() bool { return b.AdminListen != "" && b.AdminListen != "0" }

// ShutdownTimeout bounds one step of a shutdown, as Run bounds draining and
// the shutdown hooks: --drain-timeout, or DefaultDrainTimeout when it is
// unset (a service started as a library, without Run).
func (b *Base) ShutdownTimeout() time.Duration { return orDur(b.DrainTimeout, DefaultDrainTimeout) }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// CheckListenAddr reports what is wrong with a host:port listen address, in
// a few words suitable after the flag name ("missing port"), or nil. The
// host may be empty (all interfaces); the port may be 0 (any free port).
func CheckListenAddr(addr string) error {
	if addr == "" {
		return errors.New("empty; want host:port")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(strings.TrimSuffix(ae.Err, " in address"))
		}
		return err
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("bad host %q", host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

// Problems collects config problems so that Validate reports all of them
// at once instead of stopping at the first. The zero value is empty and
// ready to use. Not safe for concurrent use.
//
//	func (c *Config) Validate() error {
//		var p serve.Problems
//		if c.NodeID <= 0 {
//			p.Flag("node-id", c.NodeID, "must be positive")
//		}
//		return p.Err()
//	}
type Problems struct {
	list []string
}

// Flag records a problem with the flag name's value: `--name "value": reason`.
// String values are quoted; others are printed with %v.
func (p *Problems) Flag(name string, value any, reason string) {
	if s, ok := value.(string); ok {
		p.list = append(p.list, fmt.Sprintf("--%s %q: %s", name, Redact(s), reason))
		return
	}
	p.list = append(p.list, fmt.Sprintf("--%s %v: %s", name, value, reason))
}

// Addf records a problem that is not about one flag's value, such as two
// flags that contradict each other.
func (p *Problems) Addf(format string, args ...any) {
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

// Add records err (nil is ignored). The problems of a *ConfigError are
// added one by one, so Validate methods compose.
func (p *Problems) Add(err error) {
	if err == nil {
		return
	}
	var ce *ConfigError
	if errors.As(err, &ce) {
		p.list = append(p.list, ce.Problems...)
		return
	}
	p.list = append(p.list, oneLine(err.Error()))
}

// Err returns nil when there are no problems, and otherwise a *ConfigError
// listing all of them.
func (p *Problems) Err() error {
	if len(p.list) == 0 {
		return nil
	}
	return &ConfigError{Problems: append([]string(nil), p.list...)}
}

// ConfigError is a failed validation: every problem found, each a short
// phrase such as `--listen "x": missing port`. Its message is one line.
type ConfigError struct {
	Problems []string
}

// Error is "bad config: " and the problems joined by "; ", on one line.
func (e *ConfigError) Error() string {
	return "bad config: " + strings.Join(e.Problems, "; ")
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
