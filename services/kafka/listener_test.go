package kafka

import (
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/serve"
)

// TestListenerLimitFlags checks the limits' flags: Kafka's defaults when
// unset, the STRATA_ variables, and a clear line for a bad value.
func TestListenerLimitFlags(t *testing.T) {
	parse := func(args []string, env map[string]string) (ListenerConfig, error) {
		var c ListenerConfig
		f := serve.NewFlags("strata-test")
		c.RegisterFlags(f, false)
		err := f.Parse(args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		return c, err
	}
	c, err := parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := ConnLimits{
		MaxRequestBytes: kafkawire.DefaultMaxRequestBytes, MaxPreAuthBytes: 512 << 10,
		IdleTimeout: 10 * time.Minute, LoginTimeout: 30 * time.Second,
	}
	if c.Limits != want {
		t.Fatalf("defaults %+v, want %+v", c.Limits, want)
	}
	c, err = parse([]string{"--kafka-max-connections-per-ip", "20", "--kafka-connections-max-idle", "1m", "--kafka-max-connection-creation-rate", "2.5"},
		map[string]string{"STRATA_KAFKA_SASL_MAX_RECEIVE_SIZE": "1024", "STRATA_KAFKA_MAX_CONNECTIONS": "500"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.MaxConnsPerIP != 20 || c.Limits.IdleTimeout != time.Minute || c.Limits.MaxPreAuthBytes != 1024 || c.Limits.MaxConns != 500 || c.Limits.MaxConnCreationRate != 2.5 {
		t.Fatalf("set: %+v", c.Limits)
	}
	c, err = parse([]string{"--kafka-listener", "127.0.0.1:0", "--kafka-max-connections-per-ip", "-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p serve.Problems
	c.Validate(&p, nil, false)
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "--kafka-max-connections-per-ip") {
		t.Fatalf("validate: %v", err)
	}

	// Per-address overrides: parsed into the listener's maps, and a
	// host name or a bad value refused in one line naming the flag.
	c, err = parse([]string{"--kafka-listener", "127.0.0.1:0", "--kafka-max-connections-per-ip-overrides", "10.0.0.1:5, [::1]:0",
		"--kafka-connection-creation-rate-per-ip", "3"},
		map[string]string{"STRATA_KAFKA_CONNECTION_CREATION_RATE_PER_IP_OVERRIDES": "10.0.0.2:0.5"})
	if err != nil {
		t.Fatal(err)
	}
	p = serve.Problems{}
	c.Validate(&p, nil, false)
	if err := p.Err(); err != nil {
		t.Fatalf("validate overrides: %v", err)
	}
	conns, err := ipOverrides(c.Limits.MaxConnsPerIPOverrides, parseCount)
	if err != nil || len(conns) != 2 || conns["10.0.0.1"] != 5 || conns["::1"] != 0 {
		t.Fatalf("connection overrides %v %v", conns, err)
	}
	rates, err := ipOverrides(c.Limits.ConnCreationRatePerIPOverrides, parseRate)
	if err != nil || rates["10.0.0.2"] != 0.5 || c.Limits.ConnCreationRatePerIP != 3 {
		t.Fatalf("rate overrides %v %v, rate %v", rates, err, c.Limits.ConnCreationRatePerIP)
	}
	for flag, value := range map[string]string{
		"kafka-max-connections-per-ip-overrides":          "broker.example.com:5",
		"kafka-connection-creation-rate-per-ip-overrides": "10.0.0.1:fast",
	} {
		c, err = parse([]string{"--kafka-listener", "127.0.0.1:0", "--" + flag, value}, nil)
		if err != nil {
			t.Fatal(err)
		}
		p = serve.Problems{}
		c.Validate(&p, nil, false)
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), "--"+flag) || strings.Count(err.Error(), "\n") > 1 {
			t.Fatalf("--%s %s: %v, want one line naming the flag", flag, value, err)
		}
	}
}
