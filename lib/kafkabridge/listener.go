package kafkabridge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/strata-mq/strata/lib/kafkawire"
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
}

// RegisterFlags declares the flags; withGateway adds --gateway.
func (c *ListenerConfig) RegisterFlags(f *serve.Flags, withGateway bool) {
	f.StringVar(&c.Listen, "kafka-listener", c.Listen,
		"host:port of a Kafka protocol listener (Kafka clients, kcat, connectors); empty: none. See docs/kafka.md")
	f.StringVar(&c.Advertise, "kafka-advertise", c.Advertise,
		"host:port Kafka clients are told to reach this listener at; default the --kafka-listener address")
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
	ln        net.Listener
	advertise string
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
	return &Listener{ln: ln, advertise: adv}, nil
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
	b, err := New(cfg)
	if err != nil {
		l.ln.Close()
		return err
	}
	srv, err := kafkawire.NewServer(kafkawire.Config{APIs: b.APIs(), Logger: cfg.Logger, Auth: Auth(cfg.Guard)})
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
