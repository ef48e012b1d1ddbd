package tests

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// promSample is one Prometheus promSample of a scrape.
type promSample struct {
	process string // service-id of the process scraped
	name    string
	labels  map[string]string
	value   float64
}

// scrape reads /metrics of every process of the dev cluster but those in
// skip (service-id).
func scrape(ctx context.Context, dev *harness.Dev, skip map[string]bool) ([]promSample, error) {
	var out []promSample
	for _, p := range dev.File.Processes {
		who := fmt.Sprintf("%s-%d", p.Service, p.ID)
		if skip[who] {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.AdminAddress+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", who, err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if s, ok := parseSample(sc.Text()); ok {
				s.process = who
				out = append(out, s)
			}
		}
		resp.Body.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", who, err)
		}
	}
	return out, nil
}

// parseSample parses one line of the Prometheus text format (labels
// without escaped quotes, as Strata's are).
func parseSample(line string) (promSample, bool) {
	if line == "" || line[0] == '#' {
		return promSample{}, false
	}
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return promSample{}, false
	}
	v, err := strconv.ParseFloat(line[sp+1:], 64)
	if err != nil {
		return promSample{}, false
	}
	s := promSample{value: v, labels: map[string]string{}}
	head := line[:sp]
	if i := strings.IndexByte(head, '{'); i >= 0 {
		s.name = head[:i]
		for _, kv := range strings.Split(strings.TrimSuffix(head[i+1:], "}"), ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				s.labels[k] = strings.Trim(val, `"`)
			}
		}
	} else {
		s.name = head
	}
	return s, true
}

// metricSet answers questions about one scrape.
type metricSet []promSample

// sum adds the values of name's samples whose labels include want.
func (m metricSet) sum(name string, want map[string]string) (float64, int) {
	total, n := 0.0, 0
next:
	for _, s := range m {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
		n++
	}
	return total, n
}

// TestBusyClusterMetrics scrapes /metrics of every process of a busy dev
// cluster (a tiered topic with small segments produced to and consumed in
// a group, then a leader killed) and finds each metric docs/operations.md
// lists with a value that follows from what the test did.
func TestBusyClusterMetrics(t *testing.T) {
	t.Parallel()
	dev := harness.StartDev(t, "--storage-nodes", "3")
	ctx := harness.Deadline(t, 5*time.Minute)
	gw := dev.Gateways[0]
	cli := func(stdin string, args ...string) string {
		return cliWithEnv(t, ctx, dev.Strata, gw, nil, stdin, args...)
	}

	cli("", "topic", "create", "busy", "-p", "3", "-r", "3",
		"-c", "remote.storage.enable=true", "-c", "segment.bytes=1024", "-c", "local.retention.ms=3600000")
	const rounds, perRound = 5, 200
	for r := range rounds {
		var in strings.Builder
		for i := range perRound {
			fmt.Fprintf(&in, "k%d\tround-%d-record-%d\n", i%30, r, i)
		}
		cli(in.String(), "produce", "busy", "-f", `%k\t%v\n`)
	}
	cli("", "consume", "busy", "-g", "metrics-group", "-n", fmt.Sprint(rounds*perRound), "-f", "json")
	const unread = 50
	var more strings.Builder
	for i := range unread {
		fmt.Fprintf(&more, "k%d\tunread-%d\n", i%30, i)
	}
	cli(more.String(), "produce", "busy", "-f", `%k\t%v\n`)
	const total = rounds*perRound + unread
	topic := map[string]string{"topic": "busy"}

	// A compacted topic, not tiered, so the log cleaner has something to
	// clean: 30 keys written over and over in small segments.
	cli("", "topic", "create", "compacted", "-p", "1", "-r", "3",
		"-c", "cleanup.policy=compact", "-c", "segment.bytes=1024")
	// One produce a round, so each round is a batch of its own and rolls
	// a segment: the cleaner cleans closed segments only.
	for r := range 8 {
		var keyed strings.Builder
		for i := range 60 {
			fmt.Fprintf(&keyed, "k%d\tround-%d-value-%d\n", i%30, r, i)
		}
		cli(keyed.String(), "produce", "compacted", "-f", `%k\t%v\n`)
	}
	compacted := map[string]string{"topic": "compacted"}

	// Each check returns nil when the metric is there with a plausible
	// value; the scrape is repeated until all hold (counters and gauges
	// are refreshed on their own intervals).
	type check struct {
		what string
		ok   func(m metricSet) error
	}
	exactly := func(name string, labels map[string]string, want float64) check {
		return check{name, func(m metricSet) error {
			if got, n := m.sum(name, labels); n == 0 || got != want {
				return fmt.Errorf("%s%v: sum %v over %d series, want %v", name, labels, got, n, want)
			}
			return nil
		}}
	}
	atLeast := func(name string, labels map[string]string, want float64) check {
		return check{name, func(m metricSet) error {
			if got, n := m.sum(name, labels); n == 0 || got < want {
				return fmt.Errorf("%s%v: sum %v over %d series, want at least %v", name, labels, got, n, want)
			}
			return nil
		}}
	}
	partitions := func(name string, want func(p string, v float64) error) check {
		return check{name, func(m metricSet) error {
			seen := map[string]bool{}
			for _, s := range m {
				if s.name == name && s.labels["topic"] == "busy" {
					seen[s.labels["partition"]] = true
					if err := want(s.labels["partition"], s.value); err != nil {
						return fmt.Errorf("%s on %s: %w", name, s.process, err)
					}
				}
			}
			if len(seen) != 3 {
				return fmt.Errorf("%s: series for partitions %v, want 0, 1 and 2", name, seen)
			}
			return nil
		}}
	}
	run := func(what string, skip map[string]bool, checks []check) metricSet {
		t.Helper()
		var last metricSet
		testwait.Until(t, 2*time.Minute, what, func() error {
			m, err := scrape(ctx, dev, skip)
			if err != nil {
				return err
			}
			last = m
			var errs []string
			for _, c := range checks {
				if err := c.ok(m); err != nil {
					errs = append(errs, err.Error())
				}
			}
			if len(errs) > 0 {
				return fmt.Errorf("%s", strings.Join(errs, "; "))
			}
			return nil
		})
		return last
	}

	endOffsets := func(m metricSet) error {
		// Every replica of a partition reports its log end; the leader's
		// is the largest, and the leaders' add up to every record.
		high := map[string]float64{}
		for _, s := range m {
			if s.name == "strata_storage_log_high_watermark" && s.labels["topic"] == "busy" {
				high[s.labels["partition"]] = max(high[s.labels["partition"]], s.value)
			}
		}
		if sum := high["0"] + high["1"] + high["2"]; sum != total {
			return fmt.Errorf("high watermarks %v add up to %v, want %d", high, sum, total)
		}
		return nil
	}
	m := run("every metric of a busy cluster", nil, []check{
		exactly("strata_storage_produced_records_total", topic, total),
		atLeast("strata_storage_produced_bytes_total", topic, total*10),
		atLeast("strata_storage_fetched_records_total", topic, rounds*perRound),
		atLeast("strata_storage_fetched_bytes_total", topic, rounds*perRound*10),
		atLeast("rpc_server_call_duration_seconds_count", map[string]string{"rpc_method": "strata.storage.v1.StorageService/Produce"}, rounds+1),
		atLeast("rpc_client_call_duration_seconds_count", map[string]string{"rpc_method": "strata.storage.v1.StorageService/Replicate"}, 1),
		{"strata_storage_log_high_watermark", endOffsets},
		partitions("strata_storage_log_end_offset", func(_ string, v float64) error {
			if v <= 0 || v > total {
				return fmt.Errorf("log end offset %v outside (0, %d]", v, total)
			}
			return nil
		}),
		partitions("strata_storage_log_start_offset", func(_ string, v float64) error {
			if v != 0 {
				return fmt.Errorf("log start offset %v, want 0 (the tier holds every offset from 0)", v)
			}
			return nil
		}),
		partitions("strata_storage_partition_under_replicated", func(_ string, v float64) error {
			if v != 0 {
				return fmt.Errorf("under-replicated %v in a healthy cluster", v)
			}
			return nil
		}),
		partitions("strata_storage_partition_isr_size", func(_ string, v float64) error {
			if v != 3 {
				return fmt.Errorf("ISR size %v, want 3", v)
			}
			return nil
		}),
		partitions("strata_storage_tier_lag_bytes", func(_ string, v float64) error {
			if v < 0 || v > total*100 {
				return fmt.Errorf("tier lag %v bytes is implausible", v)
			}
			return nil
		}),
		atLeast("strata_storage_tier_upload_duration_seconds_count", topic, 1),
		atLeast("strata_storage_fsync_duration_seconds_count", nil, 1),
		// Each replica cleans its own copy (the cleaner looks every 15 s).
		atLeast("strata_storage_cleaner_cleaned_bytes_total", compacted, 1),
		exactly("strata_storage_cleaner_errors_total", compacted, 0),
		exactly("strata_coordinator_group_lag", map[string]string{"group": "metrics-group", "topic": "busy"}, unread),
		atLeast("strata_coordinator_rebalances_total", map[string]string{"group": "metrics-group"}, 1),
		exactly("strata_controller_active", nil, 1),
		exactly("strata_controller_nodes_live", nil, 3),
		exactly("strata_controller_partitions_under_replicated", nil, 0),
		exactly("strata_controller_partitions_offline", nil, 0),
	})

	// Kill the leader of partition 0 (the node reporting its ISR size):
	// the controller elects another leader and shrinks the ISR, and the
	// partitions are under-replicated until the node comes back.
	victim := ""
	for _, s := range m {
		if s.name == "strata_storage_partition_isr_size" && s.labels["topic"] == "busy" && s.labels["partition"] == "0" {
			victim = s.process
		}
	}
	var id int
	if _, err := fmt.Sscanf(victim, "storage-%d", &id); err != nil {
		t.Fatalf("leader of busy-0 is %q: %v", victim, err)
	}
	dev.Kill(t, "storage", id)
	after := run("the metrics of a killed leader", map[string]bool{victim: true}, []check{
		atLeast("strata_controller_leader_elections_total", topic, 1),
		atLeast("strata_controller_isr_changes_total", map[string]string{"topic": "busy", "change": "shrink"}, 3),
		// busy's three partitions and compacted's one: every node holds
		// a replica of each.
		exactly("strata_controller_partitions_under_replicated", nil, 4),
		exactly("strata_controller_partitions_offline", nil, 0),
		exactly("strata_controller_nodes_live", nil, 2),
		exactly("strata_storage_partition_under_replicated", topic, 3),
	})

	// docs/operations.md lists each metric an operator has; every one of
	// them is in the scrapes (histograms as their _count series).
	doc, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `((?:strata|rpc)_[a-z_]+)` \\| (\\w+)")
	rows := row.FindAllStringSubmatch(string(doc), -1)
	if len(rows) < 15 {
		t.Fatalf("docs/operations.md lists %d metrics; the table was not found", len(rows))
	}
	for _, r := range rows {
		name := r[1]
		if r[2] == "histogram" {
			name += "_count"
		}
		if _, n := append(m, after...).sum(name, nil); n == 0 {
			t.Errorf("docs/operations.md lists %s, which no process exported", r[1])
		}
	}
}
