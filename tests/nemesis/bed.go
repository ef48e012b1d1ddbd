package nemesis

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/tests/harness"
	"github.com/strata-mq/strata/tests/nemesis/diskfull"
	"github.com/strata-mq/strata/tests/nemesis/netcut"
)

// bedConfig sizes the test bed.
type bedConfig struct {
	controllers  int   // controller quorum size (3, so a minority can be cut off)
	storageNodes int   // storage nodes; more than the replication factor, so moves have somewhere to go
	tmpfsNodes   int   // how many storage nodes (the highest ids) keep their data on a small tmpfs
	tmpfsBytes   int64 // size of each tmpfs
}

// bed is the cluster a run drives: every service as a real process in a
// cgroup of its own (netcut), storage nodes with --fault-injection, some
// of them on a tmpfs that can fill up (diskfull), the coordinator on a
// private PostgreSQL that can be restarted, and tiering reaching its
// object store through a proxy that can slow or break it.
type bed struct {
	t       testing.TB
	cluster *harness.Cluster
	group   *harness.GroupServices
	tiering *harness.Tiering
	pg      *harness.Postgres
	net     *netcut.Net
	// clients is the cgroup of the test process itself, where every
	// client of the workload runs: the group CutAnswers cuts off from a
	// leader's answers.
	clients *netcut.Group
	// clientProxies carry the pipelined producers' calls to the storage
	// nodes (pipeline.go).
	clientProxies clientProxies

	mu     sync.Mutex
	groups map[string]*netcut.Group // process name to its cgroup
	disks  map[int]*diskfull.Disk   // storage node id to its tmpfs
}

// startBed starts the bed, or fails the test with what was missing (root,
// nftables, cgroup v2, PostgreSQL's binaries): the suite never skips.
func startBed(t testing.TB, cfg bedConfig) *bed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nt, err := netcut.New(ctx)
	if err != nil {
		t.Fatalf("nemesis: network faults need root, nftables and cgroup v2: %v", err)
	}
	t.Cleanup(func() { nt.Close() })
	b := &bed{t: t, net: nt, groups: map[string]*netcut.Group{}, disks: map[int]*diskfull.Disk{}}
	// The test process joins a group of its own before it opens any
	// connection, so that every socket of the workload is born there (the
	// processes it starts are started in their own groups). Close moves it
	// back out.
	if b.clients, err = nt.Group("clients"); err == nil {
		err = b.clients.Add(os.Getpid())
	}
	if err != nil {
		t.Fatalf("nemesis: the clients' cgroup: %v", err)
	}

	b.pg = harness.StartPostgres(t)
	if err := b.pg.CreateDatabase(ctx, "strata"); err != nil {
		t.Fatalf("nemesis: create the offsets database: %v", err)
	}

	firstTmpfs := cfg.storageNodes - cfg.tmpfsNodes + 1
	ccfg := harness.ClusterConfig{
		Controllers:  cfg.controllers,
		StorageNodes: cfg.storageNodes,
		// Sessions and lag times several times the cadence that renews
		// them, on a machine whose cores the whole bed shares.
		NodeSessionTimeout:       6 * time.Second,
		ControllerSessionTimeout: 4 * time.Second,
		ReplicaLagTime:           4 * time.Second,
		ReadyTimeout:             90 * time.Second,
		// The cleaner looks for dirty logs every second rather than every
		// 15s, so that the compacted topic is cleaned, and its tombstones
		// removed, many times in a run of a few minutes.
		StorageArgs: []string{"--fault-injection", "--retention-interval", "5s", "--cleaner-backoff", "1s"},
		Setup: func(n *harness.Node, cmd *exec.Cmd) {
			if n.Service == "storage" && n.ID >= firstTmpfs {
				b.mountTmpfs(n, cfg.tmpfsBytes)
			}
			b.placeInGroup(n, cmd)
		},
	}
	b.cluster, b.tiering = harness.StartTieredCluster(t, ccfg, harness.TieringConfig{
		TierInterval: time.Second,
		S3Proxy:      true,
		Args:         []string{"--retention-interval", "5s", "--orphan-grace", "1m"},
	})
	b.clientProxies = startClientProxies(t, b.cluster.StorageNodes())
	b.group = harness.StartGroupServices(t, b.cluster, harness.GroupConfig{
		DSN:            b.pg.DSN("strata"),
		SessionTimeout: 8 * time.Second,
		OwnershipLease: 4 * time.Second,
		// Transactional producers get their producer ids from the
		// controllers, through the coordinator (txn.go).
		CoordinatorArgsFor: func(int, string) []string {
			return []string{"--controller", strings.Join(b.cluster.ControllerURLs(), ",")}
		},
	})
	return b
}

// mountTmpfs puts storage node n's data directory on a tmpfs the first
// time it starts; later runs find it mounted.
func (b *bed) mountTmpfs(n *harness.Node, size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.disks[n.ID] != nil {
		return
	}
	if err := os.MkdirAll(n.DataDir, 0o755); err != nil {
		b.t.Errorf("nemesis: %s data dir: %v", n.Name(), err)
		return
	}
	d, err := diskfull.Mount(n.DataDir, size)
	if err != nil {
		b.t.Errorf("nemesis: tmpfs for %s: %v", n.Name(), err)
		return
	}
	b.disks[n.ID] = d
	b.t.Cleanup(func() { d.Unmount() })
}

// placeInGroup starts each run of a process in its own cgroup, so that
// its sockets are born there and the cuts of its group apply to them.
func (b *bed) placeInGroup(n *harness.Node, cmd *exec.Cmd) {
	name := n.Service + "-" + strconv.Itoa(n.ID)
	b.mu.Lock()
	g := b.groups[name]
	if g == nil {
		var err error
		if g, err = b.net.Group(name); err != nil {
			b.mu.Unlock()
			b.t.Errorf("nemesis: cgroup for %s: %v", name, err)
			return
		}
		b.groups[name] = g
	}
	b.mu.Unlock()
	g.Setup(cmd)
}

// groupOf returns the cgroup of a process.
func (b *bed) groupOf(n *harness.Node) *netcut.Group {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.groups[n.Service+"-"+strconv.Itoa(n.ID)]
}

// disk returns storage node id's tmpfs, or nil.
func (b *bed) disk(id int) *diskfull.Disk {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.disks[id]
}

// processes are every service process of the bed.
func (b *bed) processes() []*harness.Node {
	out := append(b.cluster.Controllers(), b.cluster.StorageNodes()...)
	out = append(out, b.group.Gateway)
	out = append(out, b.group.Coordinators...)
	return append(out, b.tiering.Node)
}

// ports returns the ports a process listens on that others connect to:
// its API port and, for a controller, its etcd peer port.
func ports(n *harness.Node) []int {
	var out []int
	for _, raw := range []string{n.URL, n.PeerURL} {
		if raw == "" {
			continue
		}
		if u, err := url.Parse(raw); err == nil {
			if p, err := strconv.Atoi(u.Port()); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// restart starts a process that is not running again with the same argv
// and waits until it is ready. A process that exits on its own (a storage
// node stops when its log fails) is started again the same way.
func (b *bed) restart(ctx context.Context, n *harness.Node) error {
	if !n.Proc.Exited() {
		return fmt.Errorf("%s is still running", n.Name())
	}
	n.Proc.Restart()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	return n.Ready(ctx)
}

// waitExited waits until n's process has exited, up to timeout.
func waitExited(ctx context.Context, n *harness.Node, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !n.Proc.Exited() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}

// outDir is where a run keeps its history and summary.
func outDir(t testing.TB, flagDir string) string {
	dir := flagDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "strata-nemesis")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("nemesis: %v", err)
	}
	return dir
}
