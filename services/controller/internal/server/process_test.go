package server

import (
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/serve"
)

// parseProcessConfig registers the controller's flags and parses args with
// no environment, as strata-controller does at start.
func parseProcessConfig(t *testing.T, args ...string) (*ProcessConfig, error) {
	t.Helper()
	cfg := &ProcessConfig{Base: serve.Base{Listen: DefaultListen, AdminListen: DefaultAdminListen}}
	f := serve.NewFlags("strata-controller")
	cfg.RegisterFlags(f)
	if err := f.Parse(args, nil); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return cfg, cfg.Validate()
}

func TestProcessConfigDefaultsNeedOnlyADataDir(t *testing.T) {
	cfg, err := parseProcessConfig(t, "--data-dir", t.TempDir())
	if err != nil {
		t.Fatalf("Validate with only --data-dir: %v", err)
	}
	if cfg.id != "1" || cfg.parsedPeers["1"] != "http://127.0.0.1:2380" {
		t.Fatalf("defaults: id %q peers %v", cfg.id, cfg.parsedPeers)
	}
	if !cfg.balance.AutoLeaderBalance || !cfg.balance.AutoRebalance {
		t.Fatalf("balance defaults: %+v", cfg.balance)
	}
}

func TestProcessConfigReportsEveryProblem(t *testing.T) {
	_, err := parseProcessConfig(t, "--id", "9", "--etcd-peer-listen", "no-port",
		"--etcd-client-port", "70000", "--node-session-timeout", "10ms", "--controller-session-timeout", "0s",
		"--leader-imbalance-threshold", "101", "--etcd-log-level", "loud", "--rebalance-throttle", "-1")
	if err == nil {
		t.Fatal("Validate accepted a config with nine bad flags")
	}
	for _, flag := range []string{"--data-dir", "--id", "--etcd-peer-listen", "--etcd-client-port",
		"--node-session-timeout", "--controller-session-timeout", "--leader-imbalance-threshold",
		"--etcd-log-level", "--rebalance-throttle"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("error does not name %s: %v", flag, err)
		}
	}
}
