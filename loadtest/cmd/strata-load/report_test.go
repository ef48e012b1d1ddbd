package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
)

func TestLatencySummary(t *testing.T) {
	l := newLatency()
	for i := 1; i <= 1000; i++ {
		l.Record(time.Duration(i) * time.Millisecond)
	}
	l.Record(2 * time.Hour) // clamped to a minute, not dropped
	s := l.Summary()
	near := func(got, want float64) bool { return got >= want*0.999 && got <= want*1.001 }
	if s.Count != 1001 || !near(s.P50, 501) || !near(s.P99, 991) || !near(s.P999, 1000) || !near(s.Max, 60000) {
		t.Fatalf("summary %+v", s)
	}
	if newLatency().Summary() != nil {
		t.Fatal("an empty histogram has a summary")
	}
}

func TestStampRoundTrip(t *testing.T) {
	origin := time.Now()
	v := recordValue(100)
	stamp(v, 1234567*time.Microsecond, 42)
	at, ok := unstamp(v, origin)
	if !ok || at.Sub(origin) != 1234567*time.Microsecond {
		t.Fatalf("unstamped %v, %v", at.Sub(origin), ok)
	}
	if _, ok := unstamp([]byte("w"), origin); ok {
		t.Fatal("a warm-up value read as stamped")
	}
}

// Lines as the peer benchmark prints them, with the build noise and a
// failed system around them.
const peersOutput = `go: downloading github.com/nats-io/nats.go v1.55.0
nats-jetstream-R3 records=200000 size=1024B produce_MBps=40.0 produce_rps=39062 consume_MBps=120.5 ack_p50_ms=10.00 ack_p99_ms=20.00 ack_p999_ms=30.00
redis-streams failed
redis-streams records=200000 size=1024B produce_MBps=100.0 produce_rps=97656 consume_MBps=400.0 ack_p50_ms=1.00 ack_p99_ms=2.00 ack_p999_ms=3.00
`

func TestParsePeers(t *testing.T) {
	ps, err := parsePeers(strings.NewReader(peersOutput))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("peers %+v, want 2", ps)
	}
	n := ps[0]
	if n.System != "nats-jetstream-R3" || n.Records != 200000 || n.RecordBytes != 1024 || n.ProduceMBps != 40 ||
		n.ConsumeMBps != 120.5 || n.AckP50 != 10 || n.AckP99 != 20 || n.AckP999 != 30 {
		t.Fatalf("nats %+v", n)
	}
}

func headline(m string, rf int32, acks client.Acks) Result {
	return newResult(workload{12, 1024, durability{"x", rf, acks}, nil}, mode(m))
}

func TestChecks(t *testing.T) {
	rf3 := headline("max", 3, client.AcksAll)
	rf3.MBps, rf3.Ack = 110, &Summary{P99: 30}
	rf1 := headline("max", 1, client.AcksLeader)
	rf1.MBps = 200
	rate := headline("rate", 3, client.AcksAll)
	rate.MBps, rate.OfferedMBps, rate.OfferedFraction = 55, 55, 0.5
	rate.Ack, rate.E2E = &Summary{P99: 12}, &Summary{P99: 26}
	one := headline("consume", 3, client.AcksAll)
	one.MBps, one.Consumers = 320, 1
	grp := headline("consume", 3, client.AcksAll)
	grp.MBps, grp.Consumers = 400, 3
	other := newResult(workload{48, 1024, durability{"x", 1, client.AcksLeader}, nil}, modeMax)
	other.MBps = 1 // not the headline workload: must not be used
	peers, _ := parsePeers(strings.NewReader(peersOutput))

	got := map[string]Check{}
	for _, c := range checks([]Result{other, rf3, rf1, rate, one, grp}, peers) {
		got[c.What] = c
	}
	want := []struct {
		what  string
		value float64
		met   *bool
	}{
		{"RF=3 acks=all / RF=1 acks=leader, max MB/s", 0.55, ptr(true)},
		{"RF=3 acks=all / NATS JetStream R3, max MB/s", 2.75, ptr(true)},
		{"ack p99 at half of the RF=3 acks=all max", 12, ptr(true)},
		{"end-to-end p99 at half of the RF=3 acks=all max", 26, ptr(false)},
		{"one consumer from page cache, MB/s", 320, ptr(true)},
		{"group of 3 / one consumer, MB/s", 1.25, ptr(false)},
		{"RF=3 acks=all / NATS JetStream R3, ack p99 (closed loop)", 1.5, nil},
		{"RF=1 acks=leader / Redis Streams, max MB/s", 2, nil},
		{"one consumer / Redis Streams consume, MB/s", 0.8, nil},
	}
	for _, w := range want {
		c, ok := got[w.what]
		if !ok {
			t.Errorf("no check %q", w.what)
			continue
		}
		if c.Value < w.value-1e-9 || c.Value > w.value+1e-9 {
			t.Errorf("%s = %v, want %v", w.what, c.Value, w.value)
		}
		if (c.Met == nil) != (w.met == nil) || c.Met != nil && *c.Met != *w.met {
			t.Errorf("%s met = %v, want %v", w.what, c.Met, w.met)
		}
	}

	// A rate run at another load reports its latency without a verdict.
	rate.OfferedFraction = 0
	for _, c := range checks([]Result{rate}, nil) {
		if c.Met != nil || !strings.Contains(c.What, "55.0 MB/s offered") {
			t.Errorf("check %+v: a rate run not at half the max has no target", c)
		}
	}
}

func ptr(b bool) *bool { return &b }

func TestPrintTextAndJSON(t *testing.T) {
	rate := headline("rate", 3, client.AcksAll)
	rate.Workload, rate.OfferedMBps, rate.MBps, rate.RecordsPerSec = "p12-1KiB-rf3-all", 50, 49.9, 48730
	rate.Ack = &Summary{P50: 1.5, P99: 4.25, P999: 9, Max: 12}
	rate.E2E = &Summary{P50: 2, P99: 7.5, P999: 11, Max: 15}
	rate.SendLagMaxMs = 20
	rate.CPU = &CPU{ClusterPerGB: 41.25, ClientPerGB: 9}
	rep := &Report{Started: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), Results: []Result{rate}}
	rep.Checks = checks(rep.Results, nil)
	var b bytes.Buffer
	printText(&b, rep)
	out := b.String()
	for _, want := range []string{"p12-1KiB-rf3-all", "rate 50.0", "49.9", "4.25", "end-to-end", "7.50", "41.2",
		"fell up to 20.0 ms behind", "ack p99 at 50.0 MB/s offered"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := writeJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if r := back.Results[0]; r.E2E == nil || r.E2E.P99 != 7.5 || r.Ack.P999 != 9 || r.CPU.ClusterPerGB != 41.25 {
		t.Fatalf("JSON round trip lost figures: %s", b.String())
	}
}

func TestProgressCountsEachOffsetOnce(t *testing.T) {
	pr := newProgress(map[int32]int64{0: 3, 1: 2, 2: 0})
	rec := func(p int32, off int64) *client.Record {
		return &client.Record{Partition: p, Offset: off, Value: make([]byte, 10)}
	}
	t0 := time.Unix(100, 0)
	pr.add([]*client.Record{rec(0, 0), rec(0, 1), rec(1, 0)}, t0)
	pr.add([]*client.Record{rec(0, 0), rec(0, 1), rec(0, 2), rec(0, 3)}, t0.Add(time.Second)) // 0..1 again, 3 is past the end
	select {
	case <-pr.finished:
		t.Fatal("finished with partition 1 unread")
	default:
	}
	pr.add([]*client.Record{rec(1, 1)}, t0.Add(2*time.Second))
	select {
	case <-pr.finished:
	default:
		t.Fatal("not finished with every partition read")
	}
	if pr.records != 5 || pr.bytes != 50 || pr.duplicates != 2 || !pr.first.Equal(t0) || !pr.last.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("records %d bytes %d duplicates %d first %v last %v", pr.records, pr.bytes, pr.duplicates, pr.first, pr.last)
	}
}

func TestSpread(t *testing.T) {
	member := func(owned ...int32) *coordinatorv1.GroupMember {
		return &coordinatorv1.GroupMember{Assignment: &coordinatorv1.Assignment{
			Partitions: []*commonv1.TopicPartitions{{Topic: "t", Partitions: owned}}}}
	}
	stable := coordinatorv1.GroupState_GROUP_STATE_STABLE
	g := func(state coordinatorv1.GroupState, ms ...*coordinatorv1.GroupMember) *coordinatorv1.GroupDescription {
		return &coordinatorv1.GroupDescription{State: state, Members: ms}
	}
	cases := []struct {
		name string
		g    *coordinatorv1.GroupDescription
		want bool
	}{
		{"shared", g(stable, member(0, 1), member(2, 3), member(4, 5)), true},
		{"reconciling", g(coordinatorv1.GroupState_GROUP_STATE_RECONCILING, member(0, 1), member(2, 3), member(4, 5)), false},
		{"one member has it all", g(stable, member(0, 1, 2, 3, 4, 5), member(), member()), false},
		{"two members", g(stable, member(0, 1, 2), member(3, 4, 5)), false},
		{"a partition missing", g(stable, member(0, 1), member(2, 3), member(4)), false},
		{"a partition twice", g(stable, member(0, 1, 2), member(2, 3), member(4, 5)), false},
	}
	for _, c := range cases {
		if got := spread(c.g, 3, 6); got != c.want {
			t.Errorf("%s: spread %v, want %v", c.name, got, c.want)
		}
	}
}
