package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/metaview"
)

// measureSize starts a cluster, gives it n partitions and measures it.
// The row holds whatever was measured before an error.
func measureSize(ctx context.Context, o options, n int, logf func(string, ...any)) (*Row, error) {
	started := time.Now()
	c, err := startCluster(ctx, o)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	logf("cluster healthy after %s in %s", time.Since(started).Round(time.Second), c.dir)
	row := &Row{Partitions: n}

	ctrl := controllerv1connect.NewControllerServiceClient(http.DefaultClient, c.file.Controllers[0])
	cache := metaview.NewCache()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go metaview.Watch(wctx, cache, metaview.WatchConfig{
		Controllers: []controllerv1connect.ControllerServiceClient{ctrl},
		NodeID:      metaview.NotANode,
	})

	// Produce first, on a topic of n partitions that strata-load makes and
	// deletes, so the cluster never holds more than n partitions (at
	// 10,000 a second topic beside the measured ones would double every
	// storage node's open files).
	storage := c.storageNodes()
	if o.duration > 0 {
		mbps, cpu, err := produce(ctx, o, c, n)
		if err != nil {
			row.ProduceError = err.Error()
			logf("produce: %v", err)
		} else {
			row.ProduceMBps, row.ProduceCPUSecondsPerGB = mbps, cpu
			logf("produce over %d partitions: %.1f MB/s", n, mbps)
		}
		// The measures below start once the load topic is gone from the
		// metadata and from every storage node.
		if err := waitForEvery(ctx, o.createTimeout, 500*time.Millisecond, func() (bool, string) {
			for name := range cache.Load().Topics {
				if strings.HasPrefix(name, "load-") {
					return false, name + " still in the metadata"
				}
			}
			for _, p := range storage {
				m, err := scrape(ctx, p.AdminAddress)
				if err != nil {
					return false, err.Error()
				}
				if hostsLoadTopic(m) {
					return false, p.name() + " still hosts the load topic"
				}
			}
			return true, ""
		}); err != nil {
			return row, fmt.Errorf("the load topic's deletion: %w", err)
		}
	}

	// Create: topics of perTopic partitions, one after the other.
	gw := gatewayv1connect.NewGatewayServiceClient(http.DefaultClient, c.file.Gateway)
	var topics []string
	t0 := time.Now()
	for left, i := n, 0; left > 0; i++ {
		p := min(left, o.perTopic)
		name := fmt.Sprintf("scale-%05d", i)
		if _, err := gw.CreateTopic(ctx, connect.NewRequest(&gatewayv1.CreateTopicRequest{
			Name: name, Partitions: int32(p), ReplicationFactor: 3,
		})); err != nil {
			return row, fmt.Errorf("create topic %s (%d of %d partitions made): %w", name, n-left, n, err)
		}
		topics = append(topics, name)
		left -= p
	}
	row.Topics = len(topics)
	createCalls := time.Since(t0)
	if err := waitFor(ctx, o.createTimeout, func() (bool, string) { return allReady(cache.Load(), topics, n) }); err != nil {
		return row, fmt.Errorf("topics not all led and in sync: %w", err)
	}
	row.CreateMetadataSeconds = round3(time.Since(t0).Seconds())
	// The controller marks a new partition led and in sync at once; the
	// storage nodes' own account (every replica opened, every leader
	// reporting three in its ISR) is what says the cluster has them.
	var overRSS error
	if err := waitForEvery(ctx, o.createTimeout, 500*time.Millisecond, func() (bool, string) {
		ok, note := storageReady(ctx, storage, cache.Load(), topics, n)
		if rss := clusterRSSMB(c); o.maxRSSMB > 0 && rss > float64(o.maxRSSMB) {
			overRSS = fmt.Errorf("after %.0f s, %s; the cluster's resident memory, %.0f MB, passed --max-rss-mb %d",
				time.Since(t0).Seconds(), note, rss, o.maxRSSMB)
			return true, ""
		}
		return ok, note
	}); err != nil {
		return row, fmt.Errorf("storage nodes do not all host and lead the topics: %w", err)
	}
	if overRSS != nil {
		if o.profileDir != "" {
			dir := filepath.Join(o.profileDir, strconv.Itoa(n))
			if err := os.MkdirAll(dir, 0o755); err == nil {
				for _, p := range storage {
					fetchTo(ctx, "http://"+p.AdminAddress+"/debug/pprof/heap", filepath.Join(dir, p.name()+".heap.pprof"))
					fetchTo(ctx, "http://"+p.AdminAddress+"/debug/pprof/goroutine?debug=1", filepath.Join(dir, p.name()+".goroutines.txt"))
				}
			}
		}
		return row, fmt.Errorf("stopped creating: %w", overRSS)
	}
	row.CreateSeconds = round3(time.Since(t0).Seconds())
	logf("%d topics, %d partitions: CreateTopic calls took %.2f s, led and in sync in the metadata after %.2f s, on the storage nodes after %.2f s",
		len(topics), n, createCalls.Seconds(), row.CreateMetadataSeconds, row.CreateSeconds)

	// Idle.
	logf("settling %s, then measuring idle for %s", o.settle, o.idle)
	if err := sleep(ctx, o.settle); err != nil {
		return row, err
	}
	before := map[string]time.Duration{}
	for _, p := range c.file.Processes {
		before[p.name()], _ = procCPU(p.PID)
	}
	if err := sleep(ctx, o.idle); err != nil {
		return row, err
	}
	for _, p := range c.file.Processes {
		after, err := procCPU(p.PID)
		if err != nil {
			return row, fmt.Errorf("%s: %w", p.name(), err)
		}
		ps := ProcStat{Name: p.name(), CPUPercent: round3(100 * (after - before[p.name()]).Seconds() / o.idle.Seconds())}
		ps.RSSMB, _ = procRSSMB(p.PID)
		ps.OpenFiles, _ = procFDs(p.PID)
		ps.Goroutines, _ = goroutines(ctx, p.AdminAddress)
		row.Processes = append(row.Processes, ps)
		row.ClusterCPUPercent += ps.CPUPercent
		row.ClusterRSSMB += ps.RSSMB
		row.ClusterOpenFiles += ps.OpenFiles
		row.ClusterGoroutines += ps.Goroutines
	}
	row.ClusterCPUPercent, row.ClusterRSSMB = round3(row.ClusterCPUPercent), round3(row.ClusterRSSMB)
	if m, err := scrape(ctx, storage[0].AdminAddress); err == nil {
		row.StorageMetricsBytes = len(m)
	}
	logf("idle: cluster %.1f %% of a core, %.0f MB resident, %d open files, %d goroutines",
		row.ClusterCPUPercent, row.ClusterRSSMB, row.ClusterOpenFiles, row.ClusterGoroutines)
	if o.profileDir != "" {
		if err := profileIdle(ctx, c, filepath.Join(o.profileDir, strconv.Itoa(n))); err != nil {
			logf("profile: %v", err)
		}
	}

	// Metadata: one full snapshot as a new watcher receives it.
	if row.SnapshotBytes, err = snapshotBytes(ctx, ctrl); err != nil {
		return row, fmt.Errorf("metadata snapshot: %w", err)
	}
	logf("metadata snapshot: %d bytes", row.SnapshotBytes)

	// Failover: SIGKILL storage node 1.
	if err := failover(ctx, o, c, cache, row, logf); err != nil {
		return row, err
	}
	return row, nil
}

// allReady says whether every partition of topics is led and has its
// whole replica set (3) in the ISR, and if not, how far it is.
func allReady(v *metaview.View, topics []string, want int) (bool, string) {
	if v == nil {
		return false, "no metadata yet"
	}
	ready := 0
	for _, name := range topics {
		t := v.Topics[name]
		if t == nil {
			continue
		}
		for _, p := range t.GetPartitions() {
			if p.GetLeaderId() >= 0 && len(p.GetReplicas()) == 3 && len(p.GetIsr()) == 3 {
				ready++
			}
		}
	}
	return ready == want, fmt.Sprintf("%d of %d partitions led and in sync", ready, want)
}

// failover kills storage node 1 and times the election of new leaders
// for every partition it led.
func failover(ctx context.Context, o options, c *devCluster, cache *metaview.Cache, row *Row, logf func(string, ...any)) error {
	const victim = 1
	p, ok := c.process("storage", victim)
	if !ok {
		return fmt.Errorf("cluster.json lists no storage-%d", victim)
	}
	type tp struct {
		topic string
		p     int32
	}
	var led []tp
	for name, t := range cache.Load().Topics {
		for _, pm := range t.GetPartitions() {
			if pm.GetLeaderId() == victim {
				led = append(led, tp{name, pm.GetPartition()})
			}
		}
	}
	row.FailoverPartitions = len(led)
	logf("killing storage-%d (pid %d), leader of %d partitions", victim, p.PID, len(led))
	t0 := time.Now()
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill storage-%d: %w", victim, err)
	}
	err := waitFor(ctx, o.failTimeout, func() (bool, string) {
		v := cache.Load()
		moved := 0
		for _, x := range led {
			if pm := v.Partition(x.topic, x.p); pm != nil && pm.GetLeaderId() >= 0 && pm.GetLeaderId() != victim {
				moved++
			}
		}
		return moved == len(led), fmt.Sprintf("%d of %d partitions have a new leader", moved, len(led))
	})
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	row.FailoverSeconds = round3(time.Since(t0).Seconds())
	logf("every partition storage-%d led has a new leader after %.2f s", victim, row.FailoverSeconds)
	return nil
}

// waitFor polls done every 50 ms until it reports true, ctx ends or
// timeout passes; the error carries done's last progress note.
func waitFor(ctx context.Context, timeout time.Duration, done func() (bool, string)) error {
	return waitForEvery(ctx, timeout, 50*time.Millisecond, done)
}

// waitForEvery is waitFor polling every interval.
func waitForEvery(ctx context.Context, timeout, interval time.Duration, done func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, note := done()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %s", timeout, note)
		}
		if err := sleep(ctx, interval); err != nil {
			return err
		}
	}
}

// storageReady scrapes every storage node's /metrics and says whether,
// over the topics this program made (scale-*), the nodes host 3n replicas
// (strata_storage_log_end_offset, one series per hosted replica) and their
// leaders report n partitions with three in the ISR
// (strata_storage_partition_isr_size, leaders only).
//
// The OpenTelemetry SDK keeps at most 2000 series per instrument and
// folds the rest into one otel_metric_overflow series, so a node hosting
// more replicas than that cannot report them all. Then the replicas are
// counted from the node's data directory (one directory per hosted
// replica, replica.Dir) and the ISR is the controller's metadata, which a
// leader shrinks when a follower falls behind.
func storageReady(ctx context.Context, storage []clusterProcess, v *metaview.View, topics []string, n int) (bool, string) {
	hosted, full, overflow := 0, 0, false
	for _, p := range storage {
		m, err := scrape(ctx, p.AdminAddress)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", p.name(), err)
		}
		if bytes.Contains(m, []byte(`strata_storage_log_end_offset{otel_metric_overflow="true"`)) {
			overflow = true
			break
		}
		for _, line := range strings.Split(string(m), "\n") {
			if !strings.Contains(line, `topic="scale-`) {
				continue
			}
			switch {
			case strings.HasPrefix(line, "strata_storage_log_end_offset{"):
				hosted++
			case strings.HasPrefix(line, "strata_storage_partition_isr_size{") && strings.HasSuffix(line, "} 3"):
				full++
			}
		}
	}
	if overflow {
		hosted = 0
		for _, p := range storage {
			es, err := os.ReadDir(p.DataDir)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", p.name(), err)
			}
			for _, e := range es {
				if e.IsDir() && strings.HasPrefix(e.Name(), "scale-") {
					hosted++
				}
			}
		}
		ok, note := allReady(v, topics, n)
		return ok && hosted == 3*n, fmt.Sprintf("%d of %d replica directories (the storage metrics overflowed), %s", hosted, 3*n, note)
	}
	return hosted == 3*n && full == n, fmt.Sprintf("%d of %d replicas hosted, %d of %d leaders with a whole ISR", hosted, 3*n, full, n)
}

// hostsLoadTopic says whether a storage node's /metrics shows a replica
// of strata-load's topic (the per-topic counters outlive the topic; the
// per-replica gauges do not).
func hostsLoadTopic(metrics []byte) bool {
	for _, line := range strings.Split(string(metrics), "\n") {
		if strings.HasPrefix(line, "strata_storage_log_end_offset{") && strings.Contains(line, `topic="load-`) {
			return true
		}
	}
	return false
}

// scrape returns the body of a process's /metrics.
func scrape(ctx context.Context, admin string) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return io.ReadAll(resp.Body)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// snapshotBytes opens a WatchMetadata stream as a non-node watcher and
// returns the encoded size of its first message, the full snapshot.
func snapshotBytes(ctx context.Context, ctrl controllerv1connect.ControllerServiceClient) (int, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := ctrl.WatchMetadata(sctx, connect.NewRequest(&controllerv1.WatchMetadataRequest{NodeId: metaview.NotANode}))
	if err != nil {
		return 0, err
	}
	defer st.Close()
	if !st.Receive() {
		return 0, fmt.Errorf("stream ended before the snapshot: %v", st.Err())
	}
	if st.Msg().GetSnapshot() == nil {
		return 0, fmt.Errorf("first message is not a snapshot")
	}
	return proto.Size(st.Msg()), nil
}

// produce runs strata-load's closed loop on a new topic of n partitions,
// RF=3 acks=all, keys spread over every partition, and returns its MB/s
// and the cluster's CPU seconds per GB.
func produce(ctx context.Context, o options, c *devCluster, n int) (float64, float64, error) {
	keys := max(1000, 4*n)
	args := []string{"--gateway", c.file.Gateway, "--cluster-json", filepath.Join(c.dir, "cluster.json"),
		"--partitions", strconv.Itoa(n), "--keys", strconv.Itoa(keys), "--durability", "rf3-all",
		"--modes", "max", "--records", "0", "--duration", o.duration.String(),
		"--inflight", strconv.Itoa(o.inflight), "--output", "json"}
	cmd := exec.CommandContext(ctx, filepath.Join(o.binDir, "strata-load"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("strata-load: %v: %s", err, lastLines(stderr.String(), 5))
	}
	var rep struct {
		Results []struct {
			MBps float64 `json:"mb_per_s"`
			CPU  *struct {
				ClusterPerGB float64 `json:"cluster_seconds_per_gb"`
			} `json:"cpu"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Results) == 0 {
		return 0, 0, fmt.Errorf("strata-load's report: %v", err)
	}
	r := rep.Results[0]
	var cpu float64
	if r.CPU != nil {
		cpu = r.CPU.ClusterPerGB
	}
	return r.MBps, cpu, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// profileIdle writes a 10 s CPU profile, a goroutine dump (debug=1) and
// a heap profile of every process into dir.
func profileIdle(ctx context.Context, c *devCluster, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(c.file.Processes))
	for i, p := range c.file.Processes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := "http://" + p.AdminAddress + "/debug/pprof/"
			errs[i] = fetchTo(ctx, base+"profile?seconds=10", filepath.Join(dir, p.name()+".cpu.pprof"))
			if errs[i] == nil {
				errs[i] = fetchTo(ctx, base+"goroutine?debug=1", filepath.Join(dir, p.name()+".goroutines.txt"))
			}
			if errs[i] == nil {
				errs[i] = fetchTo(ctx, base+"heap", filepath.Join(dir, p.name()+".heap.pprof"))
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func fetchTo(ctx context.Context, url, path string) error {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// goroutines reads the total from the first line of a process's
// /debug/pprof/goroutine?debug=1 ("goroutine profile: total N").
func goroutines(ctx context.Context, admin string) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+admin+"/debug/pprof/goroutine?debug=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return 0, err
	}
	const prefix = "goroutine profile: total "
	if !strings.HasPrefix(line, prefix) {
		return 0, fmt.Errorf("unexpected goroutine profile %q", line)
	}
	return strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, prefix)))
}

// clusterRSSMB is the resident memory of every process of c together.
func clusterRSSMB(c *devCluster) float64 {
	total := 0.0
	for _, p := range c.file.Processes {
		mb, _ := procRSSMB(p.PID)
		total += mb
	}
	return total
}

// procRSSMB reads VmRSS from /proc/PID/status, in MB (1e6 bytes).
func procRSSMB(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	return parseVmRSS(b)
}

func parseVmRSS(status []byte) (float64, error) {
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "123456 kB"
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("malformed VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return round3(float64(kb) * 1024 / 1e6), nil
		}
	}
	return 0, fmt.Errorf("no VmRSS line")
}

// procFDs counts the entries of /proc/PID/fd: files, sockets, pipes.
func procFDs(pid int) (int, error) {
	es, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(es), err
}

// procCPU returns the user plus system CPU time a process has used, from
// fields 14 and 15 of /proc/PID/stat (counted after the command name's
// last ')', since the name may hold spaces) in clock ticks of 10 ms, the
// value of every common Linux build.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc stat: %d fields", len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed /proc stat")
	}
	return time.Duration(u+s) * 10 * time.Millisecond, nil
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
