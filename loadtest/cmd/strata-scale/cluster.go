package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// devCluster is a throwaway `strata dev` cluster this program started.
type devCluster struct {
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when strata dev has exited
	file clusterFile
	keep bool
}

// clusterFile is the part of cluster.json read here (field names are the
// contract in docs/design/dev-cluster.md).
type clusterFile struct {
	Gateway     string           `json:"gateway"`
	Controllers []string         `json:"controllers"`
	Ready       bool             `json:"ready"`
	Processes   []clusterProcess `json:"processes"`
}

type clusterProcess struct {
	Service      string `json:"service"`
	ID           int    `json:"id"`
	PID          int    `json:"pid"`
	Running      bool   `json:"running"`
	AdminAddress string `json:"admin_address"`
	Log          string `json:"log"`
	DataDir      string `json:"data_dir"`
}

// name is how a process is labelled in the table: storage-1, gateway-1.
func (p clusterProcess) name() string { return p.Service + "-" + strconv.Itoa(p.ID) }

// startCluster starts `strata dev --storage-nodes 3` in a new temporary
// directory and returns once cluster.json says every process is ready and
// `strata cluster status` reports the cluster healthy.
func startCluster(ctx context.Context, o options) (*devCluster, error) {
	dir, err := os.MkdirTemp("", "strata-scale-")
	if err != nil {
		return nil, err
	}
	out, err := os.Create(filepath.Join(dir, "dev.out"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer out.Close()
	c := &devCluster{dir: dir, done: make(chan struct{}), keep: o.keepDir}
	c.cmd = exec.Command(filepath.Join(o.binDir, "strata"), "dev", "--dir", dir,
		"--base-port", strconv.Itoa(o.basePort), "--storage-nodes", "3")
	c.cmd.Stdout, c.cmd.Stderr = out, out
	if err := c.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { c.cmd.Wait(); close(c.done) }()

	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
		if err == nil && json.Unmarshal(b, &c.file) == nil && c.file.Ready {
			break
		}
		select {
		case <-c.done:
			dev, _ := os.ReadFile(filepath.Join(dir, "dev.out"))
			c.stop()
			return nil, fmt.Errorf("strata dev exited before the cluster was ready:\n%s", dev)
		case <-ctx.Done():
			c.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("the cluster in %s was not ready after 2 minutes", dir)
		}
	}
	st := exec.CommandContext(ctx, filepath.Join(o.binDir, "strata"), "--gateway", c.file.Gateway,
		"cluster", "status", "--exit-when-healthy", "--timeout", "90s")
	if b, err := st.CombinedOutput(); err != nil {
		c.stop()
		return nil, fmt.Errorf("the cluster did not become healthy: %v\n%s", err, b)
	}
	return c, nil
}

// process returns the cluster.json entry of one process.
func (c *devCluster) process(service string, id int) (clusterProcess, bool) {
	for _, p := range c.file.Processes {
		if p.Service == service && p.ID == id {
			return p, true
		}
	}
	return clusterProcess{}, false
}

// storageNodes returns the storage nodes' entries in id order.
func (c *devCluster) storageNodes() []clusterProcess {
	var out []clusterProcess
	for id := 1; ; id++ {
		p, ok := c.process("storage", id)
		if !ok {
			return out
		}
		out = append(out, p)
	}
}

// stop interrupts strata dev, which stops its children, waits for it and
// deletes the directory unless asked to keep it. Safe to call twice.
func (c *devCluster) stop() {
	if c.cmd.Process != nil {
		c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			c.cmd.Process.Kill()
			<-c.done
		}
	}
	if !c.keep {
		os.RemoveAll(c.dir)
	}
}
