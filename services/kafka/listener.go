package kafka

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/kafkawire/sasl"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

// ListenerConfig is a service's Kafka protocol listener: the
// --kafka-listener and --kafka-advertise flags (and --gateway on services
// that have no gateway of their own).
type ListenerConfig struct {
	// Listen is the host:port the Kafka listener binds (--kafka-listener).
	// Empty, the default, opens none.
	Listen string
	// Advertise is the host:port Kafka clients are given for this
	// listener (--kafka-advertise). Default: the bound address.
	Advertise string
	// Gateway is the gateway base URL the bridge asks for metadata and
	// admin calls (--gateway, on storage nodes and coordinators). Required
	// with Listen there; unused on the gateway itself.
	Gateway string
	// Limits bound what a connection may cost (docs/operations.md, "Kafka
	// listener limits"); zero fields take Kafka's defaults.
	Limits ConnLimits
	// AutoCreateTopics is --kafka-auto-create-topics-enable (Kafka's
	// auto.create.topics.enable): a Metadata request that names a topic
	// that does not exist, and allows it, creates it with the cluster's
	// defaults. Default false, where Kafka's is true.
	AutoCreateTopics bool
}

// ConnLimits are the Kafka listener's bounds on connections, each named
// after the Kafka broker setting it matches. Zero fields take the default
// stated on each.
type ConnLimits struct {
	// MaxRequestBytes is --kafka-socket-request-max-bytes (Kafka's
	// socket.request.max.bytes): the largest request frame. Default
	// 104857600.
	MaxRequestBytes int
	// MaxPreAuthBytes is --kafka-sasl-max-receive-size (Kafka's
	// sasl.server.max.receive.size): the largest frame before
	// authentication with --require-auth. Default 524288.
	MaxPreAuthBytes int
	// IdleTimeout is --kafka-connections-max-idle (Kafka's
	// connections.max.idle.ms). Default 10m.
	IdleTimeout time.Duration
	// LoginTimeout is --kafka-login-timeout: how long a connection has to
	// authenticate with --require-auth. Default 30s.
	LoginTimeout time.Duration
	// MaxConnsPerIP is --kafka-max-connections-per-ip (Kafka's
	// max.connections.per.ip). Default 0: no limit, as in Kafka.
	MaxConnsPerIP int
	// MaxConns is --kafka-max-connections (Kafka's max.connections).
	// Default 0: no limit, as in Kafka.
	MaxConns int
	// MaxConnCreationRate is --kafka-max-connection-creation-rate (Kafka's
	// max.connection.creation.rate, KIP-612), connections a second.
	// Default 0: no limit, as in Kafka.
	MaxConnCreationRate float64
	// MaxConnsPerIPOverrides is --kafka-max-connections-per-ip-overrides
	// (Kafka's max.connections.per.ip.overrides), "IP:N,IP:N": N replaces
	// MaxConnsPerIP for that address; 0 lets nothing in from it.
	MaxConnsPerIPOverrides string
	// ConnCreationRatePerIP is --kafka-connection-creation-rate-per-ip
	// (KIP-612's per-IP connection_creation_rate quota), connections a
	// second from one address. Default 0: no limit, as in Kafka.
	ConnCreationRatePerIP float64
	// ConnCreationRatePerIPOverrides is
	// --kafka-connection-creation-rate-per-ip-overrides, "IP:R,IP:R": R
	// replaces ConnCreationRatePerIP for that address; 0 is no limit.
	ConnCreationRatePerIPOverrides string
}

// ipOverrides parses "IP:V,IP:V" (IPv6 in brackets or bare: the value is
// after the last colon), each value by parse. Host names are refused:
// connections are counted by the address they come from.
func ipOverrides[V any](s string, parse func(string) (V, error)) (map[string]V, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]V{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		i := strings.LastIndex(item, ":")
		if i <= 0 {
			return nil, fmt.Errorf("%q: want IP:value", item)
		}
		ip := net.ParseIP(strings.Trim(item[:i], "[]"))
		if ip == nil {
			return nil, fmt.Errorf("%q: %q is not an IP address (host names are not resolved)", item, item[:i])
		}
		v, err := parse(item[i+1:])
		if err != nil {
			return nil, fmt.Errorf("%q: %v", item, err)
		}
		out[ip.String()] = v
	}
	return out, nil
}

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a count (0 or more)", s)
	}
	return n, nil
}

func parseRate(s string) (float64, error) {
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r) {
		return 0, fmt.Errorf("%q is not a rate (0 or more a second)", s)
	}
	return r, nil
}

// RegisterFlags declares the flags; withGateway adds --gateway.
func (c *ListenerConfig) RegisterFlags(f *serve.Flags, withGateway bool) {
	f.StringVar(&c.Listen, "kafka-listener", c.Listen,
		"host:port of a Kafka protocol listener (Kafka clients, kcat, connectors); empty: none. See docs/kafka.md")
	f.StringVar(&c.Advertise, "kafka-advertise", c.Advertise,
		"host:port Kafka clients are told to reach this listener at; default the --kafka-listener address")
	l := &c.Limits
	f.IntVar(&l.MaxRequestBytes, "kafka-socket-request-max-bytes", cmp.Or(l.MaxRequestBytes, kafkawire.DefaultMaxRequestBytes),
		"largest Kafka request frame accepted, in bytes (Kafka's socket.request.max.bytes); a larger one closes the connection")
	f.IntVar(&l.MaxPreAuthBytes, "kafka-sasl-max-receive-size", cmp.Or(l.MaxPreAuthBytes, kafkawire.DefaultMaxPreAuthBytes),
		"largest Kafka request frame accepted before authentication with --require-auth, in bytes (Kafka's sasl.server.max.receive.size)")
	f.DurationVar(&l.IdleTimeout, "kafka-connections-max-idle", cmp.Or(l.IdleTimeout, kafkawire.DefaultIdleTimeout),
		"close a Kafka connection silent this long (Kafka's connections.max.idle.ms)")
	f.DurationVar(&l.LoginTimeout, "kafka-login-timeout", cmp.Or(l.LoginTimeout, kafkawire.DefaultLoginTimeout),
		"with --require-auth, close a Kafka connection not authenticated this long after it opened")
	f.IntVar(&l.MaxConnsPerIP, "kafka-max-connections-per-ip", l.MaxConnsPerIP,
		"most open Kafka connections from one client IP address (Kafka's max.connections.per.ip); 0: no limit")
	f.IntVar(&l.MaxConns, "kafka-max-connections", l.MaxConns,
		"most open Kafka connections on this listener (Kafka's max.connections); 0: no limit")
	f.Float64Var(&l.MaxConnCreationRate, "kafka-max-connection-creation-rate", l.MaxConnCreationRate,
		"most new Kafka connections accepted a second on this listener (Kafka's max.connection.creation.rate); over it accepting pauses; 0: no limit")
	f.StringVar(&l.MaxConnsPerIPOverrides, "kafka-max-connections-per-ip-overrides", l.MaxConnsPerIPOverrides,
		"per-address replacements of --kafka-max-connections-per-ip, IP:N comma-separated (Kafka's max.connections.per.ip.overrides); 0 lets nothing in from that address")
	f.Float64Var(&l.ConnCreationRatePerIP, "kafka-connection-creation-rate-per-ip", l.ConnCreationRatePerIP,
		"most new Kafka connections a second from one client IP address (KIP-612's per-IP connection_creation_rate); over it a connection is closed at once; 0: no limit")
	f.StringVar(&l.ConnCreationRatePerIPOverrides, "kafka-connection-creation-rate-per-ip-overrides", l.ConnCreationRatePerIPOverrides,
		"per-address replacements of --kafka-connection-creation-rate-per-ip, IP:RATE comma-separated; 0: no limit for that address")
	f.BoolVar(&c.AutoCreateTopics, "kafka-auto-create-topics-enable", c.AutoCreateTopics,
		"create a topic a Kafka client's Metadata request names and allows to be created, with the cluster's default partitions and replication (Kafka's auto.create.topics.enable; off by default here)")
	if withGateway {
		f.StringVar(&c.Gateway, "gateway", c.Gateway,
			"gateway base URL the Kafka listener asks for metadata, producer ids and admin calls; required with --kafka-listener")
	}
}

// Validate adds the listener's problems to p. The listener takes the
// process's security as it is (TLS from --tls-cert, SASL and ACLs with
// --require-auth), so sec needs no check of its own here.
func (c *ListenerConfig) Validate(p *serve.Problems, sec *serve.Security, withGateway bool) {
	if c.Listen == "" {
		return
	}
	if err := serve.CheckListenAddr(c.Listen); err != nil {
		p.Flag("kafka-listener", c.Listen, err.Error())
	}
	if c.Advertise != "" {
		if err := serve.CheckKafkaURL(serve.KafkaScheme + c.Advertise); err != nil {
			p.Flag("kafka-advertise", c.Advertise, "want host:port")
		}
	}
	l := c.Limits
	if l.MaxRequestBytes < 0 || l.MaxRequestBytes > math.MaxInt32 {
		p.Flag("kafka-socket-request-max-bytes", l.MaxRequestBytes, "want 0 (the default) to 2147483647")
	}
	if l.MaxPreAuthBytes < 0 || l.MaxPreAuthBytes > math.MaxInt32 {
		p.Flag("kafka-sasl-max-receive-size", l.MaxPreAuthBytes, "want 0 (the default) to 2147483647")
	}
	if l.IdleTimeout < 0 {
		p.Flag("kafka-connections-max-idle", l.IdleTimeout, "want a positive duration")
	}
	if l.LoginTimeout < 0 {
		p.Flag("kafka-login-timeout", l.LoginTimeout, "want a positive duration")
	}
	if l.MaxConnsPerIP < 0 {
		p.Flag("kafka-max-connections-per-ip", l.MaxConnsPerIP, "want 0 (no limit) or more")
	}
	if l.MaxConns < 0 {
		p.Flag("kafka-max-connections", l.MaxConns, "want 0 (no limit) or more")
	}
	if l.MaxConnCreationRate < 0 {
		p.Flag("kafka-max-connection-creation-rate", l.MaxConnCreationRate, "want 0 (no limit) or more")
	}
	if _, err := ipOverrides(l.MaxConnsPerIPOverrides, parseCount); err != nil {
		p.Flag("kafka-max-connections-per-ip-overrides", l.MaxConnsPerIPOverrides, err.Error())
	}
	if l.ConnCreationRatePerIP < 0 {
		p.Flag("kafka-connection-creation-rate-per-ip", l.ConnCreationRatePerIP, "want 0 (no limit) or more")
	}
	if _, err := ipOverrides(l.ConnCreationRatePerIPOverrides, parseRate); err != nil {
		p.Flag("kafka-connection-creation-rate-per-ip-overrides", l.ConnCreationRatePerIPOverrides, err.Error())
	}
	if withGateway {
		if urls, err := serve.ParseURLs(c.Gateway); err != nil {
			p.Flag("gateway", c.Gateway, err.Error())
		} else if len(urls) != 1 {
			p.Flag("gateway", c.Gateway, "one gateway URL is required with --kafka-listener")
		}
	}
}

// GatewayURL returns the parsed --gateway URL; valid after Validate.
func (c *ListenerConfig) GatewayURL() string {
	urls, _ := serve.ParseURLs(c.Gateway)
	if len(urls) == 0 {
		return ""
	}
	return urls[0]
}

// Listener is an open Kafka listener.
type Listener struct {
	ln         net.Listener
	advertise  string
	limits     ConnLimits
	autoCreate bool
}

// Listen binds the listener, so that its advertised address is known
// before the service registers it. Nil when c has no listener.
func Listen(c ListenerConfig) (*Listener, error) {
	if c.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("kafka listener: %w", err)
	}
	adv := c.Advertise
	if adv == "" {
		adv = ln.Addr().String()
		if host, _, err := net.SplitHostPort(c.Listen); err == nil && host != "" {
			_, port, _ := net.SplitHostPort(adv)
			adv = net.JoinHostPort(host, port)
		}
	}
	return &Listener{ln: ln, advertise: adv, limits: c.Limits, autoCreate: c.AutoCreateTopics}, nil
}

// Advertise returns the host:port clients are given.
func (l *Listener) Advertise() string { return l.advertise }

// Addr returns the bound address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Serve serves the bridge on the listener until p shuts down; it logs the
// address once.
func (l *Listener) Serve(p *serve.Process, cfg Config) error {
	if cfg.Logger == nil {
		cfg.Logger = p.Logger()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = p.HTTPClient()
		cfg.ClientOptions = append(cfg.ClientOptions, p.ConnectOption())
	}
	if cfg.Guard == nil {
		cfg.Guard = p.Guard()
	}
	cfg.AutoCreateTopics = cfg.AutoCreateTopics || l.autoCreate
	b, err := New(cfg)
	if err != nil {
		l.ln.Close()
		return err
	}
	lim := l.limits
	// Checked by Validate.
	connOverrides, _ := ipOverrides(lim.MaxConnsPerIPOverrides, parseCount)
	rateOverrides, _ := ipOverrides(lim.ConnCreationRatePerIPOverrides, parseRate)
	srv, err := kafkawire.NewServer(kafkawire.Config{
		APIs: b.APIs(), Logger: cfg.Logger, Auth: sasl.Auth(cfg.Guard),
		MaxRequestBytes: int32(lim.MaxRequestBytes), MaxPreAuthBytes: int32(lim.MaxPreAuthBytes),
		IdleTimeout: lim.IdleTimeout, LoginTimeout: lim.LoginTimeout,
		MaxConnsPerIP: lim.MaxConnsPerIP, MaxConns: lim.MaxConns, MaxConnCreationRate: lim.MaxConnCreationRate,
		MaxConnsPerIPOverrides: connOverrides, ConnCreationRatePerIP: lim.ConnCreationRatePerIP,
		ConnCreationRatePerIPOverrides: rateOverrides,
		// Every request is charged to its principal's request quota, as
		// on the process's Connect API (docs/kafka.md, "Quotas").
		BeginRequest: cfg.Guard.BeginRequest,
	})
	if err != nil {
		l.ln.Close()
		return err
	}
	// TLS from the process's certificate source, as on its Connect
	// listener: reloads apply to new connections, and a client
	// certificate, when given, is verified against --tls-client-ca.
	ln := l.ln
	if src := p.TLS(); src != nil {
		tc, err := src.ServerConfig(tlsconfig.VerifyClientCertIfGiven)
		if err != nil {
			l.ln.Close()
			return err
		}
		ln = tls.NewListener(l.ln, tc)
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			cfg.Logger.Error("kafka listener stopped", "err", err)
		}
	}()
	p.OnShutdown("kafka listener", func(context.Context) error { return srv.Close() })
	cfg.Logger.Info("kafka listener", "listen", l.ln.Addr().String(), "advertise", l.advertise)
	return nil
}
