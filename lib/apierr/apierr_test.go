package apierr

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
)

func TestNewCarriesOneDetailWithTheSameCode(t *testing.T) {
	e := New(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", "t")
	if e.Code() != connect.CodeNotFound || e.Message() != `topic "t" does not exist` {
		t.Fatalf("got %v %q", e.Code(), e.Message())
	}
	if n := len(e.Details()); n != 1 {
		t.Fatalf("details = %d, want 1", n)
	}
	d := DetailOf(e)
	want := &commonv1.ErrorDetail{Code: commonv1.Code_CODE_NOT_FOUND, Reason: commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION, Message: `topic "t" does not exist`}
	if !proto.Equal(d, want) {
		t.Fatalf("detail = %v, want %v", d, want)
	}
}

func TestErrorRoundTripsTheHint(t *testing.T) {
	d := &commonv1.ErrorDetail{
		Code: commonv1.Code_CODE_FAILED_PRECONDITION, Reason: commonv1.Reason_REASON_NOT_LEADER, Message: "not the leader",
		Hint: &commonv1.ErrorDetail_Leader{Leader: &commonv1.LeaderHint{LeaderId: 3, LeaderAddress: "http://n3", LeaderEpoch: 7}},
	}
	// Wrapped, as a caller's fmt.Errorf would leave it.
	err := fmt.Errorf("produce: %w", Error(d))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("code = %v", connect.CodeOf(err))
	}
	if got := DetailOf(err); !proto.Equal(got, d) {
		t.Fatalf("detail = %v, want %v", got, d)
	}
	if ReasonOf(err) != commonv1.Reason_REASON_NOT_LEADER {
		t.Fatalf("reason = %v", ReasonOf(err))
	}
}

func TestErrorWithoutCodeIsUnknown(t *testing.T) {
	if c := Error(&commonv1.ErrorDetail{Message: "m"}).Code(); c != connect.CodeUnknown {
		t.Fatalf("code = %v, want unknown", c)
	}
}

func TestDetailOfWithoutDetail(t *testing.T) {
	for _, err := range []error{nil, errors.New("plain"), connect.NewError(connect.CodeUnavailable, errors.New("x"))} {
		if d := DetailOf(err); d != nil {
			t.Errorf("DetailOf(%v) = %v, want nil", err, d)
		}
		if r := ReasonOf(err); r != commonv1.Reason_REASON_UNSPECIFIED {
			t.Errorf("ReasonOf(%v) = %v", err, r)
		}
	}
}

func TestAsDetail(t *testing.T) {
	attached := Detail(connect.CodeAborted, commonv1.Reason_REASON_FENCED_LEADER_EPOCH, "stale")
	cases := []struct {
		name string
		err  error
		want *commonv1.ErrorDetail
	}{
		{"nil", nil, nil},
		{"attached", Error(attached), attached},
		{"connect only", connect.NewError(connect.CodeUnavailable, errors.New("down")), &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNAVAILABLE, Message: "down"}},
		{"plain", errors.New("boom"), &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNKNOWN, Message: "boom"}},
	}
	for _, c := range cases {
		if got := AsDetail(c.err); !proto.Equal(got, c.want) {
			t.Errorf("%s: AsDetail = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestForward(t *testing.T) {
	if Forward(nil) != nil {
		t.Fatal("Forward(nil) != nil")
	}
	up := New(connect.CodeResourceExhausted, commonv1.Reason_REASON_RECORD_TOO_LARGE, "too large")
	up.Meta().Set("X-Upstream", "1")
	got := Forward(up)
	var ce *connect.Error
	if !errors.As(got, &ce) || ce.Code() != connect.CodeResourceExhausted || ce.Message() != "too large" {
		t.Fatalf("Forward = %v", got)
	}
	if ce.Meta().Get("X-Upstream") != "" {
		t.Fatal("upstream headers were forwarded")
	}
	if !proto.Equal(DetailOf(got), DetailOf(up)) {
		t.Fatal("detail was not forwarded")
	}
	if c := connect.CodeOf(Forward(errors.New("local"))); c != connect.CodeUnknown {
		t.Fatalf("plain error forwarded as %v", c)
	}
}
