package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/tests/harness"
)

// testForwarding: a door (the gateway) calls the service that owns the
// data in its caller's name, and the owner decides (lib/guard's
// forward.go; docs/security.md, "One place for each rule"). The owner's
// audit log names the caller and the door it came through; a user who
// names another principal itself is refused.
func (s *secureCluster) testForwarding(t *testing.T) {
	ctx := harness.Deadline(t, 3*time.Minute)
	const topic, group, user = "fwd-topic", "fwd-group", "fwd-frank"
	who := "User:" + user
	s.c.CreateTopic(ctx, topic, 1, 1, nil)
	leader := s.leaderOf(ctx, topic, 0)
	frank := s.c.CreateUser(ctx, user)
	createACLs(ctx, t, s.c, acl.Spec{Principal: who, Allow: "write", Topic: topic})

	// Frank may write, and sends a produce naming the super user as its
	// principal: refused before anything is read.
	asAdmin := connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set(authn.ForwardHeader, "User:admin")
			return next(ctx, req)
		}
	}))
	st := storagev1connect.NewStorageServiceClient(s.http(frank), leader.URL, asAdmin)
	_, err := produceDirect(ctx, t, st, topic, 0, "x")
	wantRefused(t, "produce naming User:admin", err, connect.CodeUnauthenticated,
		"unauthenticated: "+who+" may not send "+authn.ForwardHeader+": only a Strata service that serves users (the gateway, a Kafka listener) may act for another principal")

	// Through the gateway, the leader checks frank: his fetch is refused
	// there, in his name, and its audit line names the gateway too.
	deniedRead := func(l auditLine) bool {
		return l.str("event") == "denied" && l.str("principal") == who && l.str("resource") == "topic "+topic && l.str("operation") == "read"
	}
	before := len(auditLines(t, leader, deniedRead))
	_, err = s.gateway(frank).FetchJSON(ctx, connect.NewRequest(&gatewayv1.FetchJSONRequest{Topic: topic, Offset: -2}))
	wantRefused(t, "fetch through the gateway", err, connect.CodePermissionDenied, denied(who, acl.Read, acl.Topic, topic))
	lines := auditLines(t, leader, deniedRead)
	if len(lines) != before+1 || !strings.HasPrefix(lines[len(lines)-1].str("via"), "Service:gateway") {
		t.Errorf("the leader's audit log has %d new lines of frank's refused read, want 1 via the gateway: %v", len(lines)-before, lines[min(before, len(lines)):])
	}
	// And his produce through the gateway is written, in his name.
	res, err := s.gateway(frank).ProduceJSON(ctx, connect.NewRequest(&gatewayv1.ProduceJSONRequest{Topic: topic,
		Records: []*gatewayv1.JSONRecord{{ValueData: &gatewayv1.JSONRecord_Value{Value: "through the gateway"}}}}))
	if err != nil || res.Msg.GetResults()[0].GetError() != nil {
		t.Fatalf("produce through the gateway as frank: %v %v", err, res)
	}

	// The coordinator decides on groups: frank may not describe the
	// group, and the coordinator's audit line says so.
	deniedGroup := func(l auditLine) bool {
		return l.str("event") == "denied" && l.str("principal") == who && l.str("resource") == "group "+group
	}
	before = len(auditLines(t, s.co, deniedGroup))
	_, err = s.gateway(frank).DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: group}))
	wantRefused(t, "describe group through the gateway", err, connect.CodePermissionDenied, denied(who, acl.Describe, acl.Group, group))
	if lines := auditLines(t, s.co, deniedGroup); len(lines) != before+1 || !strings.HasPrefix(lines[len(lines)-1].str("via"), "Service:gateway") {
		t.Errorf("the coordinator's audit log has %d new lines of frank's refused describe, want 1 via the gateway", len(lines)-before)
	}
}
