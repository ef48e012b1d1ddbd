package devcluster

import (
	"fmt"
	"net/url"
	"os"
	"strings"
)

// procEnv is the environment of one cluster process: strata dev's own,
// so the standard OTEL_* variables reach every process as they are, plus
//
//   - OTEL_EXPORTER_OTLP_ENDPOINT=URL with --otlp URL, so every process
//     exports its traces to one collector;
//   - service.instance.id=<service>-<id> in OTEL_RESOURCE_ATTRIBUTES
//     (after any the caller set), so the spans of storage-1 and storage-2
//     can be told apart in a trace;
//
// and then the process's own (procSpec.env: the coordinator's STRATA_DSN
// with --postgres), last so that it wins.
func (c *cluster) procEnv(s procSpec) []string {
	env := os.Environ()
	if c.opts.otlp != "" {
		env = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+c.opts.otlp)
	}
	attrs := "service.instance.id=" + s.name()
	if have := os.Getenv("OTEL_RESOURCE_ATTRIBUTES"); have != "" && !strings.Contains(have, "service.instance.id=") {
		attrs = have + "," + attrs
	} else if have != "" {
		attrs = have
	}
	env = append(env, "OTEL_RESOURCE_ATTRIBUTES="+attrs)
	return append(env, s.env...)
}

// checkOTLP validates --otlp: empty, or an http(s) URL with a host.
func checkOTLP(u string) error {
	if u == "" {
		return nil
	}
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("must be an http:// or https:// URL of an OTLP receiver, such as http://127.0.0.1:4318")
	}
	return nil
}
