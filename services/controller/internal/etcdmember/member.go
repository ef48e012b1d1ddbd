// Package etcdmember runs the etcd member embedded in every controller
// process and the client the controller uses to reach it.
//
// Only the controller opens etcd: the member's client and peer ports are
// meant for loopback (client) and the controller quorum (peer) only. The
// controller talks exclusively to its own member; etcd forwards writes to
// the raft leader and serves linearizable reads through the quorum.
package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
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
	// ClientPort is the loopback port of the member's client listener;
	// 0 picks a free port at start. Default 0.
	ClientPort int
	// LogLevel is etcd's zap level: "warn" by default so that the
	// controller's own log stays readable.
	LogLevel string
	// ClusterToken separates independent quorums sharing hosts. Default
	// "strata-controller".
	ClusterToken string
	// PeerTLS, when set, makes the peer listener and the calls to the
	// other members speak mutual TLS with these files (the controller's
	// own --tls-cert, --tls-key and --tls-client-ca): peers must present a
	// certificate from the CA. Every peer URL is then https (an http://
	// one in Peers is taken as https://, so one --peers value serves both
	// modes). The client listener stays plain: it binds loopback only and
	// only this process uses it. Default nil: plain http.
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
	// Endpoint is the member's loopback client URL.
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

	if t := cfg.PeerTLS; t != nil {
		// With a CA, peers must present a certificate from it.
		ec.PeerTLSInfo = transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.CAFile, ClientCertAuth: t.CAFile != ""}
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
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.ClientPort))}
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
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
	endpoint := "http://" + e.Clients[0].Addr().String()
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
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
