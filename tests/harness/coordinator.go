package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/launch"
	"github.com/strata-mq/strata/lib/tlsconfig"
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
// each answers /readyz. In a secure cluster each runs with its
// certificate (gateway-1, coordinator-N) and the security flags, and the
// coordinators watch the controllers (--controller) for the ACLs they
// enforce. When a chosen port is taken before a process
// binds it, they are all started again on new ports (up to three
// attempts).
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
	for attempt := 1; ; attempt++ {
		s, err := tryStartGroupServices(t, c, cfg, gwBin, coBin)
		if err == nil {
			return s
		}
		if errors.Is(err, errPortInUse) && attempt < 3 {
			t.Logf("harness: attempt %d: %v; starting again on other ports", attempt, err)
			continue
		}
		t.Fatalf("harness: start group services: %v", err)
	}
}

func tryStartGroupServices(t testing.TB, c *Cluster, cfg GroupConfig, gwBin, coBin string) (_ *GroupServices, err error) {
	ports, err := FreePorts(t, 2+2*cfg.Coordinators)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	gw := &Node{Service: "gateway", ID: 1, URL: c.scheme() + addr(0), AdminURL: c.scheme() + addr(1), c: c}
	var coURLs []string
	s := &GroupServices{Gateway: gw}
	defer func() {
		if err != nil {
			for _, n := range append([]*Node{gw}, s.Coordinators...) {
				if n.Proc != nil {
					n.Proc.Kill()
				}
			}
		}
	}()
	root := t.TempDir()
	for i := range cfg.Coordinators {
		api, admin := addr(2+2*i), addr(3+2*i)
		id := i + 1
		n := &Node{Service: "coordinator", ID: id, URL: c.scheme() + api, AdminURL: c.scheme() + admin,
			DataDir: filepath.Join(root, fmt.Sprintf("coordinator-%d", id)), c: c}
		coURLs = append(coURLs, n.URL)
		spec := launch.Coordinator{
			Process:           c.process(coBin, api, admin, tlsconfig.RoleCoordinator, id),
			InstanceID:        fmt.Sprintf("coordinator-%d", id),
			DataDir:           n.DataDir,
			Gateway:           gw.URL,
			SessionTimeout:    cfg.SessionTimeout,
			HeartbeatInterval: cfg.HeartbeatInterval,
			OwnershipLease:    cfg.OwnershipLease,
			LagInterval:       time.Second,
		}
		if c.Secure() {
			// With --require-auth the coordinator enforces the ACLs the
			// controllers' metadata stream brings.
			spec.Controllers = c.ControllerURLs()
		}
		if cfg.CoordinatorArgsFor != nil {
			spec.Extra = cfg.CoordinatorArgsFor(id, api)
		}
		if err := os.MkdirAll(n.DataDir, 0o755); err != nil {
			return nil, err
		}
		var env []string
		if cfg.DSN != "" {
			env = append(env, "STRATA_DSN="+cfg.DSN)
		}
		c.start(n, fmt.Sprintf("coordinator-%d", id), spec.Argv(), env...)
		s.Coordinators = append(s.Coordinators, n)
	}
	c.start(gw, "gateway", launch.Gateway{
		Process:      c.process(gwBin, addr(0), addr(1), tlsconfig.RoleGateway, 1),
		Controllers:  c.ControllerURLs(),
		Coordinators: coURLs,
	}.Argv())
	for _, n := range append([]*Node{gw}, s.Coordinators...) {
		if err := n.waitReady(c.cfg.ReadyTimeout); err != nil {
			return nil, err
		}
	}
	c.services = append(c.services, s.Coordinators...)
	c.services = append(c.services, gw)
	return s, nil
}
