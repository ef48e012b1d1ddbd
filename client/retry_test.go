package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/fakecluster"
)

// leaderKills are the points of a produce request's life at which its
// leader dies: the client then sees a connection reset (as from a process
// killed with SIGKILL) and the partition moves to another node.
var leaderKills = []struct {
	name string
	// kill arranges for node 1, the leader, to die at the point.
	kill func(fc *fakecluster.Cluster)
	// written is whether the batch is in the log after the kill.
	written bool
}{
	{"before the request", func(fc *fakecluster.Cluster) {
		fc.KillNode(1)
		fc.MoveLeader("t", 0, 2)
	}, false},
	{"in flight, before the append", func(fc *fakecluster.Cluster) {
		fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, Count: 1, Kill: true})
	}, false},
	{"after the append, before the answer", func(fc *fakecluster.Cluster) {
		fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, Count: 1, Kill: true, AfterAppend: true})
	}, true},
}

// TestIdempotentProducerSurvivesLeaderKill kills the leader at each point
// of a request's life: the record is acknowledged (a broken connection is
// retriable), exactly once, at the offset the log holds it.
func TestIdempotentProducerSurvivesLeaderKill(t *testing.T) {
	for _, tc := range leaderKills {
		t.Run(tc.name, func(t *testing.T) {
			fc := newFake(t, 3, "t", 1)
			p := newProducer(t, fc, Linger(0))
			ctx := ctxT(t)
			first := &Record{Topic: "t", Value: []byte("r0")}
			if err := p.ProduceSync(ctx, first); err != nil {
				t.Fatal(err) // also opens the connection the kill resets
			}
			tc.kill(fc)
			rs := []*Record{{Topic: "t", Value: []byte("r1")}, {Topic: "t", Value: []byte("r2")}}
			for _, r := range rs {
				if err := p.ProduceSync(ctx, r); err != nil {
					t.Fatalf("%s: %v", r.Value, err)
				}
			}
			if leader, _ := fc.Leader("t", 0); leader == 1 {
				t.Fatal("the leader never moved: the kill did not happen")
			}
			recs, err := fc.Records("t", 0)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"r0", "r1", "r2"}
			if len(recs) != len(want) {
				t.Fatalf("log holds %d records, want %d (%v)", len(recs), len(want), recs)
			}
			for i, r := range append([]*Record{first}, rs...) {
				if string(recs[i].Value) != want[i] || r.Offset != int64(i) {
					t.Fatalf("offset %d holds %q; %s acknowledged at %d", i, recs[i].Value, r.Value, r.Offset)
				}
			}
		})
	}
}

// TestNonIdempotentProducerDoesNotResendUnknownOutcome: without
// idempotence a batch whose request left before the leader died is not
// sent again (that could duplicate it); it fails with ErrOutcomeUnknown,
// and the log holds it at most once. A batch that certainly did not reach
// the log (the leader said NOT_LEADER before appending) is still retried.
func TestNonIdempotentProducerDoesNotResendUnknownOutcome(t *testing.T) {
	for _, tc := range leaderKills[1:] {
		t.Run(tc.name, func(t *testing.T) {
			fc := newFake(t, 3, "t", 1)
			p := newProducer(t, fc, Linger(0), WithAcks(AcksLeader))
			ctx := ctxT(t)
			if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("r0")}); err != nil {
				t.Fatal(err)
			}
			tc.kill(fc)
			err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("r1")})
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("err = %v, want ErrOutcomeUnknown", err)
			}
			recs, rerr := fc.Records("t", 0)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if want := map[bool]int{false: 1, true: 2}[tc.written]; len(recs) != want {
				t.Fatalf("log holds %d records, want %d", len(recs), want)
			}
			if fc.Calls("Produce") != 2 {
				t.Fatalf("%d produce calls, want 2 (no resend)", fc.Calls("Produce"))
			}
		})
	}
	t.Run("not leader is retried", func(t *testing.T) {
		fc := newFake(t, 3, "t", 1)
		fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, Count: 2,
			Code: connect.CodeFailedPrecondition, Reason: commonv1.Reason_REASON_NOT_LEADER})
		p := newProducer(t, fc, Linger(0), WithAcks(AcksLeader))
		r := &Record{Topic: "t", Value: []byte("r0")}
		if err := p.ProduceSync(ctxT(t), r); err != nil {
			t.Fatal(err)
		}
		if recs, _ := fc.Records("t", 0); len(recs) != 1 || r.Offset != 0 {
			t.Fatalf("log holds %d records, record at %d", len(recs), r.Offset)
		}
	})
}

func TestUnwritten(t *testing.T) {
	withReason := func(code connect.Code, r commonv1.Reason) error {
		return &Error{Code: code, Reason: r}
	}
	reset := fromConnect(connect.NewError(connect.CodeCanceled, fmt.Errorf("read: %w", errConnReset)))
	for _, tc := range []struct {
		err  error
		acks Acks
		want bool
	}{
		{fmt.Errorf("x: %w", ErrNoLeader), AcksLeader, true},
		{withReason(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER), AcksLeader, true},
		{withReason(connect.CodeFailedPrecondition, commonv1.Reason_REASON_NOT_LEADER), AcksAll, false},
		{withReason(connect.CodeAborted, commonv1.Reason_REASON_FENCED_LEADER_EPOCH), AcksAll, true},
		{withReason(connect.CodeUnavailable, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS), AcksAll, true},
		{withReason(connect.CodeUnavailable, commonv1.Reason_REASON_NOT_ENOUGH_REPLICAS_AFTER_APPEND), AcksAll, false},
		{withReason(connect.CodeDeadlineExceeded, commonv1.Reason_REASON_REQUEST_TIMED_OUT), AcksAll, false},
		{reset, AcksLeader, false},
		{fromConnect(connect.NewError(connect.CodeUnavailable, errors.New("x"))), AcksLeader, false},
	} {
		if got := unwritten(tc.err, tc.acks); got != tc.want {
			t.Errorf("unwritten(%v, %v) = %v, want %v", tc.err, tc.acks, got, tc.want)
		}
	}
}

// errConnReset is what reading a connection the peer reset returns.
var errConnReset = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}

// TestClassifyBrokenConnection: connect-go reports a connection reset under
// a call as CodeCanceled; it is retriable, unlike our own cancellation.
func TestClassifyBrokenConnection(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want action
	}{
		{connect.NewError(connect.CodeCanceled, errConnReset), actRefresh},
		{fromConnect(connect.NewError(connect.CodeCanceled, errConnReset)), actRefresh},
		{fromConnect(connect.NewError(connect.CodeUnknown, io.ErrUnexpectedEOF)), actRefresh},
		{connect.NewError(connect.CodeCanceled, errors.New("server request context ended")), actRefresh},
		{connect.NewError(connect.CodeCanceled, context.Canceled), actFail},
		{fmt.Errorf("x: %w", context.Canceled), actFail},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
