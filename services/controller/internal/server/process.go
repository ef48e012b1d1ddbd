package server

import (
	"context"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/controller/internal/etcdmember"
	"github.com/strata-mq/strata/services/controller/internal/metastore"
)

// Defaults of ProcessConfig.
const (
	DefaultListen      = "127.0.0.1:9093"
	DefaultAdminListen = "127.0.0.1:9193"
)

// ProcessConfig is the strata-controller process's configuration: serve.Base
// plus the member's flags. Setup turns it into the Config that Start takes.
type ProcessConfig struct {
	serve.Base
	id                 string
	dataDir            string
	peers              string
	etcdClient         string
	etcdClientPort     int
	etcdPeerNames      string
	etcdPeerListen     string
	nodeSessionTimeout time.Duration
	sessionTTL         time.Duration
	etcdLogLevel       string
	balance            BalanceConfig

	parsedPeers map[string]string
}

// RegisterFlags declares the controller's own flags.
func (c *ProcessConfig) RegisterFlags(f *serve.Flags) {
	f.StringVar(&c.id, "id", "1", "this controller's id (its etcd member name); must be a key of --peers")
	f.StringVar(&c.dataDir, "data-dir", "", "directory of the embedded etcd member's data (required)")
	f.StringVar(&c.peers, "peers", "1=http://127.0.0.1:2380",
		"every controller's etcd peer URL, ID=URL comma-separated; 1, 3 or 5 members, the same on every controller; with --tls-cert peer traffic is mutual TLS with the controller's certificate (http:// URLs are taken as https://)")
	f.StringVar(&c.etcdPeerListen, "etcd-peer-listen", "",
		"host:port the embedded etcd's peer listener binds; empty: the host:port of this controller's --peers URL (etcd binds IPs only: set 0.0.0.0:PORT when --peers names DNS names)")
	f.StringVar(&c.etcdClient, "etcd-client", "",
		"the embedded etcd's client listener, used by this process only: unix:///ABSOLUTE/PATH (a socket of mode 0600) or, with --tls-cert, https://IP:PORT (mutual TLS accepting controller certificates only); empty: unix://DATA-DIR/etcd.sock")
	f.IntVar(&c.etcdClientPort, "etcd-client-port", 0,
		"deprecated, use --etcd-client: with --tls-cert, the same as --etcd-client https://127.0.0.1:PORT; refused without TLS, since a plain TCP listener would hand etcd to every user of the host")
	f.StringVar(&c.etcdPeerNames, "etcd-peer-names", "",
		"with --tls-cert, the host names (DNS names or IPs) one of which an etcd peer's certificate must be valid for, comma-separated; empty: the hosts of --peers")
	f.DurationVar(&c.nodeSessionTimeout, "node-session-timeout", metastore.DefaultNodeSessionTimeout,
		"storage node lease TTL: a node silent this long is dead (whole seconds)")
	f.DurationVar(&c.sessionTTL, "controller-session-timeout", 5*time.Second,
		"election session TTL: how long a crashed active controller stays active (whole seconds)")
	f.StringVar(&c.etcdLogLevel, "etcd-log-level", "warn", "log level of the embedded etcd: debug, info, warn or error")
	f.BoolVar(&c.balance.AutoLeaderBalance, "auto-leader-balance", true,
		"move leadership back to preferred replicas when a node's share led elsewhere passes --leader-imbalance-threshold")
	f.DurationVar(&c.balance.LeaderBalanceInterval, "leader-balance-interval", 30*time.Second, "how often the leader balance checks")
	f.IntVar(&c.balance.LeaderImbalancePct, "leader-imbalance-threshold", 10,
		"percent of a node's preferred partitions led by others above which leadership moves back")
	f.BoolVar(&c.balance.AutoRebalance, "auto-rebalance", true,
		"move replicas to balance the nodes when a node joins, is drained or undrained")
	f.DurationVar(&c.balance.RebalanceDelay, "rebalance-delay", 10*time.Second,
		"how long the set of live, undrained nodes must stay the same before an automatic rebalance")
	f.Int64Var(&c.balance.RebalanceThrottle, "rebalance-throttle", 0,
		"replication throttle of moves the controller starts on its own, bytes per second per node; 0 for none")
}

// Validate checks every field and reports all problems at once.
func (c *ProcessConfig) Validate() error {
	var p serve.Problems
	if c.dataDir == "" {
		p.Flag("data-dir", c.dataDir, "required")
	}
	peers, err := etcdmember.ParsePeers(c.peers)
	if err != nil {
		p.Flag("peers", c.peers, err.Error())
	} else if _, ok := peers[c.id]; !ok {
		p.Flag("id", c.id, "not among --peers")
	}
	c.parsedPeers = peers
	if c.etcdPeerListen != "" {
		if _, port, err := net.SplitHostPort(c.etcdPeerListen); err != nil || port == "" {
			p.Flag("etcd-peer-listen", c.etcdPeerListen, "must be host:port")
		}
	}
	switch {
	case c.etcdClientPort < 0 || c.etcdClientPort > 65535:
		p.Flag("etcd-client-port", c.etcdClientPort, "must be 0..65535")
	case c.etcdClientPort != 0 && c.etcdClient != "":
		p.Flag("etcd-client-port", c.etcdClientPort, "give --etcd-client or --etcd-client-port, not both")
	case c.dataDir != "":
		c.checkEtcdClient(&p)
	}
	if c.nodeSessionTimeout < time.Second {
		p.Flag("node-session-timeout", c.nodeSessionTimeout, "must be at least 1s")
	}
	if c.sessionTTL < time.Second {
		p.Flag("controller-session-timeout", c.sessionTTL, "must be at least 1s")
	}
	if c.balance.LeaderBalanceInterval <= 0 {
		p.Flag("leader-balance-interval", c.balance.LeaderBalanceInterval, "must be positive")
	}
	if c.balance.LeaderImbalancePct < 0 || c.balance.LeaderImbalancePct > 100 {
		p.Flag("leader-imbalance-threshold", c.balance.LeaderImbalancePct, "must be 0..100")
	}
	if c.balance.RebalanceDelay <= 0 {
		p.Flag("rebalance-delay", c.balance.RebalanceDelay, "must be positive")
	}
	if c.balance.RebalanceThrottle < 0 {
		p.Flag("rebalance-throttle", c.balance.RebalanceThrottle, "must be 0 or more")
	}
	switch c.etcdLogLevel {
	case "debug", "info", "warn", "error":
	default:
		p.Flag("etcd-log-level", c.etcdLogLevel, "must be debug, info, warn or error")
	}
	return p.Err()
}

// peerTLS is the embedded etcd's peer TLS: the controller's own TLS files,
// so that peer traffic is as protected as the API; nil without TLS.
func (c *ProcessConfig) peerTLS() *etcdmember.PeerTLS {
	if !c.TLSEnabled() {
		return nil
	}
	return &etcdmember.PeerTLS{CertFile: c.TLS.Cert, KeyFile: c.TLS.Key, CAFile: c.TLS.CA}
}

// checkEtcdClient reports a client listener the member would refuse,
// under the flag that asked for it.
func (c *ProcessConfig) checkEtcdClient(p *serve.Problems) {
	m := c.member()
	if _, err := m.ResolvedClientURL(); err != nil {
		reason := strings.TrimPrefix(err.Error(), "etcdmember: ")
		if c.etcdClientPort != 0 {
			p.Flag("etcd-client-port", c.etcdClientPort, reason)
		} else {
			p.Flag("etcd-client", c.etcdClient, reason)
		}
	}
}

// member is the embedded etcd member's configuration.
func (c *ProcessConfig) member() etcdmember.Config {
	return etcdmember.Config{
		Name: c.id, Dir: c.dataDir, Peers: c.parsedPeers,
		PeerListen: c.etcdPeerListen, ClientURL: c.etcdClient, ClientPort: c.etcdClientPort,
		PeerNames: peerNames(c.etcdPeerNames), LogLevel: c.etcdLogLevel, PeerTLS: c.peerTLS(),
	}
}

// peerNames splits --etcd-peer-names; nil when empty.
func peerNames(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// Setup returns the serve.SetupFunc of strata-controller: it starts the
// member (Start), hands a drain signal on, registers shutdown and readiness,
// and serves ControllerService.
func Setup(cfg *ProcessConfig) serve.SetupFunc {
	return func(ctx context.Context, p *serve.Process) (http.Handler, error) {
		c, err := Start(ctx, Config{
			Member:             cfg.member(),
			Address:            p.URL(),
			NodeSessionTimeout: cfg.nodeSessionTimeout,
			SessionTTL:         cfg.sessionTTL,
			Balance:            cfg.balance,
			HTTPClient:         p.HTTPClient(),
			ClientOptions:      []connect.ClientOption{p.ConnectOption()},
			Guard:              p.Guard(),
			Logger:             p.Logger(),
		})
		if err != nil {
			return nil, err
		}
		p.OnShutdown("controller", func(context.Context) error { return c.Close() })
		go func() {
			select {
			case <-p.Draining():
				c.Drain()
			case <-ctx.Done():
			}
		}()
		p.AddReadinessCheck("controller", c.Ready)
		mux := http.NewServeMux()
		mux.Handle(c.Handler(p.HandlerOption()))
		return mux, nil
	}
}
