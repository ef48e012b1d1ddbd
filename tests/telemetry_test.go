package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// cliWithEnv runs the strata CLI against gateway with extra environment
// variables and stdin, failing the test when it fails.
func cliWithEnv(t *testing.T, ctx context.Context, strata, gateway string, env []string, stdin string, args ...string) string {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, strata, append([]string{"--gateway", gateway}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("strata %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// exportSoon makes a process export its spans within a tenth of a second
// rather than the default 5s (the batch span processor's delay).
const exportSoon = "OTEL_BSP_SCHEDULE_DELAY=100"

// TestOneTraceFromProducerToConsumer: with every process of a dev cluster
// exporting to an OTLP receiver (strata dev --otlp) and the CLI exporting
// there too (OTEL_EXPORTER_OTLP_ENDPOINT), one record produced with acks=all
// and consumed in a group makes one trace that holds the producer's send
// span, the leader's append and replication wait, and the consumer's
// process span, from at least three processes, linked parent to child.
func TestOneTraceFromProducerToConsumer(t *testing.T) {
	t.Parallel()
	recv := harness.StartOTLPReceiver(t)
	// Export within a fraction of a second rather than the default 5s.
	dev := harness.StartDevEnv(t, []string{exportSoon}, "--storage-nodes", "3", "--otlp", recv.URL)
	ctx := harness.Deadline(t, 5*time.Minute)
	gw := dev.Gateways[0]
	otelEnv := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.URL, exportSoon}

	cliWithEnv(t, ctx, dev.Strata, gw, nil, "", "topic", "create", "traced", "-p", "1", "-r", "3")
	cliWithEnv(t, ctx, dev.Strata, gw, otelEnv, "hello\n", "produce", "traced", "--acks", "all")
	out := cliWithEnv(t, ctx, dev.Strata, gw, otelEnv, "", "consume", "traced", "-g", "traced-group", "-n", "1", "-f", "json")

	var rec struct {
		Value   string            `json:"value"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rec); err != nil {
		t.Fatalf("consume output %q: %v", out, err)
	}
	parts := strings.Split(rec.Headers["traceparent"], "-")
	if rec.Value != "hello" || len(parts) != 4 || parts[3] != "01" {
		t.Fatalf("consumed %+v: want value hello with a sampled W3C traceparent header", rec)
	}
	traceID := parts[1]

	var trace []harness.Span
	byName := func(name string) *harness.Span {
		for i := range trace {
			if trace[i].Name == name {
				return &trace[i]
			}
		}
		return nil
	}
	want := []string{"send traced", "strata.storage.v1.StorageService/Produce", "strata.storage.append",
		"strata.storage.replication.wait", "process traced"}
	testwait.Until(t, 60*time.Second, "the trace holds send, append, replication wait and process", func() error {
		trace = recv.Trace(traceID)
		for _, n := range want {
			if byName(n) == nil {
				var have []string
				for _, s := range trace {
					have = append(have, s.Process+":"+s.Name)
				}
				return fmt.Errorf("trace %s lacks %q; has %v", traceID, n, have)
			}
		}
		return nil
	})

	// On a busy machine the producer may have sent the batch more than
	// once (a retry after a slow or refused attempt): the Produce span to
	// look at is the one the (first, not duplicate) append is under.
	send, appendSpan, process := byName(want[0]), byName(want[2]), byName(want[4])
	for i := range trace {
		if trace[i].Name == want[2] && trace[i].Attrs["strata.duplicate"] == "false" {
			appendSpan = &trace[i]
		}
	}
	var produce, wait *harness.Span
	for i := range trace {
		switch {
		case trace[i].SpanID == appendSpan.ParentID:
			produce = &trace[i]
		case trace[i].Name == want[3] && trace[i].ParentID == appendSpan.ParentID:
			wait = &trace[i]
		}
	}
	if produce == nil || produce.Name != want[1] || wait == nil {
		t.Fatalf("append span %+v: its parent is not a Produce span with a replication wait beside it; trace %+v", *appendSpan, trace)
	}
	processes := map[string]bool{}
	for _, s := range trace {
		processes[s.Process] = true
	}
	if len(processes) < 3 {
		t.Errorf("trace spans %d processes %v, want at least 3 (producer, leader, consumer)", len(processes), processes)
	}
	if send.ParentID != "" || send.Kind != "SPAN_KIND_PRODUCER" || send.Service != "strata-cli" {
		t.Errorf("send span %+v: want the root, a producer span of strata-cli", *send)
	}
	for k, v := range map[string]string{"messaging.system": "strata", "messaging.destination.name": "traced",
		"messaging.destination.partition.id": "0", "messaging.kafka.offset": "0", "messaging.operation.name": "send"} {
		if send.Attrs[k] != v {
			t.Errorf("send span %s=%q, want %q", k, send.Attrs[k], v)
		}
	}
	if produce.Service != "strata-storage" || produce.Kind != "SPAN_KIND_SERVER" || produce.ParentID != send.SpanID {
		t.Errorf("Produce server span %+v: want a storage span, child of the send span %s", *produce, send.SpanID)
	}
	if appendSpan.ParentID != produce.SpanID || wait.ParentID != produce.SpanID || appendSpan.Process != produce.Process || wait.Process != produce.Process {
		t.Errorf("append %+v and replication wait %+v: want children of the leader's Produce span %s", *appendSpan, *wait, produce.SpanID)
	}
	if process.ParentID != send.SpanID || process.Kind != "SPAN_KIND_CONSUMER" || process.Process == send.Process {
		t.Errorf("process span %+v: want a consumer span in another process, child of the send span %s", *process, send.SpanID)
	}
	if process.Attrs["messaging.consumer.group.name"] != "traced-group" || process.Attrs["messaging.operation.name"] != "process" {
		t.Errorf("process span attributes %v: want group traced-group, operation process", process.Attrs)
	}
}

// TestIdleClusterExportsAlmostNothing: a dev cluster with a replicated
// topic and a group consumer waiting on it keeps followers' Replicate
// long polls, consumer fetches, group and node heartbeats and metadata
// streams going, many a second; none of them may start a trace of its
// own, so over an idle window the whole cluster exports (almost) no
// spans. The bound holds however slow the machine is: a slower machine
// polls less, never more.
func TestIdleClusterExportsAlmostNothing(t *testing.T) {
	t.Parallel()
	recv := harness.StartOTLPReceiver(t)
	dev := harness.StartDevEnv(t, []string{exportSoon}, "--storage-nodes", "3", "--otlp", recv.URL)
	ctx := harness.Deadline(t, 5*time.Minute)
	gw := dev.Gateways[0]
	otelEnv := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.URL, exportSoon}

	cliWithEnv(t, ctx, dev.Strata, gw, nil, "", "topic", "create", "idle", "-p", "3", "-r", "3")
	cliWithEnv(t, ctx, dev.Strata, gw, otelEnv, "one\n", "produce", "idle")
	// A group consumer that keeps polling (and heartbeating) through the
	// window, exporting like the cluster.
	consumer := harness.Start(t, "strata-consume", []string{dev.Strata, "--gateway", gw, "consume", "idle", "-g", "idle-group", "-f", "json"}, otelEnv...)
	consumer.WaitLine(ctx, func(l string) bool { return strings.Contains(l, `"one"`) })

	// Let what the start and the record caused be exported: wait until no
	// span arrived for a few export intervals.
	last, lastAt := len(recv.Spans()), time.Now()
	testwait.Until(t, 2*time.Minute, "the cluster's start-up spans to be exported", func() error {
		if n := len(recv.Spans()); n != last {
			last, lastAt = n, time.Now()
		}
		if time.Since(lastAt) < 3*time.Second {
			return fmt.Errorf("%d spans so far, the last %v ago; latest: %v", last, time.Since(lastAt).Round(time.Millisecond), spanCounts(recv.Spans()[max(0, last-50):]))
		}
		return nil
	})

	// The observation window: what arrives now is what an idle cluster
	// exports.
	before := len(recv.Spans())
	window := 15 * time.Second
	<-time.After(window)
	idle := recv.Spans()[before:]
	// A group's commit interval or a metadata refresh may land in the
	// window; a flood of long polls would be hundreds.
	const allowed = 5
	if len(idle) > allowed {
		t.Fatalf("an idle cluster exported %d spans in %v (allowed %d): %v", len(idle), window, allowed, spanCounts(idle))
	}
	t.Logf("idle cluster: %d spans in %v", len(idle), window)
	consumer.Kill()
}

// spanCounts counts spans by service and name, for failure messages.
func spanCounts(spans []harness.Span) map[string]int {
	count := map[string]int{}
	for _, s := range spans {
		count[s.Service+" "+s.Name]++
	}
	return count
}
