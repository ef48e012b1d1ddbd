//go:build unix

package devcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scaleRun runs `strata dev scale` with args and returns its exit code,
// stdout and stderr.
func scaleRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := Main(ctx, append([]string{"scale"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func storageEntries(f *clusterFile) []processEntry {
	var out []processEntry
	for _, p := range f.Processes {
		if p.Service == serviceStorage {
			out = append(out, p)
		}
	}
	return out
}

// strata dev scale hands new storage nodes to the running strata dev over
// its control socket: they start with the same argv shape and ports as
// the others, are supervised and listed in cluster.json; scaling down
// stops the highest ids and drops them, refusing while it cannot tell that
// they hold nothing unless --force.
func TestDevScale(t *testing.T) {
	fakeBinDir(t)
	argvDir := t.TempDir()
	t.Setenv(fakeArgvDirEnv, argvDir)
	base := freeBasePort(t, 1, 4)
	r := startDev(t, "--storage-nodes", "1", "--base-port", strconv.Itoa(base))
	var f *clusterFile
	waitFor(t, 30*time.Second, "cluster.json with ready true", func() bool {
		var ok bool
		f, ok = readClusterFile(t, r.dir)
		return ok && f.Ready
	})
	if f.Control == "" {
		t.Fatal("cluster.json names no control socket")
	}

	code, out, errs := scaleRun(t, "--dir", r.dir, "--storage-nodes", "3")
	if code != 0 {
		t.Fatalf("scale to 3: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, want := range []string{"storage-2", "storage-3", "ready after", "strata dev: 3 storage node(s) running"} {
		if !strings.Contains(out, want) {
			t.Errorf("scale output lacks %q:\n%s", want, out)
		}
	}
	f, _ = readClusterFile(t, r.dir)
	st := storageEntries(f)
	if len(st) != 3 {
		t.Fatalf("cluster.json lists %d storage nodes after scaling to 3: %+v", len(st), st)
	}
	ref := st[0].Argv
	for _, p := range st {
		if !p.Running || !alive(p.PID) {
			t.Errorf("storage-%d not running (pid %d)", p.ID, p.PID)
		}
		if want := fmt.Sprintf("127.0.0.1:%d", base+10+p.ID); p.Address != want {
			t.Errorf("storage-%d at %s, want %s", p.ID, p.Address, want)
		}
		// The same argv shape as storage-1's, with this node's id, ports
		// and data directory.
		swap := strings.NewReplacer(
			strconv.Itoa(base+11), strconv.Itoa(base+10+p.ID), strconv.Itoa(base+111), strconv.Itoa(base+110+p.ID),
			strconv.Itoa(base+41), strconv.Itoa(base+40+p.ID),
			"storage-1", fmt.Sprintf("storage-%d", p.ID))
		want := make([]string, len(ref))
		for i, a := range ref {
			want[i] = swap.Replace(a)
		}
		if i := slices.Index(want, "--node-id"); i >= 0 {
			want[i+1] = strconv.Itoa(p.ID)
		}
		if !slices.Equal(p.Argv, want) {
			t.Errorf("storage-%d argv %q, want %q", p.ID, p.Argv, want)
		}
		b, err := os.ReadFile(filepath.Join(argvDir, fmt.Sprintf("%d.json", p.PID)))
		var got []string
		if err != nil || json.Unmarshal(b, &got) != nil || !slices.Equal(got, p.Argv) {
			t.Errorf("storage-%d: the process ran %q, cluster.json says %q (%v)", p.ID, got, p.Argv, err)
		}
	}
	if resp, err := http.Get("http://" + st[2].AdminAddress + "/readyz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("storage-3 /readyz: %v", err)
	} else {
		resp.Body.Close()
	}

	// Down: the fake gateway cannot say what storage-3 holds, so without
	// --force nothing stops.
	code, _, errs = scaleRun(t, "--dir", r.dir, "--storage-nodes", "2")
	if code != 1 || !strings.HasPrefix(errs, "strata dev scale: cannot ask the gateway which nodes hold replicas") || strings.Count(errs, "\n") != 1 {
		t.Fatalf("scale down without --force: exit %d, stderr %q", code, errs)
	}
	if !alive(st[2].PID) {
		t.Fatal("storage-3 stopped although the scale down was refused")
	}
	code, out, errs = scaleRun(t, "--dir", r.dir, "--storage-nodes", "2", "--force")
	if code != 0 || !strings.Contains(out, "storage-3     stopped (exit status 0)") {
		t.Fatalf("scale down: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	waitFor(t, 10*time.Second, "storage-3 gone", func() bool { return !alive(st[2].PID) })
	f, _ = readClusterFile(t, r.dir)
	if st := storageEntries(f); len(st) != 2 {
		t.Fatalf("cluster.json lists %d storage nodes after scaling to 2", len(st))
	}
	if strings.Contains(r.stderr.String(), "storage-3 exited") {
		t.Errorf("a node stopped on purpose was reported as a crash: %s", r.stderr)
	}

	// Up again: storage-3 comes back, one entry.
	if code, out, errs := scaleRun(t, "--dir", r.dir, "--storage-nodes", "3"); code != 0 {
		t.Fatalf("scale up again: exit %d\n%s\n%s", code, out, errs)
	}
	f, _ = readClusterFile(t, r.dir)
	if st := storageEntries(f); len(st) != 3 || !st[2].Running || st[2].PID == 0 || !alive(st[2].PID) {
		t.Fatalf("after scaling up again: %+v", st)
	}

	for _, args := range [][]string{{"--dir", r.dir, "--storage-nodes", "0"}, {"--dir", r.dir, "--storage-nodes", "10"}, {"--dir", r.dir}} {
		if code, _, errs := scaleRun(t, args...); code != 2 || !strings.Contains(errs, "--storage-nodes") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
	if code, _, errs := scaleRun(t, "--dir", t.TempDir(), "--storage-nodes", "2"); code != 1 || !strings.Contains(errs, "no strata dev runs in") {
		t.Errorf("scale without a running strata dev: exit %d, stderr %q", code, errs)
	}

	r.cancel()
	if code := r.wait(t); code != 0 {
		t.Errorf("exit code %d after cancel; stderr:\n%s", code, r.stderr)
	}
	f, _ = readClusterFile(t, r.dir)
	if f.Control != "" {
		t.Errorf("a stopped cluster's cluster.json still names the control socket %s", f.Control)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "control.sock")); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
}
