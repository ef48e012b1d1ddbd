package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one run, as printed and as written to JSON.
type Result struct {
	Workload    string `json:"workload"`
	Partitions  int32  `json:"partitions"`
	RecordBytes int    `json:"record_bytes"`
	RF          int32  `json:"replication_factor"`
	Acks        string `json:"acks"`
	Mode        string `json:"mode"`
	// Consumers is 1 (one consumer of every partition) or the size of
	// the group, for consume runs.
	Consumers int `json:"consumers,omitempty"`
	// OfferedMBps is a rate run's constant offered load; OfferedFraction
	// the share of the workload's max run it was taken from, if it was.
	OfferedMBps     float64 `json:"offered_mb_per_s,omitempty"`
	OfferedFraction float64 `json:"offered_fraction_of_max,omitempty"`
	Records         int64   `json:"records"`
	Bytes           int64   `json:"bytes"`
	Seconds         float64 `json:"seconds"`
	MBps            float64 `json:"mb_per_s"`
	RecordsPerSec   float64 `json:"records_per_s"`
	// Ack is Produce (closed loop) or the intended send time (open loop)
	// to the acknowledgement; E2E the intended send time to delivery by
	// a consumer's Poll.
	Ack *Summary `json:"ack_latency,omitempty"`
	E2E *Summary `json:"e2e_latency,omitempty"`
	// SendLagMaxMs is how late, at worst, a rate run's generator sent a
	// record after its intended time.
	SendLagMaxMs float64 `json:"send_lag_max_ms,omitempty"`
	// FirstRecordMs is, for consume runs, the time from the first Poll to
	// the first record.
	FirstRecordMs float64 `json:"first_record_ms,omitempty"`
	// TxnBatches is a txn run's batches per transaction (--txn-batches);
	// Transactions how many it committed, and Commit the duration of each
	// CommitTransaction (flush, then EndTxn until the decision is durable).
	TxnBatches   int      `json:"txn_batches,omitempty"`
	Transactions int64    `json:"transactions,omitempty"`
	Commit       *Summary `json:"commit_latency,omitempty"`
	// Duplicates counts records a consume run's group delivered twice.
	Duplicates int64 `json:"duplicates,omitempty"`
	CPU        *CPU  `json:"cpu,omitempty"`
	// RequestBytes is a request run's request size.
	RequestBytes int `json:"request_bytes,omitempty"`
	// Stages are the leaders' stage breakdown of a produce run
	// (--breakdown, breakdown.go).
	Stages []StageSummary `json:"stages,omitempty"`
}

func newResult(w workload, m mode) Result {
	return Result{Workload: w.Name(), Partitions: w.Partitions, RecordBytes: w.RecordBytes,
		RF: w.Durability.RF, Acks: w.Durability.Acks.String(), Mode: string(m)}
}

// finish sets the volume and the rates over [from, to].
func (r *Result) finish(from, to time.Time, records, bytes int64) {
	r.Records, r.Bytes = records, bytes
	if from.IsZero() || !to.After(from) {
		return
	}
	r.Seconds = to.Sub(from).Seconds()
	r.MBps = float64(bytes) / 1e6 / r.Seconds
	r.RecordsPerSec = float64(records) / r.Seconds
}

// modeLabel is the mode column: "max", "rate 22.5", "consume 1",
// "consume g3".
func (r Result) modeLabel() string {
	switch {
	case r.Mode == string(modeRate):
		return fmt.Sprintf("rate %.1f", r.OfferedMBps)
	case r.Mode == string(modeConsume) && r.Consumers > 1:
		return fmt.Sprintf("consume g%d", r.Consumers)
	case r.Mode == string(modeConsume):
		return "consume 1"
	case r.Mode == string(modeTxn):
		return fmt.Sprintf("txn %d", r.TxnBatches)
	case r.Mode == string(modeRequest):
		return fmt.Sprintf("request %dKiB", r.RequestBytes>>10)
	}
	return r.Mode
}

// Report is the JSON document of one invocation.
type Report struct {
	Started  time.Time `json:"started"`
	Gateway  string    `json:"gateway"`
	Command  string    `json:"command"`
	Settings struct {
		Records     int     `json:"records"`
		DurationSec float64 `json:"duration_s"`
		Inflight    int     `json:"inflight"`
		LingerMs    float64 `json:"linger_ms"`
		MaxInFlight int     `json:"max_in_flight"`
		Keys        int     `json:"keys"`
		Rate        string  `json:"rate"`
		// Protocol is connect (Strata's Go client) or kafka (franz-go at
		// the Kafka listener).
		Protocol string `json:"protocol"`
	} `json:"settings"`
	Results []Result `json:"results"`
	Peers   []Peer   `json:"peers,omitempty"`
	Checks  []Check  `json:"checks,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// Peer is one line of the peer-systems benchmark: "system key=value ...".
type Peer struct {
	System      string  `json:"system"`
	Records     int64   `json:"records"`
	RecordBytes int     `json:"record_bytes"`
	ProduceMBps float64 `json:"produce_mb_per_s"`
	ConsumeMBps float64 `json:"consume_mb_per_s"`
	AckP50      float64 `json:"ack_p50_ms"`
	AckP99      float64 `json:"ack_p99_ms"`
	AckP999     float64 `json:"ack_p999_ms"`
}

// readPeers parses the peer benchmark's output. Lines without key=value
// fields (build output, a "failed" line) are skipped.
func readPeers(path string) ([]Peer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parsePeers(f)
}

func parsePeers(r io.Reader) ([]Peer, error) {
	var out []Peer
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || !strings.Contains(fields[1], "=") {
			continue
		}
		p := Peer{System: fields[0]}
		for _, kv := range fields[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			num := func() float64 { f, _ := strconv.ParseFloat(strings.TrimSuffix(v, "B"), 64); return f }
			switch k {
			case "records":
				p.Records = int64(num())
			case "size":
				p.RecordBytes = int(num())
			case "produce_MBps":
				p.ProduceMBps = num()
			case "consume_MBps":
				p.ConsumeMBps = num()
			case "ack_p50_ms":
				p.AckP50 = num()
			case "ack_p99_ms":
				p.AckP99 = num()
			case "ack_p999_ms":
				p.AckP999 = num()
			}
		}
		if p.ProduceMBps > 0 {
			out = append(out, p)
		}
	}
	return out, sc.Err()
}

// Check is one target or comparison, computed from the results.
type Check struct {
	What   string  `json:"what"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	// Met is set only for checks with a target.
	Met *bool `json:"met,omitempty"`
}

// headline is the workload the targets are stated for.
const headlinePartitions, headlineBytes = 12, 1024

// checks computes the targets of docs/performance.md and the ratios to the
// peers from whatever runs are present; a check whose runs are missing is
// left out.
func checks(rs []Result, peers []Peer) []Check {
	find := func(mode, acks string, rf int32, consumers int) *Result {
		for i := range rs {
			r := &rs[i]
			if r.Partitions == headlinePartitions && r.RecordBytes == headlineBytes && r.Mode == mode &&
				r.Acks == acks && r.RF == rf && r.Consumers == consumers && r.MBps > 0 {
				return r
			}
		}
		return nil
	}
	peer := func(prefix string) *Peer {
		for i := range peers {
			if strings.HasPrefix(peers[i].System, prefix) {
				return &peers[i]
			}
		}
		return nil
	}
	var out []Check
	add := func(what string, v float64, unit, target string, ok func(float64) bool) {
		c := Check{What: what, Value: v, Unit: unit, Target: target}
		if ok != nil {
			met := ok(v)
			c.Met = &met
		}
		out = append(out, c)
	}
	atLeast := func(t float64) func(float64) bool { return func(v float64) bool { return v >= t } }
	atMost := func(t float64) func(float64) bool { return func(v float64) bool { return v <= t } }

	rf3, rf1 := find("max", "all", 3, 0), find("max", "leader", 1, 0)
	rate := find("rate", "all", 3, 0)
	one, group := find("consume", "all", 3, 1), find("consume", "all", 3, 3)
	nats, redis := peer("nats-jetstream-R3"), peer("redis-streams")
	if rf3 != nil && rf1 != nil {
		add("RF=3 acks=all / RF=1 acks=leader, max MB/s", rf3.MBps/rf1.MBps, "x", ">= 0.5", atLeast(0.5))
	}
	if rf3 != nil && nats != nil {
		add("RF=3 acks=all / NATS JetStream R3, max MB/s", rf3.MBps/nats.ProduceMBps, "x", ">= 2.5", atLeast(2.5))
	}
	if rate != nil && rate.Ack != nil {
		what, half := fmt.Sprintf("ack p99 at %.1f MB/s offered", rate.OfferedMBps), rate.OfferedFraction == 0.5
		if half {
			what = "ack p99 at half of the RF=3 acks=all max"
		}
		add(what, rate.Ack.P99, "ms", ifStr(half, "<= 15"), ifFn(half, atMost(15)))
		if rate.E2E != nil {
			what = strings.Replace(what, "ack", "end-to-end", 1)
			add(what, rate.E2E.P99, "ms", ifStr(half, "<= 25"), ifFn(half, atMost(25)))
		}
	}
	if one != nil {
		add("one consumer from page cache, MB/s", one.MBps, "MB/s", ">= 300", atLeast(300))
	}
	if one != nil && group != nil {
		add("group of 3 / one consumer, MB/s", group.MBps/one.MBps, "x", ">= 1.5", atLeast(1.5))
	}
	if rf3 != nil && nats != nil && rf3.Ack != nil && nats.AckP99 > 0 {
		add("RF=3 acks=all / NATS JetStream R3, ack p99 (closed loop)", rf3.Ack.P99/nats.AckP99, "x", "", nil)
	}
	if one != nil && nats != nil && nats.ConsumeMBps > 0 {
		add("one consumer / NATS JetStream R3 consume, MB/s", one.MBps/nats.ConsumeMBps, "x", "", nil)
	}
	if rf1 != nil && redis != nil {
		add("RF=1 acks=leader / Redis Streams, max MB/s", rf1.MBps/redis.ProduceMBps, "x", "", nil)
	}
	if one != nil && redis != nil && redis.ConsumeMBps > 0 {
		add("one consumer / Redis Streams consume, MB/s", one.MBps/redis.ConsumeMBps, "x", "", nil)
	}
	return out
}

func ifStr(c bool, s string) string {
	if c {
		return s
	}
	return ""
}

func ifFn(c bool, f func(float64) bool) func(float64) bool {
	if c {
		return f
	}
	return nil
}

// printText writes the results table, the peers and the checks.
func printText(w io.Writer, rep *Report) {
	client := fmt.Sprintf("Strata's Go client, %d batches in flight per partition", rep.Settings.MaxInFlight)
	if rep.Settings.Protocol == "kafka" {
		client = "franz-go at the Kafka listener"
	}
	fmt.Fprintf(w, "\nStrata load, %s; %s; in-flight %d, linger %s, %d keys\n",
		rep.Started.Format("2006-01-02 15:04 MST"), client, rep.Settings.Inflight,
		time.Duration(rep.Settings.LingerMs*float64(time.Millisecond)), rep.Settings.Keys)
	// The first two columns are text, left-aligned by padding; the
	// tabwriter right-aligns the figures.
	wn, mn := len("workload"), len("mode")
	for _, r := range rep.Results {
		wn, mn = max(wn, len(r.Workload)), max(mn, len(r.modeLabel()), len("  end-to-end"))
	}
	left := func(s string, n int) string { return s + strings.Repeat(" ", n-len(s)) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, left("workload", wn)+"\t"+left("mode", mn)+"\tMB/s\trecords/s\tp50 ms\tp99 ms\tp999 ms\tmax ms\tcluster CPU s/GB\tclient CPU s/GB\t")
	for _, r := range rep.Results {
		cpuCluster, cpuClient := "-", "-"
		if r.CPU != nil {
			cpuCluster, cpuClient = f1(r.CPU.ClusterPerGB), f1(r.CPU.ClientPerGB)
		}
		lat := []string{"-", "-", "-", "-"}
		if r.Ack != nil {
			lat = []string{f2(r.Ack.P50), f2(r.Ack.P99), f2(r.Ack.P999), f2(r.Ack.Max)}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", left(r.Workload, wn), left(r.modeLabel(), mn), f1(r.MBps),
			r.RecordsPerSec, lat[0], lat[1], lat[2], lat[3], cpuCluster, cpuClient)
		if r.E2E != nil {
			fmt.Fprintf(tw, "%s\t%s\t\t\t%s\t%s\t%s\t%s\t\t\t\n", left("", wn), left("  end-to-end", mn), f2(r.E2E.P50), f2(r.E2E.P99), f2(r.E2E.P999), f2(r.E2E.Max))
		}
		if r.Commit != nil {
			fmt.Fprintf(tw, "%s\t%s\t\t%.0f/s\t%s\t%s\t%s\t%s\t\t\t\n", left("", wn), left("  commit", mn), float64(r.Transactions)/max(r.Seconds, 1e-9),
				f2(r.Commit.P50), f2(r.Commit.P99), f2(r.Commit.P999), f2(r.Commit.Max))
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "latency: max = Produce to ack under the in-flight bound; rate = intended send time to ack")
	fmt.Fprintln(w, "(open loop, constant offered MB/s), and to delivery by a consumer on the end-to-end line.")
	for _, r := range rep.Results {
		if r.Mode == string(modeTxn) {
			fmt.Fprintln(w, "txn N = transactions of N batches, one after the other; MB/s of committed records; commit line:")
			fmt.Fprintln(w, "transactions/s and CommitTransaction's duration (flush the records, then EndTxn until durable).")
			break
		}
	}
	var notes []string
	for _, r := range rep.Results {
		if r.Duplicates > 0 {
			notes = append(notes, fmt.Sprintf("%s %s read %d records twice (partitions moved while the group formed)",
				r.Workload, r.modeLabel(), r.Duplicates))
		}
		// A lag that is a fair share of the latency means the generator,
		// not only the cluster, could not keep up (a busy machine).
		if r.Ack != nil && r.SendLagMaxMs >= max(1, r.Ack.P99/10) {
			notes = append(notes, fmt.Sprintf("%s %s: the generator fell up to %.1f ms behind its schedule (starved of CPU?); the latency counts that wait",
				r.Workload, r.modeLabel(), r.SendLagMaxMs))
		}
	}
	for _, n := range notes {
		fmt.Fprintln(w, "note:", n)
	}
	printBreakdown(w, rep)
	if len(rep.Peers) > 0 {
		fmt.Fprintln(w, "\npeers, same sitting (1 KiB, 12 partitions, same in-flight bound):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "system\tproduce MB/s\tconsume MB/s\tack p50 ms\tack p99 ms\tack p999 ms\t")
		for _, p := range rep.Peers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", p.System, f1(p.ProduceMBps), f1(p.ConsumeMBps), f2(p.AckP50), f2(p.AckP99), f2(p.AckP999))
		}
		tw.Flush()
	}
	if len(rep.Checks) > 0 {
		fmt.Fprintln(w, "\ntargets and ratios (12 partitions, 1 KiB):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, c := range rep.Checks {
			v := f2(c.Value) + " " + c.Unit
			if c.Unit == "MB/s" {
				v = f1(c.Value) + " MB/s"
			}
			verdict := ""
			if c.Met != nil {
				verdict = "target " + c.Target + ": " + map[bool]string{true: "met", false: "NOT met"}[*c.Met]
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.What, v, verdict)
		}
		tw.Flush()
	}
	if rep.Error != "" {
		fmt.Fprintln(w, "\nstopped early:", rep.Error)
	}
}

func f1(v float64) string { return fmtFloat(v, 1) }
func f2(v float64) string { return fmtFloat(v, 2) }

func fmtFloat(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func writeJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
