// Package etcdmember runs the etcd member embedded in every controller
// process and the client the controller uses to reach it.
//
// Only the controller opens etcd, and etcd holds the cluster's secrets
// (token hashes, SCRAM keys, ACLs), so both of the member's doors are
// locked to controllers: the client listener is a Unix socket of mode 0600
// (or, when asked, mutual TLS accepting controller certificates only), and
// with TLS the peer listener accepts only certificates valid for a
// controller's peer host. The controller talks exclusively to its own
// member; etcd forwards writes to the raft leader and serves linearizable
// reads through the quorum.
package etcdmember

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config describes one member of the controller quorum.
type Config struct {
	// Name is the member name: the controller id. Required; must appear in Peers.
	Name string
	// Dir is the member's data directory. Required.
	Dir string
	// Peers maps every controller id to its etcd peer URL
	// ("http://127.0.0.1:2380"). All members are started with the same map
	// (static bootstrap). Required.
	Peers map[string]string
	// PeerListen is the host:port the member's peer listener binds.
	// Default: the host and port of its own URL in Peers. etcd binds IP
	// addresses only, so a quorum whose Peers name DNS names (containers,
	// Kubernetes pods) sets it, for example to 0.0.0.0:2380.
	PeerListen string
	// ClientURL is the member's client listener: "unix:///abs/path" (a
	// Unix socket, made mode 0600: only this process's user may connect)
	// or "https://IP:PORT" (mutual TLS with PeerTLS's files, accepting
	// only certificates valid for one of PeerNames; needs PeerTLS).
	// Default: the socket unix://<Dir>/etcd.sock.
	ClientURL string
	// ClientPort, when ClientURL is empty and ClientPort > 0, is the
	// loopback port of an https client listener (ClientURL
	// https://127.0.0.1:ClientPort); kept for --etcd-client-port. A plain
	// TCP client listener is never opened: it would hand etcd to every
	// user of the host. Default 0: the Unix socket.
	ClientPort int
	// PeerNames are the host names (DNS names or IP addresses) one of
	// which a peer's TLS certificate must be valid for, on the peer
	// listener and on the https client listener. Default: the hosts of
	// Peers' URLs, which every controller's certificate must carry anyway
	// since peers verify each other's server certificate against them.
	// Without PeerTLS it has no effect.
	PeerNames []string
	// LogLevel is etcd's zap level: "warn" by default so that the
	// controller's own log stays readable.
	LogLevel string
	// ClusterToken separates independent quorums sharing hosts. Default
	// "strata-controller".
	ClusterToken string
	// PeerTLS, when set, makes the peer listener and the calls to the
	// other members speak mutual TLS with these files (the controller's
	// own --tls-cert, --tls-key and --tls-client-ca): peers must present a
	// certificate from the CA that is valid for one of PeerNames, so a
	// user's or another service's certificate from the same CA is refused.
	// Every peer URL is then https (an http:// one in Peers is taken as
	// https://, so one --peers value serves both modes). Default nil:
	// plain http, which any process able to reach the peer port may speak
	// (docs/security.md).
	PeerTLS *PeerTLS
}

// PeerTLS names the PEM files of the member's peer TLS.
type PeerTLS struct {
	CertFile, KeyFile, CAFile string
}

// withScheme returns peer URL u with the scheme the member's peer
// traffic uses.
func (c *Config) withScheme(u string) string {
	if c.PeerTLS != nil {
		if rest, ok := strings.CutPrefix(u, "http://"); ok {
			return "https://" + rest
		}
	}
	return u
}

// socketPathMax is the longest Unix socket path Linux binds: sun_path's
// 108 bytes less the terminating NUL.
const socketPathMax = 107

// SocketName is the file name of the default client socket in the data
// directory.
const SocketName = "etcd.sock"

// ResolvedClientURL is the member's client listener URL with the default
// filled in, or why c's is refused.
func (c *Config) ResolvedClientURL() (string, error) {
	u, err := c.clientURL()
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// clientURL is the member's client listener URL, the default resolved and
// every rule checked: an absolute socket path that fits sun_path, or an
// https IP:PORT with TLS.
func (c *Config) clientURL() (*url.URL, error) {
	raw := c.ClientURL
	if raw == "" && c.ClientPort > 0 {
		raw = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.ClientPort))
	}
	if raw == "" {
		dir, err := filepath.Abs(c.Dir)
		if err != nil {
			return nil, fmt.Errorf("etcdmember: data dir: %w", err)
		}
		raw = "unix://" + filepath.Join(dir, SocketName)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: client URL %q: want unix:///absolute/path or https://IP:PORT", raw)
	}
	switch u.Scheme {
	case "unix":
		if u.Host != "" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("etcdmember: client URL %q: want unix:///absolute/path", raw)
		}
		if len(u.Path) > socketPathMax {
			return nil, fmt.Errorf("etcdmember: client socket %s is %d bytes long, more than the %d a Unix socket path may have: give a shorter one (--etcd-client unix:///PATH) or a shorter --data-dir", u.Path, len(u.Path), socketPathMax)
		}
	case "https":
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil || net.ParseIP(host) == nil || port == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("etcdmember: client URL %q: want https://IP:PORT", raw)
		}
		if c.PeerTLS == nil {
			return nil, fmt.Errorf("etcdmember: client URL %q is https but the member has no TLS (--tls-cert); without TLS the client listener is a Unix socket", raw)
		}
		if c.PeerTLS.CAFile == "" {
			return nil, fmt.Errorf("etcdmember: client URL %q is https but the member has no client CA (--tls-client-ca) to check its clients against", raw)
		}
	default:
		return nil, fmt.Errorf("etcdmember: client URL %q: want unix:///absolute/path or https://IP:PORT", raw)
	}
	return u, nil
}

// peerNames are the names a peer's (or an https client's) certificate
// must be valid for: PeerNames, or the hosts of every peer URL.
func (c *Config) peerNames() []string {
	if len(c.PeerNames) > 0 {
		return c.PeerNames
	}
	var names []string
	for _, u := range c.Peers {
		if pu, err := url.Parse(u); err == nil && pu.Hostname() != "" && !slices.Contains(names, pu.Hostname()) {
			names = append(names, pu.Hostname())
		}
	}
	sort.Strings(names)
	return names
}

// ParsePeers reads "1=http://127.0.0.1:2380,2=http://127.0.0.1:2381".
func ParsePeers(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, u, ok := strings.Cut(part, "=")
		if !ok || id == "" || u == "" {
			return nil, fmt.Errorf("peer %q: want ID=URL", part)
		}
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Port() == "" {
			return nil, fmt.Errorf("peer %q: want an http:// or https://host:port URL", part)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("peer id %q given twice", id)
		}
		out[id] = u
	}
	if len(out) == 0 {
		return nil, errors.New("no peers")
	}
	if n := len(out); n != 1 && n != 3 && n != 5 {
		return nil, fmt.Errorf("%d peers; want 1, 3 or 5", n)
	}
	return out, nil
}

// Validate reports every problem with c.
func (c *Config) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("etcdmember: empty name"))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("etcdmember: empty data dir"))
	}
	if _, ok := c.Peers[c.Name]; !ok {
		errs = append(errs, fmt.Errorf("etcdmember: id %q is not among the peers", c.Name))
	}
	if c.ClientPort < 0 || c.ClientPort > 65535 {
		errs = append(errs, fmt.Errorf("etcdmember: bad client port %d", c.ClientPort))
	} else if _, err := c.clientURL(); err != nil {
		errs = append(errs, err)
	}
	if c.PeerTLS == nil {
		for id, u := range c.Peers {
			if strings.HasPrefix(u, "https://") {
				errs = append(errs, fmt.Errorf("etcdmember: peer %s is https but the member has no TLS (--tls-cert)", id))
			}
		}
	}
	return errors.Join(errs...)
}

// Member is a started etcd member with a client connected to it.
// Close is safe to call more than once.
type Member struct {
	etcd   *embed.Etcd
	client *clientv3.Client
	// Endpoint is the member's client URL: unix:///path of its socket,
	// or https://IP:PORT.
	Endpoint string

	// logLevel is etcd's zap level; Close raises it so the errors etcd logs
	// about its own listeners closing do not read like a failure.
	logLevel zap.AtomicLevel

	closeOnce sync.Once
}

// Start validates cfg, starts the member and returns once its client
// listener accepts connections; cluster readiness (a raft leader, the
// member published) is signalled by ReadyNotify. A failed start closes
// whatever it opened.
func Start(cfg Config) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.LogLevel = orStr(cfg.LogLevel, "warn")
	ec.LogOutputs = []string{"stderr"}
	logLevel, err := zap.ParseAtomicLevel(ec.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: log level %q: %w", ec.LogLevel, err)
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newLogger(logLevel))
	ec.InitialClusterToken = orStr(cfg.ClusterToken, "strata-controller")
	ec.ClusterState = embed.ClusterStateFlagNew
	// A topic create writes one key per partition in one transaction.
	ec.MaxTxnOps = 20000
	ec.MaxRequestBytes = 8 << 20
	// Keep an hour of history so WatchMetadata can resume from a version.
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1h"
	ec.ListenMetricsUrls = nil

	clientURL, err := cfg.clientURL()
	if err != nil {
		return nil, err
	}
	var clientTLS *tls.Config
	if t := cfg.PeerTLS; t != nil {
		// With a CA, peers must present a certificate from it, valid for a
		// controller's peer host: a user's certificate from the same CA
		// is refused at the handshake. Without one, peers are not
		// authenticated at all (and etcd's name check would refuse every
		// peer, having no verified chain to look at).
		ec.PeerTLSInfo = transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.CAFile, ClientCertAuth: t.CAFile != ""}
		if t.CAFile != "" {
			ec.PeerTLSInfo.AllowedHostnames = cfg.peerNames()
		}
		if clientURL.Scheme == "https" {
			ec.ClientTLSInfo = ec.PeerTLSInfo
			ec.ClientTLSInfo.ClientCertAuth = true
			// The member's own client presents the controller's
			// certificate and checks the listener's against the name its
			// peers know it by.
			self, _ := url.Parse(cfg.Peers[cfg.Name])
			ci := transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.CAFile, ServerName: self.Hostname()}
			if clientTLS, err = ci.ClientConfig(); err != nil {
				return nil, fmt.Errorf("etcdmember: client TLS: %w", err)
			}
		}
	}
	peerURL, err := url.Parse(cfg.withScheme(cfg.Peers[cfg.Name]))
	if err != nil {
		return nil, fmt.Errorf("etcdmember: peer url: %w", err)
	}
	listenURL := *peerURL
	if cfg.PeerListen != "" {
		listenURL.Host = cfg.PeerListen
	}
	ec.ListenPeerUrls = []url.URL{listenURL}
	ec.AdvertisePeerUrls = []url.URL{*peerURL}
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{*clientURL}
	if clientURL.Scheme == "unix" {
		// A new data directory is made owner-only before the socket is
		// bound in it, so no other user can reach the socket even before
		// its chmod below.
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("etcdmember: %w", err)
		}
	}
	ids := make([]string, 0, len(cfg.Peers))
	for id := range cfg.Peers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var ic []string
	for _, id := range ids {
		ic = append(ic, id+"="+cfg.withScheme(cfg.Peers[id]))
	}
	ec.InitialCluster = strings.Join(ic, ",")

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: start: %w", err)
	}
	if len(e.Clients) == 0 {
		e.Close()
		return nil, errors.New("etcdmember: no client listener")
	}
	var endpoint string
	if clientURL.Scheme == "unix" {
		// Whoever can connect to the socket can read every secret in
		// etcd: this process's user only.
		if err := os.Chmod(clientURL.Path, 0o600); err != nil {
			e.Close()
			return nil, fmt.Errorf("etcdmember: client socket: %w", err)
		}
		endpoint = "unix://" + clientURL.Path
	} else {
		endpoint = "https://" + e.Clients[0].Addr().String()
	}
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		TLS:         clientTLS,
		Logger:      quietLogger(),
	})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("etcdmember: client: %w", err)
	}
	return &Member{etcd: e, client: cl, Endpoint: endpoint, logLevel: logLevel}, nil
}

func quietLogger() *zap.Logger { return newLogger(zap.NewAtomicLevelAt(zapcore.ErrorLevel)) }

// newLogger is a JSON zap logger on stderr at level.
func newLogger(level zap.AtomicLevel) *zap.Logger {
	zc := zap.NewProductionConfig()
	zc.Level = level
	zc.OutputPaths = []string{"stderr"}
	zc.ErrorOutputPaths = []string{"stderr"}
	lg, err := zc.Build()
	if err != nil {
		return zap.NewNop()
	}
	return lg
}

func orStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ReadyNotify is closed when the member has joined the quorum and serves
// requests.
func (m *Member) ReadyNotify() <-chan struct{} { return m.etcd.Server.ReadyNotify() }

// Ready reports whether ReadyNotify is closed.
func (m *Member) Ready() bool {
	select {
	case <-m.ReadyNotify():
		return true
	default:
		return false
	}
}

// WaitReady waits for ReadyNotify, the member's failure, or ctx.
func (m *Member) WaitReady(ctx context.Context) error {
	select {
	case <-m.ReadyNotify():
		return nil
	case err := <-m.etcd.Err():
		return fmt.Errorf("etcdmember: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("etcdmember: not ready: %w", ctx.Err())
	}
}

// Err delivers a fatal error of the running member.
func (m *Member) Err() <-chan error { return m.etcd.Err() }

// Client is the client connected to this member only.
func (m *Member) Client() *clientv3.Client { return m.client }

// Close closes the client and stops the member. Safe to call twice.
func (m *Member) Close() {
	m.closeOnce.Do(func() {
		m.logLevel.SetLevel(zapcore.FatalLevel)
		m.client.Close()
		m.etcd.Close()
	})
}
