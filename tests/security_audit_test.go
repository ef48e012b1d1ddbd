package tests

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/token"
	"github.com/strata-mq/strata/tests/harness"
)

// The audit log (issue 37; docs/security.md, "Audit log"): each security
// event writes one line to the audit log of the process that decided it
// (--audit-log, which the harness sets per process in a secure cluster),
// and a flood of refusals writes a bounded number of lines whose
// "suppressed" summaries still account for every event.

// auditLine is one decoded line of an audit log.
type auditLine map[string]any

func (l auditLine) str(k string) string { s, _ := l[k].(string); return s }

// auditLines decodes n's audit log, keeping the lines keep accepts.
func auditLines(t *testing.T, n *harness.Node, keep func(auditLine) bool) []auditLine {
	t.Helper()
	raw, err := n.AuditLines()
	if err != nil {
		t.Fatal(err)
	}
	var out []auditLine
	for _, r := range raw {
		var l auditLine
		if err := json.Unmarshal([]byte(r), &l); err != nil {
			t.Fatalf("%s audit log: line %q is not JSON: %v", n.Name(), r, err)
		}
		if keep(l) {
			out = append(out, l)
		}
	}
	return out
}

// about selects the lines of event kind about resource.
func about(kind, resource string) func(auditLine) bool {
	return func(l auditLine) bool { return l.str("event") == kind && l.str("resource") == resource }
}

// wantOneAuditLine checks that n's audit log has exactly one more line of
// event kind about resource than the before it had (other subtests may
// have written some), with the fields in want.
func wantOneAuditLine(t *testing.T, n *harness.Node, what, kind, resource string, before int, want map[string]string) {
	t.Helper()
	got := auditLines(t, n, about(kind, resource))
	if len(got) != before+1 {
		t.Errorf("%s: %d new %s lines about %q in %s's audit log, want exactly 1: %v", what, len(got)-before, kind, resource, n.Name(), got[min(before, len(got)):])
		return
	}
	l := got[before]
	if l.str("logger") != "audit" || l["time"] == nil {
		t.Errorf("%s: line %v: want logger=audit and a time", what, l)
	}
	for _, k := range []string{"principal", "source", "operation", "outcome", "reason"} {
		if _, ok := l[k]; !ok {
			t.Errorf("%s: line %v has no %q", what, l, k)
		}
	}
	for k, v := range want {
		if l.str(k) != v {
			t.Errorf("%s: %s = %q, want %q (line %v)", what, k, l.str(k), v, l)
		}
	}
	if l.str("source") == "" {
		// Every call here comes over the network, so its address is known.
		t.Errorf("%s: line %v has no source address", what, l)
	}
}

func (s *secureCluster) testAudit(t *testing.T) {
	ctx := harness.Deadline(t, 5*time.Minute)
	const topic, user, eve = "audit-topic", "audit-carol", "User:audit-eve"
	ctlNode := s.c.Controller(1)

	// A user create, an ACL create and a quota set, as the admin, each at
	// the controller, which makes the change.
	s.c.CreateUser(ctx, user)
	wantOneAuditLine(t, ctlNode, "user create", "user_change", "user "+user, 0,
		map[string]string{"principal": "User:admin", "operation": "create", "outcome": "success"})

	createACLs(ctx, t, s.c, acl.Spec{Principal: eve, Allow: "read", Topic: topic})
	wantOneAuditLine(t, ctlNode, "ACL create", "acl_change", "acl "+eve+" allow read topic "+topic, 0,
		map[string]string{"principal": "User:admin", "operation": "create", "outcome": "success"})

	if _, err := s.c.Ctl().SetQuota(ctx, connect.NewRequest(&controllerv1.SetQuotaRequest{Quota: &commonv1.Quota{
		Principal: eve, ProduceBytesPerSecond: 1 << 20}})); err != nil {
		t.Fatalf("set quota: %v", err)
	}
	wantOneAuditLine(t, ctlNode, "quota set", "quota_change", "quota "+eve, 0,
		map[string]string{"principal": "User:admin", "operation": "set", "outcome": "success",
			"reason": fmt.Sprintf("produce_bytes_per_second=%d fetch_bytes_per_second=0", 1<<20)})

	// A bad token at the gateway: well formed, never issued.
	tok, err := token.New()
	if err != nil {
		t.Fatal(err)
	}
	bad := harness.Credentials{CA: s.c.CAFile(), Token: tok.Reveal()}
	const listTopics = "/strata.gateway.v1.GatewayService/ListTopics"
	failuresBefore := len(auditLines(t, s.gw, about("authentication_failure", listTopics)))
	_, err = s.gateway(bad).ListTopics(ctx, connect.NewRequest(&gatewayv1.ListTopicsRequest{}))
	if code, _ := refusal(err); code != connect.CodeUnauthenticated {
		t.Fatalf("ListTopics with an unknown token: %v, want unauthenticated", err)
	}
	wantOneAuditLine(t, s.gw, "bad token", "authentication_failure", listTopics, failuresBefore,
		map[string]string{"principal": "", "operation": "authenticate", "outcome": "failure", "reason": "unknown or revoked token"})

	// A denied produce at the leader, which owns the partition.
	s.c.CreateTopic(ctx, topic, 1, 1, nil)
	leader := s.leaderOf(ctx, topic, 0)
	st := s.storage(s.c.UserCert("audit-eve"), leader)
	_, err = produceDirect(ctx, t, st, topic, 0, "x")
	wantRefused(t, "produce as eve", err, connect.CodePermissionDenied, denied(eve, acl.Write, acl.Topic, topic))
	wantOneAuditLine(t, leader, "denied produce", "denied", "topic "+topic, 0,
		map[string]string{"principal": eve, "operation": "write", "outcome": "denied", "reason": "no ACL allows it"})

	// A flood: 10,000 denied produces. Eve's denied lines are sampled, so
	// the flood adds a bounded number of lines, and the "suppressed"
	// summary written before her next line counts the rest.
	eveDenied := func(l auditLine) bool {
		return (l.str("event") == "denied" && l.str("principal") == eve) ||
			(l.str("event") == "suppressed" && l.str("suppressed_event") == "denied" && l.str("principal") == eve)
	}
	before := len(auditLines(t, leader, eveDenied))
	const flood, workers = 10000, 8
	var sent, unexpected atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(1) <= flood {
				_, err := produceDirect(ctx, t, st, topic, 0, "x")
				if code, _ := refusal(err); code != connect.CodePermissionDenied {
					unexpected.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	sent.Store(flood)
	if n := unexpected.Load(); n > 0 {
		t.Fatalf("flood: %d of %d produces were not refused with permission denied", n, flood)
	}
	floodLines := len(auditLines(t, leader, eveDenied)) - before
	// The sampler's defaults: a burst of 20, then a line a second, and
	// at most one summary per line let through.
	bound := 20 + 2*(int(took/time.Second)+1)
	t.Logf("flood of %d denied produces in %v wrote %d audit lines (bound %d)", flood, took.Round(time.Millisecond), floodLines, bound)
	if floodLines > bound || floodLines > flood/10 {
		t.Fatalf("flood of %d denied produces in %v wrote %d audit lines, want at most %d", flood, took, floodLines, bound)
	}

	// Once the bucket refills, eve's next denied produce writes the
	// summary of what was left out since the last (the flood may have
	// written some already), then its own line.
	var summarized int64
	testwait.Until(t, 60*time.Second, "a suppressed summary for eve's flood", func() error {
		sent.Add(1)
		_, err := produceDirect(ctx, t, st, topic, 0, "x")
		if code, _ := refusal(err); code != connect.CodePermissionDenied {
			return fmt.Errorf("produce: %v, want permission denied", err)
		}
		summarized = 0
		fresh := false
		for i, l := range auditLines(t, leader, eveDenied)[before:] {
			if l.str("event") == "suppressed" {
				n, _ := l["suppressed"].(float64)
				summarized += int64(n)
				fresh = fresh || i >= floodLines
			}
		}
		if !fresh {
			return fmt.Errorf("no summary written after the flood yet")
		}
		return nil
	})
	lines := auditLines(t, leader, eveDenied)[before:]
	written := int64(0)
	for _, l := range lines {
		if l.str("event") == "denied" {
			written++
		}
	}
	// Every refusal of the flood is a line or counted in a summary; the
	// refusals after the last summary may still be pending.
	if got := written + summarized; got < flood || got > sent.Load() {
		t.Fatalf("%d denied lines + %d suppressed = %d, want between the flood's %d and the %d sent", written, summarized, got, flood, sent.Load())
	}
}
