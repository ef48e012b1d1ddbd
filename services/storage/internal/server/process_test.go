package server

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/serve"
)

// parseProcessConfig registers the storage node's flags and parses args
// with no environment, as strata-storage does at start.
func parseProcessConfig(t *testing.T, args ...string) (*ProcessConfig, error) {
	t.Helper()
	cfg := &ProcessConfig{Base: serve.Base{Listen: DefaultListen}}
	f := serve.NewFlags("strata-storage")
	cfg.RegisterFlags(f)
	if err := f.Parse(args, nil); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return cfg, cfg.Validate()
}

func TestProcessConfigDefaultsNeedOnlyANodeID(t *testing.T) {
	cfg, err := parseProcessConfig(t, "--node-id", "3")
	if err != nil {
		t.Fatalf("Validate with only --node-id: %v", err)
	}
	if cfg.DataDir != "./data" || cfg.Controller != "http://127.0.0.1:9093" || cfg.Tiering != "" {
		t.Fatalf("defaults: data-dir %q controller %q tiering %q", cfg.DataDir, cfg.Controller, cfg.Tiering)
	}
}

func TestProcessConfigReportsEveryProblem(t *testing.T) {
	_, err := parseProcessConfig(t, "--data-dir", "", "--controller", "", "--replica-lag-time", "0s",
		"--tier-interval", "-1s", "--retention-interval", "0s", "--advertise-listeners", "no-equals-sign")
	if err == nil {
		t.Fatal("Validate accepted a config with six bad flags")
	}
	for _, flag := range []string{"--node-id", "--data-dir", "--controller", "--replica-lag-time",
		"--tier-interval", "--retention-interval", "--advertise-listeners"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("error does not name %s: %v", flag, err)
		}
	}
}

// --fault-injection is off unless asked for, by flag or STRATA_FAULT_INJECTION,
// and needs the admin listener that serves /debug/faults.
func TestProcessConfigFaultInjection(t *testing.T) {
	cfg, err := parseProcessConfig(t, "--node-id", "1")
	if err != nil || cfg.FaultInjection {
		t.Fatalf("default: fault injection %v, %v", cfg.FaultInjection, err)
	}
	_, err = parseProcessConfig(t, "--node-id", "1", "--fault-injection")
	if err == nil || !strings.Contains(err.Error(), "--fault-injection") || !strings.Contains(err.Error(), "--admin-listen") {
		t.Fatalf("--fault-injection without an admin listener: %v", err)
	}
	cfg = &ProcessConfig{Base: serve.Base{Listen: DefaultListen, AdminListen: "127.0.0.1:0"}}
	f := serve.NewFlags("strata-storage")
	cfg.RegisterFlags(f)
	env := map[string]string{"STRATA_NODE_ID": "1", "STRATA_FAULT_INJECTION": "true"}
	if err := f.Parse(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil || !cfg.FaultInjection {
		t.Fatalf("STRATA_FAULT_INJECTION=true with an admin listener: fault injection %v, %v", cfg.FaultInjection, err)
	}
}

// A node registers the scheme its listener speaks: peers and clients
// dial what it registers.
func TestAdvertiseURL(t *testing.T) {
	for _, tc := range []struct {
		advertise string
		tls       bool
		want      string
	}{
		{"", false, "http://127.0.0.1:9102"},
		{"node-1:9102", false, "http://node-1:9102"},
		{"node-1:9102", true, "https://node-1:9102"},
		{"http://node-1:9102", true, "http://node-1:9102"},
		{"https://node-1:9102", false, "https://node-1:9102"},
	} {
		if got := advertiseURL(tc.advertise, "http://127.0.0.1:9102", tc.tls); got != tc.want {
			t.Errorf("advertiseURL(%q, tls %v) = %q, want %q", tc.advertise, tc.tls, got, tc.want)
		}
	}
}

// A failed partition log stops the process once, with one line naming the
// partition, however many logs fail.
func TestHaltOnLogFailure(t *testing.T) {
	var buf bytes.Buffer
	var codes []int
	halt := haltOnLogFailure(slog.New(slog.NewTextHandler(&buf, nil)), func(code int) { codes = append(codes, code) })
	halt("orders", 3, errors.New("write: input/output error"))
	halt("orders", 4, errors.New("write: input/output error"))
	if !slices.Equal(codes, []int{3}) {
		t.Fatalf("exit codes %v, want [3]", codes)
	}
	if out := buf.String(); !strings.Contains(out, "orders-3") || strings.Count(out, "\n") != 1 {
		t.Fatalf("log %q, want one line naming orders-3", out)
	}
}
