package server

import (
	"testing"
	"time"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
)

func TestQuotaSharesSumTheOtherNodes(t *testing.T) {
	var q quotaShares
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ttl := 3 * time.Second
	use := func(p string, produce, fetch int64) *controllerv1.QuotaUsage {
		return &controllerv1.QuotaUsage{Principal: p, ProduceBytesPerSecond: produce, FetchBytesPerSecond: fetch}
	}
	q.report(1, []*controllerv1.QuotaUsage{use("User:a", 100, 10)}, t0, ttl)
	q.report(2, []*controllerv1.QuotaUsage{use("User:a", 200, 0), use("User:b", 5, 5)}, t0, ttl)
	nodes, others := q.report(3, nil, t0.Add(time.Second), ttl)
	if nodes != 3 {
		t.Fatalf("nodes %d, want 3", nodes)
	}
	got := map[string][4]int64{}
	for _, o := range others {
		got[o.GetPrincipal()] = [4]int64{o.GetProduceBytesPerSecond(), o.GetFetchBytesPerSecond(), int64(o.GetProduceNodes()), int64(o.GetFetchNodes())}
	}
	if want := map[string][4]int64{"User:a": {300, 10, 2, 1}, "User:b": {5, 5, 1, 1}}; len(got) != 2 || got["User:a"] != want["User:a"] || got["User:b"] != want["User:b"] {
		t.Fatalf("others for node 3 (rates, then how many nodes moved each): %v, want %v", got, want)
	}
	// Node 1 does not count its own traffic.
	_, others = q.report(1, []*controllerv1.QuotaUsage{use("User:a", 100, 10)}, t0.Add(time.Second), ttl)
	for _, o := range others {
		if o.GetPrincipal() == "User:a" && o.GetProduceBytesPerSecond() != 200 {
			t.Fatalf("others for node 1: User:a %d, want node 2's 200", o.GetProduceBytesPerSecond())
		}
	}
	// Node 2 reports nothing for a moment: it still counts as moving
	// User:a for a lease, with no bytes this window.
	q.report(2, nil, t0.Add(2*time.Second), ttl)
	_, others = q.report(3, nil, t0.Add(2*time.Second), ttl)
	for _, o := range others {
		if o.GetPrincipal() == "User:a" && (o.GetProduceBytesPerSecond() != 100 || o.GetProduceNodes() != 2) {
			t.Fatalf("others for node 3 after node 2's empty window: %v, want node 1's 100 B/s from 2 nodes", o)
		}
	}
	// Node 2 falls silent past the lease: forgotten.
	q.report(3, nil, t0.Add(5*time.Second), ttl)
	nodes, others = q.report(1, nil, t0.Add(6*time.Second), ttl)
	if nodes != 2 || len(others) != 0 {
		t.Fatalf("after node 2's lease: nodes %d, others %v; want 2 (nodes 1 and 3) and nothing", nodes, others)
	}
}
