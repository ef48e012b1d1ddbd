package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/testwait"
)

// syncBuffer is a bytes.Buffer a test reads while the command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// started is a command running in the background.
type started struct {
	stdout, stderr *syncBuffer
	done           chan int // the exit code
}

// start runs the CLI in the background, for a test that watches its
// output while it runs.
func start(t *testing.T, gateway, stdin string, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	s := &started{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan int, 1)}
	env := func(k string) string {
		if k == "STRATA_GATEWAY" {
			return gateway
		}
		return ""
	}
	go func() {
		defer cancel()
		s.done <- Main(ctx, args, strings.NewReader(stdin), s.stdout, s.stderr, env)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// stderrIs waits until the command's stderr is exactly want.
func (s *started) stderrIs(t *testing.T, want string) {
	t.Helper()
	testwait.Until(t, 30*time.Second, fmt.Sprintf("stderr %q", want), func() error {
		if got := s.stderr.String(); got != want {
			return fmt.Errorf("stderr %q", got)
		}
		return nil
	})
}

// wait returns the exit code once the command ends.
func (s *started) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-s.done:
		s.done <- code // for the cleanup
		return code
	case <-time.After(time.Minute):
		t.Fatalf("the command did not end; stdout %q, stderr %q", s.stdout.String(), s.stderr.String())
		return 0
	}
}

func notEnoughReplicas(topic string) *fakecluster.Fault {
	return &fakecluster.Fault{Method: "Produce", Topic: topic, Partition: -1,
		Code: connect.CodeUnavailable, Reason: commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS,
		NotEnoughReplicas: &commonv1.NotEnoughReplicasHint{IsrSize: 1, MinInsyncReplicas: 2}}
}

// TestProduceSaysWhyItWaits: a produce refused for lack of in-sync
// replicas prints one line saying so while it waits (not one per retry),
// one more when the partition loses its leader instead, and succeeds once
// the partition has a leader again; stdout holds only the report.
func TestProduceSaysWhyItWaits(t *testing.T) {
	fc := fake(t)
	if err := fc.CreateTopic("orders", 1, 3); err != nil {
		t.Fatal(err)
	}
	ner := fc.AddFault(notEnoughReplicas("orders"))
	p := start(t, fc.GatewayURL(), "v1\n", "produce", "orders")

	nerLine := "strata: waiting: orders-0: not enough in-sync replicas (ISR 1, min.insync.replicas 2); retrying until the delivery timeout (2m0s)\n"
	testwait.Until(t, 30*time.Second, "three refused produces", func() error {
		if n := fc.Fired(ner); n < 3 {
			return fmt.Errorf("%d refused", n)
		}
		return nil
	})
	if got := p.stderr.String(); got != nerLine {
		t.Fatalf("stderr after three refusals %q, want one line %q", got, nerLine)
	}

	// The leader goes away: the refusal turns into no leader at all.
	fc.UpdatePartition("orders", 0, func(m *commonv1.PartitionMetadata) { m.LeaderId = -1 })
	fc.RemoveFault(ner)
	lnaLine := "strata: waiting: orders-0: leader not available; retrying until the delivery timeout (2m0s)\n"
	p.stderrIs(t, nerLine+lnaLine)
	lookups := fc.Calls("Metadata")
	testwait.Until(t, 30*time.Second, "two more retries without a leader", func() error {
		if n := fc.Calls("Metadata") - lookups; n < 2 {
			return fmt.Errorf("%d metadata lookups", n)
		}
		return nil
	})

	fc.UpdatePartition("orders", 0, func(m *commonv1.PartitionMetadata) { m.LeaderId, m.LeaderEpoch = 2, m.LeaderEpoch+1 })
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, p.stderr.String())
	}
	if got := p.stdout.String(); got != "partition 0 offset 0\n" {
		t.Errorf("stdout %q, want only the delivery report", got)
	}
	if got := p.stderr.String(); got != nerLine+lnaLine {
		t.Errorf("stderr %q, want the two waiting lines", got)
	}
	if recs, err := fc.Records("orders", 0); err != nil || len(recs) != 1 || string(recs[0].Value) != "v1" {
		t.Errorf("log holds %v, %v; want v1 once", recs, err)
	}
}

// TestDeliveryTimeoutFlag: --delivery-timeout bounds how long produce and
// consume wait; they end with exit 1 and one line saying what they waited
// for, after the waiting line.
func TestDeliveryTimeoutFlag(t *testing.T) {
	fc := fake(t)
	if err := fc.CreateTopic("orders", 1, 3); err != nil {
		t.Fatal(err)
	}
	if r := run(t, fc.GatewayURL(), "v1\n", "produce", "orders"); r.code != 0 {
		t.Fatal(r)
	}

	f := fc.AddFault(notEnoughReplicas("orders"))
	r := run(t, fc.GatewayURL(), "v2\n", "produce", "orders", "--delivery-timeout", "2s")
	want := "strata: waiting: orders-0: not enough in-sync replicas (ISR 1, min.insync.replicas 2); retrying until the delivery timeout (2s)\n" +
		"strata: record 1 failed: not acknowledged within the delivery timeout (2s): injected fault: REASON_NOT_ENOUGH_REPLICAS\n" +
		"strata: 1 of 1 records failed\n"
	if r.code != 1 || r.stdout != "" || r.stderr != want {
		t.Fatalf("produce: exit %d, stdout %q, stderr %q; want exit 1 and stderr %q", r.code, r.stdout, r.stderr, want)
	}
	fc.RemoveFault(f)

	// Appended, and the answer never comes: the record may be in the log.
	f = fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "orders", Partition: -1, AfterAppend: true, Hang: true})
	r = run(t, fc.GatewayURL(), "v3\n", "produce", "orders", "--delivery-timeout", "1s")
	want = "strata: record 1 failed: may or may not have been written, not acknowledged within the delivery timeout (1s): timed out\n" +
		"strata: 1 of 1 records failed\n"
	if r.code != 1 || r.stdout != "" || r.stderr != want {
		t.Fatalf("produce, answer lost: exit %d, stdout %q, stderr %q; want exit 1 and stderr %q", r.code, r.stdout, r.stderr, want)
	}
	fc.RemoveFault(f)

	fc.UpdatePartition("orders", 0, func(m *commonv1.PartitionMetadata) { m.LeaderId = -1 })
	for _, args := range [][]string{
		{"consume", "orders", "-o", "0", "-n", "1"}, // waits in Poll
		{"consume", "orders", "-e"},                 // waits to find where the log starts
	} {
		r := run(t, fc.GatewayURL(), "", append(args, "--delivery-timeout", "1s")...)
		want := "strata: waiting: orders-0: leader not available; retrying until the delivery timeout (1s)\n" +
			"strata: gave up after retrying for the delivery timeout (1s): orders-0: leader not available\n"
		if r.code != 1 || r.stdout != "" || r.stderr != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and stderr %q", args, r.code, r.stdout, r.stderr, want)
		}
	}

	for _, args := range [][]string{{"produce", "orders"}, {"consume", "orders"}} {
		wantOneLine(t, run(t, fc.GatewayURL(), "", append(args, "--delivery-timeout", "0s")...),
			"strata: --delivery-timeout must be positive, not 0s")
		r := run(t, fc.GatewayURL(), "", append(args, "--help")...)
		if !strings.Contains(r.stdout, "--delivery-timeout DURATION") || !strings.Contains(r.stdout, "(default 2m0s)") {
			t.Errorf("%v --help does not explain --delivery-timeout: %s", args, r.stdout)
		}
	}
}

// TestWaitNotice: one line per kind of reason, whatever the partition or
// the attempt; each reason in plain words.
func TestWaitNotice(t *testing.T) {
	ner := client.RetryEvent{Topic: "orders", Reason: client.RetryNotEnoughReplicas, ISRSize: 1, MinInsyncReplicas: 2}
	lna := client.RetryEvent{Topic: "orders", Partition: 5, Reason: client.RetryLeaderNotAvailable}
	var events []client.RetryEvent
	for attempt := 1; attempt <= 3; attempt++ {
		for p := range int32(12) {
			ev := ner
			ev.Partition, ev.Attempt = p, attempt
			events = append(events, ev)
		}
	}
	events = append(events, lna, ner, lna)
	var b bytes.Buffer
	w := newWaitNotice(&Env{Stderr: &b, Gateway: "http://127.0.0.1:9092"}, 2*time.Minute, "")
	for _, ev := range events {
		w.onRetry(ev)
	}
	want := "strata: waiting: orders-0: not enough in-sync replicas (ISR 1, min.insync.replicas 2); retrying until the delivery timeout (2m0s)\n" +
		"strata: waiting: orders-5: leader not available; retrying until the delivery timeout (2m0s)\n"
	if b.String() != want {
		t.Fatalf("stderr %q, want %q", b.String(), want)
	}

	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9111},
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		ev    client.RetryEvent
		scope string
		want  string
	}{
		{client.RetryEvent{Topic: "t", Partition: 3, Reason: client.RetryNotEnoughReplicas}, "", "t-3: not enough in-sync replicas"},
		{client.RetryEvent{Topic: "t", Partition: -1, Reason: client.RetryNotLeader}, "", "t: leader changed"},
		{client.RetryEvent{Partition: -1, Reason: client.RetryNodeUnreachable, Err: connect.NewError(connect.CodeUnavailable, refused)}, "",
			"cannot reach the storage node at 127.0.0.1:9111: connection refused"},
		{client.RetryEvent{Partition: -1, Reason: client.RetryCoordinatorUnavailable,
			Err: apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED, "no coordinator answers")},
			`group "g"`, `group "g": group coordinator unavailable: no coordinator answers`},
		{client.RetryEvent{Topic: "t", Partition: 0, Reason: client.RetryOther, Err: errors.New("client: something\nodd")}, "",
			"t-0: retriable error: something odd"},
	} {
		w := newWaitNotice(&Env{Gateway: "http://127.0.0.1:9092"}, time.Second, tc.scope)
		if got := w.describe(tc.ev); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.ev, got, tc.want)
		}
	}
}

// A refusal of the caller itself (no permission, no credentials) meets
// every record: produce says it once, as one line, not once per record.
func TestProduceRefusalIsOneLine(t *testing.T) {
	fc := fake(t)
	if err := fc.CreateTopic("orders", 1, 3); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		code connect.Code
		msg  string
	}{
		{connect.CodePermissionDenied, "permission denied: User:bob may not write topic orders"},
		{connect.CodeUnauthenticated, "unauthenticated: unknown or revoked token"},
	} {
		f := fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "orders", Partition: 0, Code: tc.code, Message: tc.msg})
		r := run(t, fc.GatewayURL(), "a\nb\nc\n", "produce", "orders")
		if want := "strata: " + tc.msg + "\n"; r.code != 1 || r.stdout != "" || r.stderr != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", tc.code, r.code, r.stdout, r.stderr, want)
		}
		fc.RemoveFault(f)
	}
}
