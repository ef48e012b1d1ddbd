package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/strata-mq/strata/client"
)

// durability is a topic's replication factor with the producer's acks.
type durability struct {
	Name string
	RF   int32
	Acks client.Acks
}

var durabilities = []durability{
	{"rf3-all", 3, client.AcksAll},
	{"rf3-leader", 3, client.AcksLeader},
	{"rf1-leader", 1, client.AcksLeader},
}

func parseDurability(s string) (durability, error) {
	for _, d := range durabilities {
		if d.Name == s {
			return d, nil
		}
	}
	return durability{}, fmt.Errorf("unknown durability %q (rf3-all, rf3-leader, rf1-leader)", s)
}

// mode is one kind of run on a workload.
type mode string

const (
	// modeMax is the closed-loop run: as fast as the in-flight bound
	// allows. It also fills the topic that modeConsume reads.
	modeMax mode = "max"
	// modeRate is the open-loop run at a constant offered load, with a
	// consumer alongside for end-to-end latency.
	modeRate mode = "rate"
	// modeConsume reads the topic modeMax filled, from the start: one
	// consumer, then a group of three.
	modeConsume mode = "consume"
)

// parseModes reads a list of modes. max is always run, first: rate takes
// its percentage from it and consume reads the topic it fills.
func parseModes(list string) ([]mode, error) {
	out := []mode{modeMax}
	seen := map[mode]bool{modeMax: true}
	for _, s := range splitList(list) {
		m := mode(s)
		switch m {
		case modeMax, modeRate, modeConsume, modeRequest:
		default:
			return nil, fmt.Errorf("unknown mode %q (max, rate, consume, request)", s)
		}
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out, nil
}

// workload is one topic shape and the runs made on it, in the order max,
// rate, consume (max first: the others use its topic or its figure).
type workload struct {
	Partitions  int32
	RecordBytes int
	Durability  durability
	Modes       []mode
}

// Name is short and unique within a matrix: p12-1KiB-rf3-all.
func (w workload) Name() string {
	return fmt.Sprintf("p%d-%s-%s", w.Partitions, sizeName(w.RecordBytes), w.Durability.Name)
}

func (w workload) has(m mode) bool {
	for _, x := range w.Modes {
		if x == m {
			return true
		}
	}
	return false
}

// sizeName prints 100, 1KiB, 16KiB, 1000.
func sizeName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return strconv.Itoa(n)
}

// parseSize reads 100, 1024, 1KiB, 16KiB, 1MiB.
func parseSize(s string) (int, error) {
	mult := 1
	num := s
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad record size %q (a positive number of bytes, or NKiB, NMiB)", s)
	}
	return n * mult, nil
}

// product is every combination of the lists, each workload with all the
// modes.
func product(partitions []int32, sizes []int, durs []durability, modes []mode) []workload {
	var out []workload
	for _, p := range partitions {
		for _, s := range sizes {
			for _, d := range durs {
				out = append(out, workload{p, s, d, modes})
			}
		}
	}
	return out
}

// Preset matrices. "bench" is what `make bench-cluster` runs by default:
// the headline workload (12 partitions, 1 KiB) in every mode and at every
// durability, then one axis at a time around it at RF=3 acks=all, so it
// ends in minutes. "full" is every combination in every mode.
var presets = map[string]func() []workload{
	"bench": func() []workload {
		all := []mode{modeMax, modeRate, modeConsume}
		maxOnly := []mode{modeMax}
		rf3all, _ := parseDurability("rf3-all")
		rf1, _ := parseDurability("rf1-leader")
		rf3leader, _ := parseDurability("rf3-leader")
		return []workload{
			{12, 1024, rf3all, all},
			{12, 1024, rf1, maxOnly},
			{12, 1024, rf3leader, maxOnly},
			{1, 1024, rf3all, maxOnly},
			{48, 1024, rf3all, maxOnly},
			{12, 100, rf3all, maxOnly},
			{12, 16 << 10, rf3all, maxOnly},
		}
	},
	"full": func() []workload {
		return product([]int32{1, 12, 48}, []int{100, 1024, 16 << 10}, durabilities,
			[]mode{modeMax, modeRate, modeConsume})
	},
}

func presetNames() string {
	return "bench, full"
}

// rateSpec is the offered load of a rate run: MB/s, or a fraction of the
// workload's own closed-loop maximum measured in the same invocation.
type rateSpec struct {
	MBps     float64
	Fraction float64 // of the max run's MB/s when > 0
}

func parseRate(s string) (rateSpec, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f <= 0 || f > 1000 {
			return rateSpec{}, fmt.Errorf("bad --rate %q: a percentage is in (0, 1000]", s)
		}
		return rateSpec{Fraction: f / 100}, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 {
		return rateSpec{}, fmt.Errorf("bad --rate %q: MB/s (e.g. 20) or a percentage of the max run (e.g. 50%%)", s)
	}
	return rateSpec{MBps: f}, nil
}

func (r rateSpec) String() string {
	if r.Fraction > 0 {
		return strconv.FormatFloat(r.Fraction*100, 'f', -1, 64) + "%"
	}
	return strconv.FormatFloat(r.MBps, 'f', -1, 64)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
