package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-mq/strata/tests/harness"
)

// devCluster is what a test reads from cluster.json.
type devCluster struct {
	Gateway   string `json:"gateway"`
	Processes []struct {
		Service string   `json:"service"`
		ID      int      `json:"id"`
		Pid     int      `json:"pid"`
		Argv    []string `json:"argv"`
	} `json:"processes"`
}

// TestDevClusterQuickstart walks the README's first five minutes with the
// real binaries, as a user would: `strata dev`, then the CLI. It creates a
// 12-partition topic with 3 replicas, produces keyed records with acks=all
// through the CLI while the leader of the busiest partition is killed with
// SIGKILL, restarts that node from the argv in cluster.json, and reads the
// topic back. Every record the CLI acknowledged must be read back, at the
// partition and offset it was acknowledged at, and records of one key must
// come back in the order they were produced.
func TestDevClusterQuickstart(t *testing.T) {
	t.Parallel()
	// StartDev stops strata dev with SIGINT and waits for it before the
	// test's directory is removed: a killed strata dev leaves its children
	// stopping on their own, still writing there.
	d := harness.StartDev(t)
	strata, dir, base := d.Strata, d.Dir, d.BasePort
	gateway := fmt.Sprintf("http://127.0.0.1:%d", base)
	cli := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(strata, append([]string{"--gateway", gateway}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			return out.String(), fmt.Errorf("strata %s: %v: %s", strings.Join(args, " "), err, errb.String())
		}
		return out.String(), nil
	}

	var cj devCluster
	raw, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cj); err != nil {
		t.Fatalf("cluster.json: %v", err)
	}
	if cj.Gateway != gateway {
		t.Fatalf("cluster.json gateway %q, want %q", cj.Gateway, gateway)
	}
	// etcd holds the cluster's state: only the controller may reach it,
	// over its owner-only socket, even in a plain dev cluster.
	checkEtcdClientSockets(t, d, 1)
	if _, err := cli("", "topic", "create", "orders", "-p", "12", "-r", "3"); err != nil {
		t.Fatal(err)
	}

	// Produce in rounds through the CLI; kill a storage node after the
	// first round and restart it after the second.
	const keys = 24
	type ack struct {
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Key       string `json:"key"`
	}
	acked := map[string]ack{} // value -> where it was acknowledged
	var victim int
	for round := 0; round < 3; round++ {
		var in strings.Builder
		for i := 0; i < 200; i++ {
			n := round*200 + i
			fmt.Fprintf(&in, "key-%d\tv-%d-%06d\n", n%keys, n%keys, n)
		}
		out, err := cli(in.String(), "produce", "orders", "-f", `%k\t%v\n`, "--acks", "all", "--output", "json")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 200 {
			t.Fatalf("round %d: %d delivery reports, want 200", round, len(lines))
		}
		for i, l := range lines {
			var a ack
			if err := json.Unmarshal([]byte(l), &a); err != nil {
				t.Fatalf("delivery report %q: %v", l, err)
			}
			n := round*200 + i
			acked[fmt.Sprintf("v-%d-%06d", n%keys, n)] = a
		}
		switch round {
		case 0:
			victim = 1 + rand.Intn(3)
			for _, p := range cj.Processes {
				if p.Service == "storage" && p.ID == victim {
					t.Logf("killing storage-%d (pid %d)", victim, p.Pid)
					if err := syscallKill(p.Pid); err != nil {
						t.Fatal(err)
					}
				}
			}
		case 1:
			for _, p := range cj.Processes {
				if p.Service == "storage" && p.ID == victim {
					harness.Start(t, fmt.Sprintf("storage-%d-again", victim), p.Argv)
				}
			}
		}
	}

	// Wait until the cluster is whole again, then read everything back.
	if _, err := cli("", "cluster", "status", "--exit-when-healthy", "--timeout", "60s"); err != nil {
		t.Fatal(err)
	}
	out, err := cli("", "consume", "orders", "-o", "start", "-e", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Key       string `json:"key"`
		Value     string `json:"value"`
	}
	seen := map[string]rec{}
	lastSeq := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r rec
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("consumed line %q: %v", sc.Text(), err)
		}
		var k, seq int
		if _, err := fmt.Sscanf(r.Value, "v-%d-%d", &k, &seq); err != nil {
			t.Fatalf("unexpected value %q", r.Value)
		}
		if prev, ok := lastSeq[r.Key]; ok && seq <= prev {
			t.Errorf("key %s: value %d read after %d: per-key order broken", r.Key, seq, prev)
		}
		lastSeq[r.Key] = seq
		seen[r.Value] = r
	}
	for v, a := range acked {
		r, ok := seen[v]
		if !ok {
			t.Errorf("acknowledged record %s (partition %d offset %d) was not read back", v, a.Partition, a.Offset)
			continue
		}
		if r.Partition != a.Partition || r.Offset != a.Offset || r.Key != a.Key {
			t.Errorf("record %s acknowledged at %d/%d key %s, read at %d/%d key %s", v, a.Partition, a.Offset, a.Key, r.Partition, r.Offset, r.Key)
		}
	}
	if len(seen) < len(acked) {
		t.Fatalf("read %d distinct records, %d were acknowledged", len(seen), len(acked))
	}

	// The CLI's errors stay one plain line.
	if _, err := cli("", "consume", "no-such-topic", "-e"); err == nil || !strings.Contains(err.Error(), `strata: topic "no-such-topic" does not exist`) {
		t.Errorf("unknown topic: got %v", err)
	}
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
