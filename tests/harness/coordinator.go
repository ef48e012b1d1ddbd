package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Import paths of the group-side binaries.
const (
	gatewayPkg     = "github.com/strata-mq/strata/services/gateway/cmd/strata-gateway"
	coordinatorPkg = "github.com/strata-mq/strata/services/coordinator/cmd/strata-coordinator"
)

// GroupServices are the gateway and coordinator instances in front of a
// Cluster.
type GroupServices struct {
	Gateway      *Node
	Coordinators []*Node
}

// GroupConfig sets up StartGroupServices.
type GroupConfig struct {
	// Coordinators is the number of coordinator instances. Default 1.
	Coordinators int
	// DSN is the Postgres DSN every coordinator uses; empty means each
	// uses its own SQLite file (only sensible with one coordinator).
	DSN string
	// SessionTimeout is --session-timeout. Default 3s.
	SessionTimeout time.Duration
	// HeartbeatInterval is --heartbeat-interval. Default 200ms.
	HeartbeatInterval time.Duration
	// OwnershipLease is --ownership-lease. Default 2s.
	OwnershipLease time.Duration
	// CoordinatorArgsFor, when set, gives further flags for coordinator id,
	// whose API listens on apiAddr (host:port). Default none.
	CoordinatorArgsFor func(id int, apiAddr string) []string
}

// StartGroupServices starts cfg.Coordinators coordinators and one gateway
// (whose --coordinator lists them all) in front of c, and waits until
// each answers /readyz.
func StartGroupServices(t testing.TB, c *Cluster, cfg GroupConfig) *GroupServices {
	t.Helper()
	if cfg.Coordinators == 0 {
		cfg.Coordinators = 1
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 3 * time.Second
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 200 * time.Millisecond
	}
	if cfg.OwnershipLease == 0 {
		cfg.OwnershipLease = 2 * time.Second
	}
	gwBin, coBin := Binary(t, gatewayPkg), Binary(t, coordinatorPkg)
	ports, err := FreePorts(2 + 2*cfg.Coordinators)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	gw := &Node{Service: "gateway", ID: 1, URL: "http://" + addr(0), AdminURL: "http://" + addr(1), c: c}
	var ctlURLs, coURLs []string
	for _, n := range c.controllers {
		ctlURLs = append(ctlURLs, n.URL)
	}
	s := &GroupServices{Gateway: gw}
	root := t.TempDir()
	for i := range cfg.Coordinators {
		api, admin := addr(2+2*i), addr(3+2*i)
		id := i + 1
		n := &Node{Service: "coordinator", ID: id, URL: "http://" + api, AdminURL: "http://" + admin,
			DataDir: filepath.Join(root, fmt.Sprintf("coordinator-%d", id)), c: c}
		coURLs = append(coURLs, n.URL)
		argv := []string{coBin, "--listen", api, "--admin-listen", admin, "--instance-id", fmt.Sprintf("coordinator-%d", id),
			"--data-dir", n.DataDir, "--gateway", gw.URL, "--session-timeout", cfg.SessionTimeout.String(),
			"--heartbeat-interval", cfg.HeartbeatInterval.String(), "--ownership-lease", cfg.OwnershipLease.String(),
			"--lag-interval", "1s", "--log-format", "text", "--drain-timeout", "2s"}
		if cfg.CoordinatorArgsFor != nil {
			argv = append(argv, cfg.CoordinatorArgsFor(id, api)...)
		}
		if err := os.MkdirAll(n.DataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		var env []string
		if cfg.DSN != "" {
			env = append(env, "STRATA_DSN="+cfg.DSN)
		}
		n.Proc = Start(t, fmt.Sprintf("coordinator-%d", id), argv, env...)
		s.Coordinators = append(s.Coordinators, n)
	}
	gw.Proc = Start(t, "gateway", []string{gwBin, "--listen", addr(0), "--admin-listen", addr(1),
		"--controller", strings.Join(ctlURLs, ","), "--coordinator", strings.Join(coURLs, ","),
		"--log-format", "text", "--drain-timeout", "2s"})
	for _, n := range append([]*Node{gw}, s.Coordinators...) {
		if err := n.waitReady(c.cfg.ReadyTimeout); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	return s
}
