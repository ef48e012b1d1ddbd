package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and parentheses, as a process may set;
	// utime 250 and stime 50 ticks.
	stat := []byte("4242 (strata (x) y) S 1 4242 4242 0 -1 4194304 1000 0 0 0 250 50 0 0 20 0 12 0 100 1000000 500 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
	got, err := parseStatCPU(stat, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3*time.Second {
		t.Fatalf("CPU %v, want 3s (300 ticks at 100 Hz)", got)
	}
	for _, bad := range []string{"4242 no-paren S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 u s"} {
		if _, err := parseStatCPU([]byte(bad), 100); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestAuxvClockTicks(t *testing.T) {
	dir := t.TempDir()
	write := func(pairs ...uint64) string {
		b := make([]byte, 8*len(pairs))
		for i, v := range pairs {
			binary.NativeEndian.PutUint64(b[8*i:], v)
		}
		p := filepath.Join(dir, "auxv")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got, err := auxvClockTicks(write(6, 4096, 17, 250, 0, 0)); err != nil || got != 250 {
		t.Fatalf("got %d, %v; want 250", got, err)
	}
	if _, err := auxvClockTicks(write(6, 4096, 0, 0, 17, 250)); err == nil {
		t.Fatal("a value after AT_NULL was read")
	}
	if clockTicks <= 0 {
		t.Fatalf("clockTicks %d", clockTicks)
	}
}

// The meter must see CPU this process burns: it is what makes the
// per-GB figures mean anything.
func TestProcCPUSeesThisProcessWork(t *testing.T) {
	before, err := procCPU("self")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		now, err := procCPU("self")
		if err != nil {
			t.Fatal(err)
		}
		if now > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %v for a minute of busy work (x=%d)", now, x)
		}
	}
}

func TestReadClusterJSONKeepsRunningProcesses(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cluster.json")
	doc := `{"dir":"/x","pid":1,"processes":[
	  {"service":"controller","id":1,"pid":11,"running":true,"admin_address":"127.0.0.1:9193"},
	  {"service":"storage","id":1,"pid":12,"running":true},
	  {"service":"storage","id":2,"pid":13,"running":false,"exit":"signal: killed"}]}`
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	procs, err := readClusterJSON(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 2 || procs[0].PID != 11 || procs[0].AdminAddress != "127.0.0.1:9193" || procs[1].PID != 12 {
		t.Fatalf("processes %+v, want the two running ones", procs)
	}
	if err := os.WriteFile(p, []byte(`{"processes":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readClusterJSON(p); err == nil {
		t.Fatal("a cluster.json with no process was accepted")
	}
}

func TestCPUBetweenPerGB(t *testing.T) {
	m := &cpuMeter{procs: []clusterProcess{{Service: "storage", PID: 1}}}
	a := cpuSample{services: map[string]time.Duration{"storage": time.Second, "gateway": 0}, self: time.Second}
	b := cpuSample{services: map[string]time.Duration{"storage": 5 * time.Second, "gateway": time.Second}, self: 2 * time.Second}
	c := m.between(a, b, 500_000_000) // half a GB
	if c.ClusterSeconds != 5 || c.ClusterPerGB != 10 || c.ClientPerGB != 2 || c.ByService["storage"] != 4 {
		t.Fatalf("got %+v", c)
	}
	if (&cpuMeter{}).between(a, b, 1) != nil {
		t.Fatal("CPU reported without cluster processes")
	}
}
