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

// haproxyConfig is the load balancer's configuration. It is the same
// design as deploy/compose/haproxy.cfg: TCP mode, because a gateway speaks
// HTTP/2 with prior knowledge (the Go client and the CLI) and HTTP/1.1
// (curl, k6, browsers) on one port, and an L4 balancer carries both
// without knowing either, as a cloud or Kubernetes LoadBalancer Service
// does. Health is the gateway's /readyz on its admin port; a connection
// to a gateway that died before the check noticed is retried on another
// (retries + redispatch).
const haproxyConfig = `global
    maxconn 512
    stats socket %s mode 600 level operator

defaults
    mode tcp
    timeout connect 2s
    timeout client 10m
    timeout server 10m
    retries 3
    option redispatch

frontend strata
    bind %s
    default_backend gateways

backend gateways
    balance roundrobin
    option httpchk
    http-check send meth GET uri /readyz
    http-check expect status 200
    default-server inter 300ms fall 2 rise 2
%s`

// StartHAProxy runs Debian's haproxy in the foreground with a generated
// config that balances over backends, and waits until a TCP connection
// through it reaches a gateway. The test fails (never skips) when haproxy
// is not installed: .ci/run installs it.
func StartHAProxy(t testing.TB, backends []LBBackend) *LoadBalancer {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatalf("harness: haproxy is not installed (apt-get install haproxy; .ci/run does): %v", err)
	}
	var servers strings.Builder
	for _, b := range backends {
		fmt.Fprintf(&servers, "    server %s %s check port %d\n", b.Name, b.Addr, b.AdminPort)
	}
	for attempt := 1; ; attempt++ {
		ports, err := FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
		dir := t.TempDir()
		cfg, sock := filepath.Join(dir, "haproxy.cfg"), filepath.Join(dir, "stats.sock")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(haproxyConfig, sock, listen, servers.String())), 0o644); err != nil {
			t.Fatal(err)
		}
		// -db: stay in the foreground and log to stderr; -f: the config.
		p := Start(t, "haproxy", []string{bin, "-db", "-f", cfg})
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
