package server

import (
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/kafka"
)

// Defaults of Config.
const (
	DefaultListen              = "127.0.0.1:9092"
	DefaultAdminListen         = "127.0.0.1:9192"
	DefaultControllers         = "http://127.0.0.1:9093"
	DefaultProducerIDBlockSize = 1000
)

// Config is the gateway's configuration: serve.Base plus the upstreams.
type Config struct {
	serve.Base
	// Controllers is the comma-separated list of controller Connect base
	// URLs (--controller). The metadata watch and admin calls try them in
	// turn. Default DefaultControllers.
	Controllers string
	// Coordinators is the comma-separated list of coordinator Connect base
	// URLs (--coordinator). Empty means none: group calls fail with
	// UNAVAILABLE. Default empty.
	Coordinators string
	// ProducerIDBlockSize is how many producer ids one AllocateProducerIds
	// call asks the controller for (--producer-id-block-size), 1 to 10000.
	// Default DefaultProducerIDBlockSize.
	ProducerIDBlockSize int
	// ClientListener names the advertised listener (a storage node's or
	// coordinator's --advertise-listeners) whose address this gateway's
	// clients are given (--client-listener), as Kafka maps a listener to
	// the addresses it advertises. Empty, the default, gives every
	// endpoint's default address. Run one set of gateways per network:
	// internal ones without it, external ones with, e.g., "external".
	ClientListener string
	// Kafka is the gateway's Kafka protocol listener (--kafka-listener,
	// --kafka-advertise): the bootstrap address of Kafka clients, answered
	// from this gateway in-process. Default none.
	Kafka kafka.ListenerConfig

	controllerURLs  []string
	coordinatorURLs []string
}

// RegisterFlags declares the gateway's own flags.
func (c *Config) RegisterFlags(f *serve.Flags) {
	f.StringVar(&c.Controllers, "controller", or(c.Controllers, DefaultControllers),
		"controller Connect base URLs, comma-separated; any member serves (it forwards to the active one)")
	f.StringVar(&c.Coordinators, "coordinator", c.Coordinators,
		"coordinator Connect base URLs, comma-separated; empty means group calls answer UNAVAILABLE")
	f.StringVar(&c.ClientListener, "client-listener", c.ClientListener,
		"advertised listener whose addresses clients of this gateway get (e.g. external); empty: the default addresses")
	f.IntVar(&c.ProducerIDBlockSize, "producer-id-block-size", orInt(c.ProducerIDBlockSize, DefaultProducerIDBlockSize),
		"producer ids asked from the controller per block for InitProducerId (1..10000)")
	c.Kafka.RegisterFlags(f, false)
}

// Validate checks every field and reports all problems at once.
func (c *Config) Validate() error {
	var p serve.Problems
	var err error
	if c.controllerURLs, err = serve.ParseURLs(c.Controllers); err != nil {
		p.Flag("controller", c.Controllers, err.Error())
	} else if len(c.controllerURLs) == 0 {
		p.Flag("controller", c.Controllers, "at least one URL is required")
	}
	if c.coordinatorURLs, err = serve.ParseURLs(c.Coordinators); err != nil {
		p.Flag("coordinator", c.Coordinators, err.Error())
	}
	if c.ClientListener != "" {
		if err := serve.CheckListenerName(c.ClientListener); err != nil {
			p.Flag("client-listener", c.ClientListener, err.Error())
		}
	}
	if c.ProducerIDBlockSize < 1 || c.ProducerIDBlockSize > 10000 {
		p.Flag("producer-id-block-size", c.ProducerIDBlockSize, "must be 1..10000")
	}
	c.Kafka.Validate(&p, &c.Security, false)
	return p.Err()
}

// ControllerURLs returns the parsed --controller list; valid after Validate.
func (c *Config) ControllerURLs() []string { return c.controllerURLs }

// CoordinatorURLs returns the parsed --coordinator list; valid after
// Validate.
func (c *Config) CoordinatorURLs() []string { return c.coordinatorURLs }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
