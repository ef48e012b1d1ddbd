package netcut

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// Deadlines of the peers' connections. One that must work gets okWait,
// sized for a loaded machine. One that must time out gets cutWait: that is
// an observation window for a negative check, since a cut connection never
// completes however long it is given; the checks before and after the cut
// show the same connection completing within okWait.
const (
	okWait  = "20s"
	cutWait = "1s"
	// testTimeout bounds the setup steps of a test: nft, starting peers.
	testTimeout = 60 * time.Second
)

// newNet makes a Net closed when the test ends. A machine that cannot cut
// fails the test: the fault suite must not pass by skipping.
func newNet(t *testing.T) *Net {
	t.Helper()
	n, err := New(harness.Deadline(t, testTimeout))
	if err != nil {
		t.Fatalf("%v (the network fault tests need root, nftables and a cgroup2 mount)", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return n
}

func newGroup(t *testing.T, n *Net, name string) *Group {
	t.Helper()
	g, err := n.Group(name)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// peer is a running runPeer process.
type peer struct {
	proc   *harness.Process
	port   int
	client *http.Client
}

// startPeer starts a peer; setup, when not nil, shapes its command (a
// Group's Setup starts it in the group).
func startPeer(t *testing.T, name string, setup func(*exec.Cmd)) *peer {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	proc := harness.StartWith(t, name, []string{exe}, setup, peerEnv+"=1")
	line := proc.WaitLine(harness.Deadline(t, testTimeout), func(l string) bool { return strings.HasPrefix(l, "listening ") })
	port, err := strconv.Atoi(strings.TrimPrefix(line, "listening "))
	if err != nil {
		t.Fatalf("%s: %q: %v", name, line, err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &peer{proc: proc, port: port, client: &http.Client{Transport: tr, Timeout: testTimeout}}
}

func (p *peer) pid() int { return p.proc.Pid() }

// ask has the peer run a request (see runPeer) and returns its answer:
// "ok", "timeout: ..." or "error: ...".
func (p *peer) ask(t *testing.T, format string, args ...any) string {
	t.Helper()
	path := fmt.Sprintf(format, args...)
	resp, err := p.client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", p.port, path))
	if err != nil {
		t.Fatalf("%s %s: %v", p.proc.Name(), path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", p.proc.Name(), path, err)
	}
	return strings.TrimSpace(string(b))
}

// reaches checks that from's new connection to port works.
func reaches(t *testing.T, from *peer, port int) {
	t.Helper()
	if got := from.ask(t, "/dial?port=%d&timeout=%s", port, okWait); got != "ok" {
		t.Fatalf("%s to port %d: %s, want ok", from.proc.Name(), port, got)
	}
}

// cutOff checks that from's new connection to port times out.
func cutOff(t *testing.T, from *peer, port int) {
	t.Helper()
	if got := from.ask(t, "/dial?port=%d&timeout=%s", port, cutWait); !strings.HasPrefix(got, "timeout:") {
		t.Fatalf("%s to port %d: %s, want a timeout", from.proc.Name(), port, got)
	}
}

// cgroupOf is pid's cgroup v2 path, from /proc/PID/cgroup.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	t.Fatalf("pid %d: no cgroup v2 line in %q", pid, b)
	return ""
}

// pongServer answers /ping like a peer, from outside every group.
func pongServer(t *testing.T) int {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "pong") }))
	t.Cleanup(s.Close)
	port, err := strconv.Atoi(s.URL[strings.LastIndexByte(s.URL, ':')+1:])
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TestCut cuts peer a from peer b's port and checks exactly what the
// package doc promises, for a process started in its group and for one
// moved into it with connections it opened before.
func TestCut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start bool // start a in its group; otherwise move it with Add
	}{
		{"started in the group", true},
		{"moved into the group", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := harness.Deadline(t, testTimeout)
			n := newNet(t)
			ga, gb := newGroup(t, n, "a"), newGroup(t, n, "b")
			var a *peer
			if tc.start {
				a = startPeer(t, "a", ga.Setup)
			} else {
				a = startPeer(t, "a", nil)
			}
			b := startPeer(t, "b", gb.Setup)
			other := pongServer(t)

			reaches(t, a, b.port)
			if got := a.ask(t, "/open?port=%d&id=1&timeout=%s", b.port, okWait); got != "ok" {
				t.Fatalf("open a connection from a to b: %s", got)
			}
			if got := a.ask(t, "/use?id=1&timeout=%s", okWait); got != "ok" {
				t.Fatalf("a's connection to b before the cut: %s", got)
			}
			if !tc.start {
				if err := ga.Add(a.pid()); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := cgroupOf(t, a.pid()), strings.TrimPrefix(ga.Dir(), n.mount.dir); got != want {
				t.Fatalf("a is in cgroup %s, want %s", got, want)
			}
			if pids, err := ga.Pids(); err != nil || !slices.Equal(pids, []int{a.pid()}) {
				t.Fatalf("group a holds %v (%v), want [%d]", pids, err, a.pid())
			}

			id, err := n.Cut(ctx, ga, b.port)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("cuts: %v", n)
			if want := fmt.Sprintf("cut %d: a -> %d (1 connection destroyed)", id, b.port); n.String() != want {
				t.Errorf("String() = %q, want %q", n, want)
			}

			cutOff(t, a, b.port)
			if got := a.ask(t, "/use?id=1&timeout=%s", okWait); !strings.HasPrefix(got, "error:") {
				t.Errorf("a's connection to b opened before the cut: %s, want an error (destroyed)", got)
			}
			// Everything else flows: others to b, b to a (and a's answers),
			// a to other ports.
			pong, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ping", b.port))
			if err != nil {
				t.Fatalf("from outside the groups to b: %v", err)
			}
			pong.Body.Close()
			reaches(t, b, a.port)
			reaches(t, a, other)

			if err := n.Heal(ctx, id); err != nil {
				t.Fatal(err)
			}
			if n.String() != "no cuts" {
				t.Errorf("after Heal, String() = %q", n)
			}
			reaches(t, a, b.port)
			if err := n.Heal(ctx, id); err == nil {
				t.Error("healing a healed cut: no error")
			}
		})
	}
}

// TestCutAnswers drops what b sends back to a, and checks what the
// package doc promises: a's requests still reach b over a connection
// opened before, long after a retransmission timeout too, their answers
// are lost, no connection is destroyed, b's answers to others flow, and
// once healed the same connection goes on.
func TestCutAnswers(t *testing.T) {
	ctx := harness.Deadline(t, testTimeout)
	n := newNet(t)
	ga, gb, gc := newGroup(t, n, "a"), newGroup(t, n, "b"), newGroup(t, n, "c")
	a, b, c := startPeer(t, "a", ga.Setup), startPeer(t, "b", gb.Setup), startPeer(t, "c", gc.Setup)

	if got := a.ask(t, "/open?port=%d&id=1&timeout=%s", b.port, okWait); got != "ok" {
		t.Fatalf("open a connection from a to b: %s", got)
	}
	if got := a.ask(t, "/use?id=1&timeout=%s", okWait); got != "ok" {
		t.Fatalf("a's connection to b before the cut: %s", got)
	}
	id, err := n.CutAnswers(ctx, ga, b.port)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("cut %d: a <- %d", id, b.port); n.String() != want {
		t.Errorf("String() = %q, want %q", n, want)
	}
	served := b.ask(t, "/pings")
	if got := a.ask(t, "/use?id=1&timeout=%s", cutWait); !strings.HasPrefix(got, "timeout:") {
		t.Fatalf("a's connection to b under the cut: %s, want a timeout (answer lost)", got)
	}
	before, _ := strconv.Atoi(served)
	// answered waits until b has answered n of a's requests since the cut.
	answered := func(what string, n int) {
		t.Helper()
		testwait.Until(t, 20*time.Second, "b to answer "+what, func() error {
			if got, _ := strconv.Atoi(b.ask(t, "/pings")); got != before+n {
				return fmt.Errorf("b answered %d pings, want %d", got, before+n)
			}
			return nil
		})
	}
	answered("a's request sent under the cut", 1)
	// A second request on the same connection, a second after the first
	// (well past TCP's retransmission timeout), still arrives.
	if got := a.ask(t, "/use?id=1&timeout=%s", cutWait); !strings.HasPrefix(got, "timeout:") {
		t.Fatalf("a's second request to b under the cut: %s, want a timeout (answer lost)", got)
	}
	answered("a's second request sent under the cut", 2)
	cutOff(t, a, b.port) // a new connection opens, and its answer is lost
	reaches(t, c, b.port)
	reaches(t, b, a.port)

	if err := n.Heal(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := a.ask(t, "/use?id=1&timeout=%s", okWait); got != "ok" {
		t.Errorf("a's connection to b after the heal: %s, want ok (not destroyed)", got)
	}
	reaches(t, a, b.port)
}

// TestPartition isolates a from b and c both ways, while b and c still
// reach each other, and heals it.
func TestPartition(t *testing.T) {
	ctx := harness.Deadline(t, testTimeout)
	n := newNet(t)
	peers := map[*Group]*peer{}
	var gs []*Group
	for _, name := range []string{"a", "b", "c"} {
		g := newGroup(t, n, name)
		peers[g] = startPeer(t, name, g.Setup)
		gs = append(gs, g)
	}
	a, b, c := peers[gs[0]], peers[gs[1]], peers[gs[2]]
	portsOf := func(g *Group) []int { return []int{peers[g].port} }

	id, err := n.Partition(ctx, gs[:1], gs[1:], portsOf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cuts: %v", n)
	if want := fmt.Sprintf("cut %d (partition a | b c): a -> %s; b -> %d; c -> %d",
		id, joinPorts(slices.Sorted(slices.Values([]int{b.port, c.port})), ","), a.port, a.port); n.String() != want {
		t.Errorf("String() = %q, want %q", n, want)
	}
	for _, cut := range [][2]*peer{{a, b}, {a, c}, {b, a}, {c, a}} {
		cutOff(t, cut[0], cut[1].port)
	}
	reaches(t, b, c.port)
	reaches(t, c, b.port)

	if err := n.HealAll(ctx); err != nil {
		t.Fatal(err)
	}
	reaches(t, a, b.port)
	reaches(t, c, a.port)
}

// TestClose checks that Close leaves nothing behind: no table, no groups,
// the processes back in the root group and reaching each other, and that
// a second Close and later calls are harmless.
func TestClose(t *testing.T) {
	ctx := harness.Deadline(t, testTimeout)
	n := newNet(t)
	ga, gb := newGroup(t, n, "a"), newGroup(t, n, "b")
	a, b := startPeer(t, "a", ga.Setup), startPeer(t, "b", gb.Setup)
	if _, err := n.Cut(ctx, ga, b.port); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nft", "list", "table", "inet", n.table).CombinedOutput(); err == nil {
		t.Errorf("table %s still there after Close:\n%s", n.table, out)
	}
	if _, err := os.Stat(n.parent); !os.IsNotExist(err) {
		t.Errorf("parent group %s after Close: %v", n.parent, err)
	}
	if got := cgroupOf(t, a.pid()); got != "/" {
		t.Errorf("a in cgroup %s after Close, want /", got)
	}
	reaches(t, a, b.port)
	if err := n.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := n.Group("c"); err == nil {
		t.Error("Group after Close: no error")
	}
	if _, err := n.Cut(ctx, ga, b.port); err == nil {
		t.Error("Cut after Close: no error")
	}
	if err := ga.Add(a.pid()); err == nil {
		t.Error("Add after Close: no error")
	}
}

// TestInvalid checks the arguments Cut, Partition and Group refuse.
func TestInvalid(t *testing.T) {
	ctx := harness.Deadline(t, testTimeout)
	n, other := newNet(t), newNet(t)
	ga, gb := newGroup(t, n, "a"), newGroup(t, n, "b")
	stranger := newGroup(t, other, "a")
	one := func(*Group) []int { return []int{9} }
	none := func(*Group) []int { return nil }
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"no ports", func() error { _, err := n.Cut(ctx, ga); return err }},
		{"port 0", func() error { _, err := n.Cut(ctx, ga, 0); return err }},
		{"port 65536", func() error { _, err := n.Cut(ctx, ga, 65536); return err }},
		{"group of another Net", func() error { _, err := n.Cut(ctx, stranger, 9); return err }},
		{"nil group", func() error { _, err := n.Cut(ctx, nil, 9); return err }},
		{"partition with an empty side", func() error { _, err := n.Partition(ctx, []*Group{ga}, nil, one); return err }},
		{"group on both sides", func() error { _, err := n.Partition(ctx, []*Group{ga}, []*Group{gb, ga}, one); return err }},
		{"partition without ports", func() error { _, err := n.Partition(ctx, []*Group{ga}, []*Group{gb}, none); return err }},
		{"duplicate group", func() error { _, err := n.Group("a"); return err }},
		{"group name with a slash", func() error { _, err := n.Group("a/b"); return err }},
		{"group name ..", func() error { _, err := n.Group(".."); return err }},
		{"group name with a quote", func() error { _, err := n.Group(`a"`); return err }},
		{"heal an unknown cut", func() error { return n.Heal(ctx, 42) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), "netcut: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
	if n.String() != "no cuts" {
		t.Errorf("refused calls left cuts: %v", n)
	}
}

// TestFindCgroup2 reads mount tables of the layouts in use.
func TestFindCgroup2(t *testing.T) {
	const hybrid = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	const unified = `22 1 0:21 / /sys rw - sysfs sysfs rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
`
	const escaped = `30 22 0:26 /ci/job /mnt/cg\0402 rw - cgroup2 none rw
`
	for _, tc := range []struct {
		name, table string
		want        cgroup2Mount
		wantErr     bool
	}{
		{"v2 beside v1", hybrid, cgroup2Mount{dir: "/sys/fs/cgroup/unified", root: "/"}, false},
		{"v2 only, optional fields", unified, cgroup2Mount{dir: "/sys/fs/cgroup", root: "/"}, false},
		{"escaped mount point, inner root", escaped, cgroup2Mount{dir: "/mnt/cg 2", root: "/ci/job"}, false},
		{"no cgroup2", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", cgroup2Mount{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findCgroup2(strings.NewReader(tc.table))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("findCgroup2 = %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestRulePath checks the path and level an nft rule gets for a group,
// which nft resolves from /sys/fs/cgroup whatever the mount point.
func TestRulePath(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mount     cgroup2Mount
		dir       string
		wantPath  string
		wantLevel int
	}{
		{"v2 beside v1", cgroup2Mount{"/sys/fs/cgroup/unified", "/"}, "/sys/fs/cgroup/unified/p/a", "unified/p/a", 2},
		{"v2 only", cgroup2Mount{"/sys/fs/cgroup", "/"}, "/sys/fs/cgroup/p/a", "p/a", 2},
		{"mount of an inner group", cgroup2Mount{"/sys/fs/cgroup", "/ci/job"}, "/sys/fs/cgroup/p/a", "p/a", 4},
		{"mounted elsewhere", cgroup2Mount{"/mnt/cg", "/"}, "/mnt/cg/p/a", "../../../mnt/cg/p/a", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, err := nftPath(tc.dir)
			if err != nil || path != tc.wantPath {
				t.Errorf("nftPath = %q, %v; want %q", path, err, tc.wantPath)
			}
			level, err := tc.mount.level(tc.dir)
			if err != nil || level != tc.wantLevel {
				t.Errorf("level = %d, %v; want %d", level, err, tc.wantLevel)
			}
		})
	}
	if _, err := (cgroup2Mount{"/sys/fs/cgroup", "/"}).level("/sys/fs/cgroup"); err == nil {
		t.Error("level of the mount itself: no error")
	}
}

// TestParseProcNetTCP reads lines of /proc/net/tcp and tcp6.
func TestParseProcNetTCP(t *testing.T) {
	const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4553 1 0000000000000000 100 0 0 10 0
   1: 0100007F:AC34 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 32825 2 0000000000000000 20 0 0 10 -1
`
	const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:AC34 0000000000000000FFFF00000100007F:85F7 01 00000000:00000000 00:00000000 00000000     0        0 32825 2 0000000000000000 20 0 0 10 -1
   1: 00000000000000000000000001000000:1111 00000000000000000000000001000000:2222 01 00000000:00000000 00:00000000 00000000   106        0 5583 1 0000000000000000 100 0 0 10 0
`
	for _, tc := range []struct {
		name, table string
		want        []string
	}{
		{"tcp", tcp, []string{"listen 127.0.0.1:8080->0.0.0.0:0 #4553", "127.0.0.1:44084->127.0.0.1:8080 #32825"}},
		{"tcp6", tcp6, []string{"[::ffff:127.0.0.1]:44084->[::ffff:127.0.0.1]:34295 #32825", "[::1]:4369->[::1]:8738 #5583"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conns, err := parseProcNetTCP(strings.NewReader(tc.table))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range conns {
				s := fmt.Sprintf("%s #%d", c, c.inode)
				if c.listening {
					s = "listen " + s
				}
				got = append(got, s)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestParseHandles reads the handles nft echoes for added rules.
func TestParseHandles(t *testing.T) {
	out := `add rule inet t output socket cgroupv2 level 2 "unified/p/a" tcp dport { 9001, 9002 } drop comment "cut 1: a -> 9001,9002" # handle 3
# new generation 10 by process 24692 (nft)
add rule inet t output socket cgroupv2 level 2 "unified/p/b" tcp dport 9003 drop comment "cut 1: b -> 9003" # handle 14
`
	got, err := parseHandles(out)
	if err != nil || !slices.Equal(got, []int{3, 14}) {
		t.Fatalf("parseHandles = %v, %v; want [3 14]", got, err)
	}
}
