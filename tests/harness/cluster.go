package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/launch"
	"github.com/strata-mq/strata/lib/testports"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

// Import paths of the service binaries a Cluster runs.
const (
	controllerPkg = "github.com/strata-mq/strata/services/controller/cmd/strata-controller"
	storagePkg    = "github.com/strata-mq/strata/services/storage/cmd/strata-storage"
)

// Binaries are the service executables a Cluster runs.
type Binaries struct {
	Controller string // path of strata-controller
	Storage    string // path of strata-storage
}

// BuildServices compiles strata-controller and strata-storage (once per
// test binary run, through Binary).
func BuildServices(t testing.TB) Binaries {
	t.Helper()
	return Binaries{Controller: Binary(t, controllerPkg), Storage: Binary(t, storagePkg)}
}

// BuildRaceServices is BuildServices with the race detector compiled in
// (RaceBinary), for ClusterConfig.Race.
func BuildRaceServices(t testing.TB) Binaries {
	t.Helper()
	return Binaries{Controller: RaceBinary(t, controllerPkg), Storage: RaceBinary(t, storagePkg)}
}

// ClusterConfig sizes a Cluster and sets the timeouts its processes run
// with. Zero fields take the defaults named on each.
type ClusterConfig struct {
	// Controllers is the controller quorum size, 1 or 3. Default 1.
	Controllers int
	// StorageNodes is the number of storage nodes, ids 1..StorageNodes.
	// Default 3; 0 is taken as the default, so a cluster always has one.
	StorageNodes int
	// NodeSessionTimeout is the controller's --node-session-timeout: how
	// long a silent storage node stays alive. Default 3s.
	NodeSessionTimeout time.Duration
	// ControllerSessionTimeout is --controller-session-timeout: how long a
	// crashed active controller stays active. Default 2s.
	ControllerSessionTimeout time.Duration
	// ReplicaLagTime is the storage nodes' --replica-lag-time. Default 2s.
	ReplicaLagTime time.Duration
	// Tiering is the storage nodes' --tiering URL and TierInterval their
	// --tier-interval (StartTieredCluster sets both). Default none: no
	// tiered storage.
	Tiering      string
	TierInterval time.Duration
	// Race runs the controllers and storage nodes built with the race
	// detector (-race), for the tests that put them under faults (kills,
	// pauses, leader changes), where the unusual interleavings are: a
	// data race a process reports fails the test (the harness reads
	// every process's stderr). Default off: the plain builds, several
	// times cheaper in CPU.
	Race bool
	// ReadyTimeout bounds the wait for each process's /readyz. Default 45s.
	ReadyTimeout time.Duration
	// StorageArgs are extra flags appended to every storage node's argv.
	// Default none.
	StorageArgs []string
	// StorageProxies puts a Proxy in front of every storage node and makes
	// the node advertise it (--advertise), so every other process (other
	// storage nodes replicating, a gateway) reaches it through the proxy,
	// while Node.URL and the test's clients reach it directly. Default off.
	StorageProxies bool
	// Setup, when set, is called with the node and the command of every
	// run (the first start and each restart) of every process the cluster
	// starts, controllers, storage nodes and the services started in front
	// of it (StartGroupServices, StartGateway, StartTieredCluster), just
	// before it starts (see StartWith): to start it in a cgroup of its own,
	// say, or to prepare its data directory. Default none.
	Setup func(n *Node, cmd *exec.Cmd)
	// Env is added to the environment of every process the cluster starts
	// (STRATA_* settings its services read), so a test sets them for its
	// own cluster without t.Setenv, which a parallel test may not call.
	// Default none.
	Env []string
	// Secure runs the cluster as a secured deployment (security.go): a
	// dev CA in the test's temp dir, a certificate per process with its
	// spiffe://strata identity, TLS and mutual TLS everywhere,
	// --require-auth and --super-users User:admin on every process, the
	// services started in front of the cluster included; every URL is
	// https://, and the harness calls as the admin. Default off: plain
	// h2c, anonymous.
	Secure bool
	// StorageArgsFor, when set, gives further flags for storage node id,
	// whose API listens on apiAddr (host:port), appended after
	// StorageArgs; for example an --advertise-listeners address of a
	// proxy in front of it. Default none.
	StorageArgsFor func(id int, apiAddr string) []string
}

func (c ClusterConfig) withDefaults() ClusterConfig {
	if c.Controllers == 0 {
		c.Controllers = 1
	}
	if c.StorageNodes == 0 {
		c.StorageNodes = 3
	}
	if c.NodeSessionTimeout == 0 {
		c.NodeSessionTimeout = 3 * time.Second
	}
	if c.ControllerSessionTimeout == 0 {
		c.ControllerSessionTimeout = 2 * time.Second
	}
	if c.ReplicaLagTime == 0 {
		c.ReplicaLagTime = 2 * time.Second
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 45 * time.Second
	}
	return c
}

// Cluster is a Strata cluster of real processes on loopback: a controller
// quorum and storage nodes, each with its own data directory, API port and
// admin port. Every process is killed when the test ends.
type Cluster struct {
	t           testing.TB
	cfg         ClusterConfig
	bins        Binaries
	http        *http.Client     // the harness's calls: h2c, or TLS as the admin
	ready       *http.Client     // /readyz
	sec         *clusterSecurity // nil for a plain cluster
	controllers []*Node          // index id-1
	storage     []*Node          // index id-1
	services    []*Node          // started in front: gateways, coordinators, tiering
}

// Node is one process of a Cluster.
type Node struct {
	Service  string // "controller", "storage", "gateway", "coordinator" or "tiering"
	ID       int    // controller id or storage node id, from 1
	URL      string // Connect base URL (https:// in a secure cluster)
	AdminURL string // base URL of /healthz and /readyz
	DataDir  string
	// PeerURL is a controller's etcd peer URL; empty for other services.
	PeerURL string
	Proc    *Process
	// Proxy is the proxy other processes reach this storage node through
	// (ClusterConfig.StorageProxies); nil otherwise.
	Proxy *Proxy

	c *Cluster
}

// errPortInUse marks a start that failed because a chosen port was taken
// between choosing it and the process binding it.
var errPortInUse = errors.New("port already in use")

// StartCluster starts cfg.Controllers controllers, then cfg.StorageNodes
// storage nodes, and waits until every process answers /readyz and every
// storage node is registered alive. Ports are chosen free at start; when
// one is taken before a process binds it, the whole cluster is started
// again on new ports (up to three attempts).
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	cfg = cfg.withDefaults()
	bins := BuildServices(t)
	if cfg.Race {
		bins = BuildRaceServices(t)
	}
	var sec *clusterSecurity
	if cfg.Secure {
		var err error
		if sec, err = newClusterSecurity(filepath.Join(t.TempDir(), "tls")); err != nil {
			t.Fatalf("harness: secure cluster: %v", err)
		}
	}
	for attempt := 1; ; attempt++ {
		c, err := tryStartCluster(t, bins, cfg, sec)
		if err == nil {
			return c
		}
		if errors.Is(err, errPortInUse) && attempt < 3 {
			t.Logf("harness: attempt %d: %v; starting again on other ports", attempt, err)
			continue
		}
		t.Fatalf("harness: start cluster: %v", err)
	}
}

func tryStartCluster(t testing.TB, bins Binaries, cfg ClusterConfig, sec *clusterSecurity) (_ *Cluster, err error) {
	c := &Cluster{t: t, cfg: cfg, bins: bins, sec: sec}
	if c.http, err = httpClientAs(c.Admin()); err != nil {
		return nil, err
	}
	if c.ready, err = newReadyClient(sec); err != nil {
		return nil, err
	}
	t.Cleanup(c.http.CloseIdleConnections)
	t.Cleanup(c.ready.CloseIdleConnections)
	defer func() {
		if err != nil {
			for _, n := range slices.Concat(c.controllers, c.storage) {
				n.Proc.Kill()
			}
		}
	}()
	ports, err := FreePorts(t, 3*cfg.Controllers+2*cfg.StorageNodes)
	if err != nil {
		return nil, err
	}
	next := func() string { p := ports[0]; ports = ports[1:]; return "127.0.0.1:" + strconv.Itoa(p) }
	root := t.TempDir()

	var peers []string
	type ctlAddrs struct{ api, admin string }
	ctl := make([]ctlAddrs, cfg.Controllers)
	for i := range ctl {
		ctl[i] = ctlAddrs{api: next(), admin: next()}
		peers = append(peers, "http://"+next())
	}
	for i, a := range ctl {
		id := i + 1
		dir := filepath.Join(root, fmt.Sprintf("controller-%d", id))
		argv := launch.Controller{
			Process:            c.process(bins.Controller, a.api, a.admin, tlsconfig.RoleController, id),
			ID:                 id,
			DataDir:            dir,
			Peers:              peers,
			NodeSessionTimeout: cfg.NodeSessionTimeout,
			SessionTimeout:     cfg.ControllerSessionTimeout,
		}.Argv()
		n := &Node{Service: "controller", ID: id, URL: c.scheme() + a.api, AdminURL: c.scheme() + a.admin, DataDir: dir, PeerURL: peers[i], c: c}
		c.start(n, fmt.Sprintf("controller-%d", id), argv)
		c.controllers = append(c.controllers, n)
	}
	// A quorum forms only once a majority runs, so start them all before
	// waiting for any.
	for _, n := range c.controllers {
		if err := n.waitReady(cfg.ReadyTimeout); err != nil {
			return nil, err
		}
	}
	for i := range cfg.StorageNodes {
		id := i + 1
		c.storage = append(c.storage, c.startStorage(id, next(), next(), filepath.Join(root, fmt.Sprintf("storage-%d", id))))
	}
	for _, n := range c.storage {
		if err := n.waitReady(cfg.ReadyTimeout); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ReadyTimeout)
	defer cancel()
	if err := c.waitNodesAlive(ctx, cfg.StorageNodes); err != nil {
		return nil, err
	}
	return c, nil
}

// processFlags are the flags every process of the harness runs with:
// text logs (read by the tests' line matchers) and a short drain, so a
// stop does not wait long on a peer that is gone.
func processFlags(bin, api, admin string) launch.Process {
	return launch.Process{Bin: bin, Listen: api, AdminListen: admin, LogFormat: "text", DrainTimeout: 2 * time.Second}
}

// startStorage starts storage node id on the api and admin addresses with
// its data in dir, with the cluster's storage flags (ClusterConfig), and
// returns it without waiting for it.
func (c *Cluster) startStorage(id int, api, admin, dir string) *Node {
	spec := launch.Storage{
		Process:        c.process(c.bins.Storage, api, admin, tlsconfig.RoleStorage, id),
		NodeID:         id,
		DataDir:        dir,
		Controllers:    c.ControllerURLs(),
		ReplicaLagTime: c.cfg.ReplicaLagTime,
		Tiering:        c.cfg.Tiering,
		TierInterval:   c.cfg.TierInterval,
	}
	n := &Node{Service: "storage", ID: id, URL: c.scheme() + api, AdminURL: c.scheme() + admin, DataDir: dir, c: c}
	if c.cfg.StorageProxies {
		n.Proxy = StartProxy(c.t, api)
		spec.Advertise = c.scheme() + n.Proxy.Addr()
	}
	spec.Extra = slices.Clone(c.cfg.StorageArgs)
	if c.cfg.StorageArgsFor != nil {
		spec.Extra = append(spec.Extra, c.cfg.StorageArgsFor(id, api)...)
	}
	c.start(n, fmt.Sprintf("storage-%d", id), spec.Argv())
	return n
}

// start starts n's process with the cluster's Setup hook.
func (c *Cluster) start(n *Node, name string, argv []string, env ...string) {
	var setup func(*exec.Cmd)
	if c.cfg.Setup != nil {
		setup = func(cmd *exec.Cmd) { c.cfg.Setup(n, cmd) }
	}
	n.Proc = StartWith(c.t, name, argv, setup, append(slices.Clip(c.cfg.Env), env...)...)
}

// ControllerURLs lists the controllers' base URLs in id order.
func (c *Cluster) ControllerURLs() []string {
	var out []string
	for _, n := range c.controllers {
		out = append(out, n.URL)
	}
	return out
}

// H2CClient returns an HTTP client speaking HTTP/2 cleartext with prior
// knowledge only, as Strata's Connect servers expect from services. Bound
// calls with their context: it has no overall timeout. It reaches a plain
// cluster only; Cluster.HTTPClient reaches either.
func H2CClient() *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:   &protos,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	}}
}

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago and that no other test draws until t ends: it holds each port's
// reservation (testports.ReservePort, across test processes) and listens
// on it, holding every listener until all are chosen so no port repeats,
// then closes them. So a port a killed process frees stays its test's for
// the restart. A process that is not a test may still take one before it
// is used; callers start again on new ports when that happens.
//
// Ports are drawn at random from [testports.Last, testports.FreeLast),
// below the kernel's ephemeral range (its start is read from
// /proc/sys/net/ipv4/ip_local_port_range) when that leaves room: the
// kernel hands out ephemeral ports to every outgoing connection and every
// listener on port 0, on a busy machine many a second, and any of them
// could take a port in the seconds between choosing it and a process
// binding it. Below that range only a process asking for the very port
// can. That range is apart from the slots clusters hold
// (testports.Reserve), so a port drawn here is never one a held slot's
// cluster binds later. Elsewhere the kernel chooses (port 0).
func FreePorts(t testing.TB, n int) ([]int, error) {
	t.Helper()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	listen := func(port int) (int, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return 0, err
		}
		lns = append(lns, ln)
		return ln.Addr().(*net.TCPAddr).Port, nil
	}
	ports := make([]int, 0, n)
	lo, hi := quietPortRange()
	for tries := 0; len(ports) < n && hi-lo >= 1000 && tries < 100*n; tries++ {
		p := lo + rand.IntN(hi-lo)
		if !testports.ReservePort(t, p) {
			continue
		}
		if _, err := listen(p); err == nil {
			ports = append(ports, p)
		}
	}
	for len(ports) < n {
		p, err := listen(0)
		if err != nil {
			return nil, fmt.Errorf("harness: free port: %w", err)
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// quietPortRange is [testports.Last, testports.FreeLast) cut at the start
// of the ephemeral range, or an empty range when the ephemeral range
// cannot be read.
func quietPortRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0, 0
	}
	start, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, 0
	}
	return testports.Last, min(testports.FreeLast, start)
}

// Controller returns controller id (1-based).
func (c *Cluster) Controller(id int) *Node { return c.controllers[id-1] }

// Controllers returns every controller, by id.
func (c *Cluster) Controllers() []*Node { return slices.Clone(c.controllers) }

// Storage returns storage node id (1-based).
func (c *Cluster) Storage(id int) *Node { return c.storage[id-1] }

// StorageNodes returns every storage node, by id.
func (c *Cluster) StorageNodes() []*Node { return slices.Clone(c.storage) }

// Services returns the processes started in front of the cluster
// (StartGroupServices, StartGateway, StartTieredCluster), in start order.
func (c *Cluster) Services() []*Node { return slices.Clone(c.services) }

// Ctl returns a controller client for the lowest-id controller whose
// process is running. Any controller serves every RPC.
func (c *Cluster) Ctl() controllerv1connect.ControllerServiceClient {
	for _, n := range c.controllers {
		if !n.Proc.Exited() {
			return n.ControllerClient()
		}
	}
	c.t.Fatalf("harness: no controller is running")
	return nil
}

// ControllerClient is a Connect client for this controller.
func (n *Node) ControllerClient() controllerv1connect.ControllerServiceClient {
	return controllerv1connect.NewControllerServiceClient(n.c.http, n.URL)
}

// StorageClient is a Connect client for this storage node.
func (n *Node) StorageClient() storagev1connect.StorageServiceClient {
	return storagev1connect.NewStorageServiceClient(n.c.http, n.URL)
}

// StorageClientAt is a Connect client for the storage node at url.
func (c *Cluster) StorageClientAt(url string) storagev1connect.StorageServiceClient {
	return storagev1connect.NewStorageServiceClient(c.http, url)
}

// Name is the node's process name, like "storage-2".
func (n *Node) Name() string { return n.Proc.Name() }

// Kill sends SIGKILL and waits until the process is gone.
func (n *Node) Kill() { n.c.t.Logf("harness: SIGKILL %s", n.Name()); n.Proc.Kill() }

// Stop pauses the process with SIGSTOP and returns once it is stopped:
// from then on it answers nothing (see Process.Stop).
func (n *Node) Stop() {
	n.c.t.Helper()
	n.c.t.Logf("harness: SIGSTOP %s", n.Name())
	n.Proc.Stop()
}

// Continue resumes a process paused by Stop.
func (n *Node) Continue() { n.c.t.Logf("harness: SIGCONT %s", n.Name()); n.Proc.Continue() }

// Restart starts a killed process again with the same argv (same id, ports
// and data directory) and waits for its /readyz.
func (n *Node) Restart() {
	n.c.t.Helper()
	n.c.t.Logf("harness: restart %s", n.Name())
	n.Proc.Restart()
	n.WaitReady()
}

// Ready waits until the process answers /readyz with 200 and returns nil,
// or returns what happened instead: it exited, or ctx ended. For waits
// that must not fail the test from another goroutine (a fault schedule).
func (n *Node) Ready(ctx context.Context) error { return waitReady(ctx, n.c.ready, n.AdminURL, n.Proc) }

// WaitReady waits until the process answers /readyz with 200, failing the
// test with the tail of its stderr when it exits first or the cluster's
// ReadyTimeout passes.
func (n *Node) WaitReady() {
	n.c.t.Helper()
	if err := n.waitReady(n.c.cfg.ReadyTimeout); err != nil {
		n.c.t.Fatalf("harness: %v", err)
	}
}

func (n *Node) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return waitReady(ctx, n.c.ready, n.AdminURL, n.Proc)
}

// WaitReadyz waits until the process p, whose admin listener is adminURL,
// answers /readyz with 200, failing the test when it exits first or ctx
// ends. It is for processes a test starts itself with Start; a Node waits
// with WaitReady.
func WaitReadyz(ctx context.Context, t testing.TB, adminURL string, p *Process) {
	t.Helper()
	if err := waitReady(ctx, &http.Client{Timeout: 2 * time.Second}, adminURL, p); err != nil {
		t.Fatalf("harness: %v", err)
	}
}

// waitReady waits for p's /readyz (lib/launch), asked with hc. Its error
// names what happened: p exited (with errPortInUse when its stderr says a
// port was taken) or ctx ended, with how long it waited, the last answer
// and p's stderr tail.
func waitReady(ctx context.Context, hc *http.Client, adminURL string, p *Process) error {
	start := time.Now()
	errExited := errors.New("exited before it was ready")
	err := launch.WaitReady(ctx, hc, adminURL, func() error {
		if p.Exited() {
			return errExited
		}
		return nil
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errExited):
		tail := p.StderrTail()
		err := fmt.Errorf("%s exited before it was ready; stderr tail:\n%s", p.Name(), tail)
		if strings.Contains(tail, "address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return err
	default:
		last := "no answer"
		if nr, ok := errors.AsType[*launch.NotReadyError](err); ok {
			last = nr.Last
		}
		return fmt.Errorf("%s not ready after %v (last /readyz: %s); stderr tail:\n%s",
			p.Name(), time.Since(start).Round(time.Second), last, p.StderrTail())
	}
}

// waitNodesAlive waits until DescribeCluster shows want storage nodes alive.
func (c *Cluster) waitNodesAlive(ctx context.Context, want int) error {
	var last string
	for {
		resp, err := c.Ctl().DescribeCluster(ctx, connect.NewRequest(&controllerv1.DescribeClusterRequest{}))
		if err == nil {
			alive := 0
			for _, ns := range resp.Msg.GetNodes() {
				if ns.GetState() == controllerv1.NodeState_NODE_STATE_ALIVE {
					alive++
				}
			}
			if alive >= want {
				return nil
			}
			last = fmt.Sprintf("%d of %d storage nodes alive", alive, want)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("storage nodes not registered: %s", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CreateTopic creates a topic through a running controller and fails the
// test on error.
func (c *Cluster) CreateTopic(ctx context.Context, name string, partitions, replicationFactor int32, configs map[string]string) *controllerv1.TopicDescription {
	c.t.Helper()
	resp, err := c.Ctl().CreateTopic(ctx, connect.NewRequest(&controllerv1.CreateTopicRequest{
		Name: name, Partitions: partitions, ReplicationFactor: replicationFactor, Configs: configs,
	}))
	if err != nil {
		c.t.Fatalf("harness: create topic %s: %v", name, err)
	}
	return resp.Msg.GetTopic()
}

// Describe returns the controller's description of topic, or an error.
func (c *Cluster) Describe(ctx context.Context, topic string) (*controllerv1.TopicDescription, error) {
	resp, err := c.Ctl().DescribeTopics(ctx, connect.NewRequest(&controllerv1.DescribeTopicsRequest{Names: []string{topic}}))
	if err != nil {
		return nil, err
	}
	if len(resp.Msg.GetTopics()) != 1 {
		return nil, fmt.Errorf("describe %s: %d topics in answer", topic, len(resp.Msg.GetTopics()))
	}
	return resp.Msg.GetTopics()[0], nil
}

// Partition returns the controller's record of one partition.
func (c *Cluster) Partition(ctx context.Context, topic string, partition int32) (*commonv1.PartitionMetadata, error) {
	d, err := c.Describe(ctx, topic)
	if err != nil {
		return nil, err
	}
	for _, p := range d.GetPartitions() {
		if p.GetPartition() == partition {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%s has no partition %d", topic, partition)
}

// WaitPartition polls DescribeTopics until cond holds for the partition and
// returns that record; it fails the test, naming what, with the last record
// seen when ctx ends first.
func (c *Cluster) WaitPartition(ctx context.Context, topic string, partition int32, what string, cond func(*commonv1.PartitionMetadata) bool) *commonv1.PartitionMetadata {
	c.t.Helper()
	var last string
	for {
		p, err := c.Partition(ctx, topic, partition)
		if err == nil && cond(p) {
			return p
		}
		if err != nil {
			last = err.Error()
		} else {
			last = FormatPartition(p)
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("harness: %s-%d: waiting for %s: %v; last seen %s", topic, partition, what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FullISR reports whether p has a leader and every replica in its ISR.
func FullISR(p *commonv1.PartitionMetadata) bool {
	if p.GetLeaderId() < 0 || len(p.GetIsr()) != len(p.GetReplicas()) {
		return false
	}
	for _, r := range p.GetReplicas() {
		if !slices.Contains(p.GetIsr(), r) {
			return false
		}
	}
	return true
}

// WaitFullISR waits until every partition of topic has a leader and a full
// ISR (see FullISR).
func (c *Cluster) WaitFullISR(ctx context.Context, topic string, partitions int32) {
	c.t.Helper()
	for p := range partitions {
		c.WaitPartition(ctx, topic, p, "a leader and full ISR", FullISR)
	}
}

// Leader returns the storage node leading a partition and its leader
// epoch, waiting until the partition has a leader.
func (c *Cluster) Leader(ctx context.Context, topic string, partition int32) (*Node, int32) {
	c.t.Helper()
	p := c.WaitPartition(ctx, topic, partition, "a leader", func(p *commonv1.PartitionMetadata) bool { return p.GetLeaderId() >= 0 })
	return c.Storage(int(p.GetLeaderId())), p.GetLeaderEpoch()
}

// FormatPartition renders a partition record for messages.
func FormatPartition(p *commonv1.PartitionMetadata) string {
	return fmt.Sprintf("{leader %d epoch %d partition-epoch %d replicas %v isr %v offline %v}",
		p.GetLeaderId(), p.GetLeaderEpoch(), p.GetPartitionEpoch(), p.GetReplicas(), p.GetIsr(), p.GetOfflineReplicas())
}
