package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseFlagsDefaults(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range o.matrix {
		names = append(names, w.Name())
		if len(w.Modes) != 3 || w.Modes[0] != modeMax {
			t.Errorf("%s modes %v, want max, rate, consume", w.Name(), w.Modes)
		}
	}
	if strings.Join(names, " ") != "p12-1KiB-rf3-all p12-1KiB-rf1-leader" {
		t.Fatalf("default workloads %v", names)
	}
	if o.set.records != 100000 || o.set.inflight != 512 || o.set.rate.Fraction != 0.5 || o.output != "text" {
		t.Fatalf("defaults %+v, output %q", o.set, o.output)
	}
}

func TestParseFlagsMatrix(t *testing.T) {
	o, err := parseFlags([]string{"--partitions", "1,48", "--record-bytes", "100,16KiB", "--durability", "rf3-leader", "--modes", "consume"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range o.matrix {
		names = append(names, w.Name())
		if !w.has(modeMax) || !w.has(modeConsume) || w.has(modeRate) {
			t.Errorf("%s modes %v, want max (always) and consume", w.Name(), w.Modes)
		}
	}
	if got := strings.Join(names, " "); got != "p1-100-rf3-leader p1-16KiB-rf3-leader p48-100-rf3-leader p48-16KiB-rf3-leader" {
		t.Fatalf("workloads %s", got)
	}

	o, err = parseFlags([]string{"--matrix", "bench"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if first := o.matrix[0]; first.Name() != "p12-1KiB-rf3-all" || !first.has(modeRate) || !first.has(modeConsume) {
		t.Fatalf("bench starts with %s %v, want the headline workload in every mode", first.Name(), first.Modes)
	}
	o, err = parseFlags([]string{"--matrix", "full"}, io.Discard)
	if err != nil || len(o.matrix) != 27 {
		t.Fatalf("full matrix: %d workloads, %v; want 27", len(o.matrix), err)
	}
}

// Every problem is reported, on one line.
func TestParseFlagsReportsEveryProblem(t *testing.T) {
	_, err := parseFlags([]string{"--matrix", "bench", "--partitions", "3", "--records", "0", "--rate", "fast", "--output", "xml"}, io.Discard)
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{"--partitions and --matrix", "--records 0 needs a --duration", `--rate "fast"`, `--output "xml"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans lines: %q", msg)
	}
	for _, args := range [][]string{
		{"--durability", "rf2-all"},
		{"--record-bytes", "1KB"},
		{"--record-bytes", "8", "--modes", "rate"},
		{"--partitions", "0"},
		{"--modes", "soak"},
		{"--profile", "/tmp/p"},
		{"--matrix", "huge"},
		{"extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestParseSizeAndRate(t *testing.T) {
	for in, want := range map[string]int{"100": 100, "1024": 1024, "1KiB": 1024, "16KiB": 16384, "1MiB": 1 << 20} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if sizeName(16384) != "16KiB" || sizeName(100) != "100" || sizeName(1000) != "1000" {
		t.Error("sizeName")
	}
	if r, err := parseRate("25%"); err != nil || r.Fraction != 0.25 || r.MBps != 0 {
		t.Errorf("25%%: %+v %v", r, err)
	}
	if r, err := parseRate("12.5"); err != nil || r.MBps != 12.5 || r.Fraction != 0 {
		t.Errorf("12.5: %+v %v", r, err)
	}
	for _, bad := range []string{"0", "-1", "0%", "x%", ""} {
		if _, err := parseRate(bad); err == nil {
			t.Errorf("parseRate(%q) accepted", bad)
		}
	}
}

func TestParseFlagsProtocol(t *testing.T) {
	o, err := parseFlags([]string{"--protocol", "kafka", "--kafka-bootstrap", "127.0.0.1:9097"}, io.Discard)
	if err != nil || o.protocol != "kafka" || o.kafkaBoot != "127.0.0.1:9097" {
		t.Fatalf("--protocol kafka --kafka-bootstrap: %+v, %v", o, err)
	}
	if o, err := parseFlags(nil, io.Discard); err != nil || o.protocol != "connect" {
		t.Fatalf("default protocol %q, %v; want connect", o.protocol, err)
	}
	dir := t.TempDir()
	cj := filepath.Join(dir, "cluster.json")
	if err := os.WriteFile(cj, []byte(`{"kafka_bootstrap":"127.0.0.1:19097","processes":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if o, err := parseFlags([]string{"--protocol", "kafka", "--cluster-json", cj}, io.Discard); err != nil || o.kafkaBoot != "127.0.0.1:19097" {
		t.Fatalf("bootstrap from cluster.json: %q, %v", o.kafkaBoot, err)
	}
	noKafka := filepath.Join(dir, "plain.json")
	if err := os.WriteFile(noKafka, []byte(`{"processes":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--protocol", "kafka"}, "--protocol kafka needs --kafka-bootstrap or --cluster-json"},
		{[]string{"--protocol", "kafka", "--cluster-json", noKafka}, "names no kafka_bootstrap"},
		{[]string{"--protocol", "kafka", "--kafka-bootstrap", "h:1", "--max-in-flight", "2"}, "--max-in-flight is the Go client's"},
		{[]string{"--protocol", "amqp"}, `--protocol "amqp": connect or kafka`},
	} {
		if _, err := parseFlags(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

func TestParseFlagsTxnBatches(t *testing.T) {
	o, err := parseFlags([]string{"--txn-batches", "1,10,100", "--txn-batch-records", "50"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.set.txnBatches, []int{1, 10, 100}) || o.set.txnBatchRecords != 50 {
		t.Fatalf("txn batches %v of %d records", o.set.txnBatches, o.set.txnBatchRecords)
	}
	_, err = parseFlags([]string{"--txn-batches", "0,x", "--txn-batch-records", "0", "--protocol", "kafka", "--kafka-bootstrap", "h:1"}, io.Discard)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{`--txn-batches "0"`, `--txn-batches "x"`, "--txn-batch-records 0", "not with --protocol kafka"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %s", want, err)
		}
	}
}
