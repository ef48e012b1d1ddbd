package devcluster

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func sampleClusterFile(dir string, pid int) *clusterFile {
	return &clusterFile{
		Dir: dir, BasePort: 9092, Gateway: "http://127.0.0.1:9092", Gateways: []string{"http://127.0.0.1:9092"},
		Controllers: []string{"http://127.0.0.1:9093"}, PID: 42, Ready: true,
		Processes: []processEntry{{
			Service: "storage", ID: 1, PID: pid, Running: true,
			Address: "127.0.0.1:9103", URL: "http://127.0.0.1:9103", AdminAddress: "127.0.0.1:9203",
			DataDir: dir + "/storage-1", Argv: []string{"/bin/strata-storage", "--node-id", "1"}, Log: dir + "/logs/storage-1.log",
		}},
	}
}

// TestClusterFileShape pins the JSON names tests outside the module read.
func TestClusterFileShape(t *testing.T) {
	dir := t.TempDir()
	if err := writeClusterFile(dir, sampleClusterFile(dir, 123)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, clusterFileName))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	if got, want := keys(top), []string{"base_port", "controllers", "dir", "gateway", "gateways", "pid", "processes", "ready"}; !slices.Equal(got, want) {
		t.Errorf("top-level keys %q, want %q", got, want)
	}
	var procs []map[string]any
	json.Unmarshal(top["processes"], &procs)
	want := map[string]any{
		"service": "storage", "id": 1.0, "pid": 123.0, "running": true,
		"address": "127.0.0.1:9103", "url": "http://127.0.0.1:9103", "admin_address": "127.0.0.1:9203",
		"data_dir": dir + "/storage-1", "argv": []any{"/bin/strata-storage", "--node-id", "1"},
		"log": dir + "/logs/storage-1.log",
	}
	if len(procs) != 1 || !reflect.DeepEqual(procs[0], want) {
		t.Errorf("process entry %v\nwant %v", procs, want)
	}
	if st, err := os.Stat(filepath.Join(dir, clusterFileName)); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v", st.Mode(), err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestClusterFileAtomicRewrite rewrites cluster.json while readers read it:
// every read parses completely, and no temporary file is left.
func TestClusterFileAtomicRewrite(t *testing.T) {
	dir := t.TempDir()
	if err := writeClusterFile(dir, sampleClusterFile(dir, 1)); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				b, err := os.ReadFile(filepath.Join(dir, clusterFileName))
				if err != nil {
					t.Errorf("read: %v", err)
					return
				}
				var f clusterFile
				if err := json.Unmarshal(b, &f); err != nil {
					t.Errorf("torn read: %v\n%s", err, b)
					return
				}
				reads.Add(1)
			}
		})
	}
	for pid := 2; pid < 300; pid++ {
		f := sampleClusterFile(dir, pid)
		// Vary the size so a torn write would show.
		f.Processes[0].Argv = append(f.Processes[0].Argv, strings.Repeat("x", pid*7))
		if err := writeClusterFile(dir, f); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if reads.Load() == 0 {
		t.Error("no reads happened")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != clusterFileName {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("files in dir: %q, want only cluster.json", names)
	}
	var f clusterFile
	b, _ := os.ReadFile(filepath.Join(dir, clusterFileName))
	json.Unmarshal(b, &f)
	if f.Processes[0].PID != 299 {
		t.Errorf("last write lost: pid %d", f.Processes[0].PID)
	}
}
