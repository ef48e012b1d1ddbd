package harness

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// LoadBalancer is an HAProxy process in front of gateways, on a loopback
// port of its own.
type LoadBalancer struct {
	URL  string // base URL clients bootstrap through
	Proc *Process

	statsSocket string // HAProxy's runtime API, for ServerUp
}

// LBBackend is one gateway behind the load balancer.
type LBBackend struct {
	Name      string // server name in the config, e.g. "gateway-1"
	Addr      string // API host:port
	AdminPort int    // port of its /readyz, the health check
}

// haproxyConfig is a test's own part of the load balancer's config: a
// stats socket (for ServerUp), a loopback listen address and the servers.
// HAProxy loads deploy/haproxy/gateways.cfg before it, which holds every
// setting of the balancer and says why, and what a config like this adds.
const haproxyConfig = `global
    stats socket %s mode 600 level operator

frontend gateways from gateways
    bind %s
    default_backend gateways

backend gateways from gateways
%s`

// gatewaysConfig is the path of deploy/haproxy/gateways.cfg, found at the
// repository root (where go.work is) above the test's working directory.
func gatewaysConfig(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return filepath.Join(d, "deploy", "haproxy", "gateways.cfg")
		}
		if filepath.Dir(d) == d {
			t.Fatalf("harness: no repository root (go.work) above %s", dir)
		}
	}
}

// StartHAProxy runs Debian's haproxy in the foreground with
// deploy/haproxy/gateways.cfg and a generated config that balances over
// backends, and waits until a TCP connection through it reaches a gateway.
// The test fails (never skips) when haproxy is not installed: .ci/run
// installs it.
func StartHAProxy(t testing.TB, backends []LBBackend) *LoadBalancer {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatalf("harness: haproxy is not installed (apt-get install haproxy; .ci/run does): %v", err)
	}
	var servers strings.Builder
	for _, b := range backends {
		fmt.Fprintf(&servers, "    server %s %s port %d inter 300ms\n", b.Name, b.Addr, b.AdminPort)
	}
	shared := gatewaysConfig(t)
	for attempt := 1; ; attempt++ {
		ports, err := FreePorts(t, 1)
		if err != nil {
			t.Fatal(err)
		}
		listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
		dir := t.TempDir()
		cfg, sock := filepath.Join(dir, "haproxy.cfg"), filepath.Join(dir, "stats.sock")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(haproxyConfig, sock, listen, servers.String())), 0o644); err != nil {
			t.Fatal(err)
		}
		// -db: stay in the foreground and log to stderr; -f: the configs,
		// in order.
		p := Start(t, "haproxy", []string{bin, "-db", "-f", shared, "-f", cfg})
		lb := &LoadBalancer{URL: "http://" + listen, Proc: p, statsSocket: sock}
		if err := waitDial(Deadline(t, 15*time.Second), listen, p); err == nil {
			return lb
		} else if attempt == 3 {
			t.Fatalf("harness: haproxy on %s: %v\n%s", listen, err, p.StderrTail())
		}
		p.Kill()
	}
}

// waitDial waits until addr accepts a TCP connection, or p exits.
func waitDial(ctx context.Context, addr string, p *Process) error {
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("haproxy exited: %v", err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// LBBackends lists the dev cluster's gateways as load-balancer backends.
func (d *Dev) LBBackends(t testing.TB) []LBBackend {
	t.Helper()
	var out []LBBackend
	for i, g := range d.Gateways {
		u, err := url.Parse(g)
		if err != nil {
			t.Fatalf("harness: gateway URL %q: %v", g, err)
		}
		p := d.Process(t, "gateway", i+1)
		_, admin, err := net.SplitHostPort(p.AdminAddress)
		if err != nil {
			t.Fatalf("harness: admin address %q: %v", p.AdminAddress, err)
		}
		var port int
		fmt.Sscan(admin, &port)
		out = append(out, LBBackend{Name: fmt.Sprintf("gateway-%d", i+1), Addr: u.Host, AdminPort: port})
	}
	return out
}

// ServerUp reports whether HAProxy's health checks count the named
// backend server as up, from its runtime API ("show stat").
func (lb *LoadBalancer) ServerUp(name string) (bool, error) {
	c, err := net.DialTimeout("unix", lb.statsSocket, time.Second)
	if err != nil {
		return false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return false, err
	}
	rows, err := csv.NewReader(c).ReadAll()
	if err != nil && len(rows) == 0 {
		return false, err
	}
	// The first row names the columns ("# pxname,svname,...,status,...").
	status := -1
	for i, col := range rows[0] {
		if strings.TrimPrefix(col, "# ") == "status" {
			status = i
		}
	}
	for _, r := range rows[1:] {
		if status >= 0 && len(r) > status && r[0] == "gateways" && r[1] == name {
			return strings.HasPrefix(r[status], "UP"), nil
		}
	}
	return false, fmt.Errorf("haproxy: no server %q in show stat", name)
}

// WaitServerUp waits until the named backend server is up.
func (lb *LoadBalancer) WaitServerUp(ctx context.Context, t testing.TB, name string) {
	t.Helper()
	for {
		up, err := lb.ServerUp(name)
		if up {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("harness: haproxy never counted %s up: %v", name, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
