package devcluster

import (
	"slices"
	"testing"
)

// TestProcEnvPointsEveryProcessAtTheCollector: --otlp sets the endpoint,
// the caller's OTEL_* variables pass through, and each process is named.
func TestProcEnvPointsEveryProcessAtTheCollector(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=dev")
	c := &cluster{opts: options{otlp: "http://127.0.0.1:4318"}}
	env := c.procEnv(procSpec{service: "storage", id: 2})
	for _, want := range []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318",
		"OTEL_TRACES_SAMPLER=always_on",
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=dev,service.instance.id=storage-2",
	} {
		// The last value of a variable is the one a process sees.
		if i := slices.Index(env, want); i < 0 || slices.ContainsFunc(env[i+1:], func(s string) bool { return sameVar(s, want) }) {
			t.Errorf("environment lacks %s as the last setting of its variable", want)
		}
	}

	c = &cluster{}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	for _, kv := range c.procEnv(procSpec{service: "gateway", id: 1}) {
		if kv == "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318" {
			t.Error("an endpoint is set without --otlp")
		}
	}
}

func sameVar(a, b string) bool {
	name := func(s string) string {
		for i := range s {
			if s[i] == '=' {
				return s[:i]
			}
		}
		return s
	}
	return name(a) == name(b)
}
