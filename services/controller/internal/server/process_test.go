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

// Without TLS the embedded etcd's client listener can only be the owner-only
// Unix socket: a TCP port (--etcd-client-port, an https --etcd-client) would
// need certificates, so each is refused with one line naming its flag.
func TestProcessConfigEtcdClientNeedsSocketOrTLS(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		flag string
		want string
	}{
		{[]string{"--etcd-client-port", "9303"}, "--etcd-client-port", "no TLS"},
		{[]string{"--etcd-client", "https://127.0.0.1:9303"}, "--etcd-client", "no TLS"},
		{[]string{"--etcd-client", "unix://relative.sock"}, "--etcd-client", "absolute"},
		{[]string{"--etcd-client", "http://127.0.0.1:9303"}, "--etcd-client", "unix:///absolute/path"},
		{[]string{"--etcd-client", "unix:///x.sock", "--etcd-client-port", "1"}, "--etcd-client-port", "not both"},
	} {
		_, err := parseProcessConfig(t, append([]string{"--data-dir", dir}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.flag) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want a refusal naming %s and %q", tc.args, err, tc.flag, tc.want)
		}
	}
	if _, err := parseProcessConfig(t, "--data-dir", dir, "--etcd-client", "unix://"+dir+"/e.sock"); err != nil {
		t.Errorf("an absolute socket path: %v", err)
	}
}
