package main

import "testing"

func TestParseVmRSS(t *testing.T) {
	for _, tc := range []struct {
		status string
		want   float64
		err    bool
	}{
		{"Name:\tstrata\nVmRSS:\t   1000 kB\nThreads:\t7\n", 1.024, false},
		{"Name:\tstrata\n", 0, true},
		{"VmRSS:\t12 MB\n", 0, true},
	} {
		got, err := parseVmRSS([]byte(tc.status))
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseVmRSS(%q) = %v, %v; want %v, error %v", tc.status, got, err, tc.want, tc.err)
		}
	}
}

func TestTargets(t *testing.T) {
	rows := []Row{
		{Partitions: 12, ProduceMBps: 40, FailoverSeconds: 6, FailoverPartitions: 4, ClusterGoroutines: 300},
		{Partitions: 1000, ProduceMBps: 30, FailoverSeconds: 12, FailoverPartitions: 333, ClusterGoroutines: 7000},
		{Partitions: 10000, ClusterCPUPercent: 9.5, ClusterGoroutines: 60000},
	}
	got := map[string]bool{}
	for _, tg := range targets(rows) {
		got[tg.What] = tg.Met
	}
	want := map[string]bool{
		"10,000 partitions: idle CPU of the whole cluster":     true,
		"12 partitions: new leaders for a killed node's 4":     true,
		"1000 partitions: new leaders for a killed node's 333": false,
		"produce over 1,000 partitions / over 12":              false,
	}
	if len(got) != len(want) {
		t.Fatalf("targets = %v, want %v", got, want)
	}
	for k, v := range want {
		if m, ok := got[k]; !ok || m != v {
			t.Errorf("target %q: met %v (present %v), want %v", k, m, ok, v)
		}
	}
}
