package kafka

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/guard"
)

// aclGateway keeps ACLs as the controller does: CreateAcls all or none
// (the first invalid binding refuses the call), an existing binding not
// added twice; DescribeAcls and DeleteAcls with its exact-match filter
// (set fields equal, unset ones anything).
type aclGateway struct {
	fakeGateway
	acls  []*commonv1.AclBinding
	calls int
}

func (g *aclGateway) CreateAcls(_ context.Context, req *connect.Request[gatewayv1.CreateAclsRequest]) (*connect.Response[gatewayv1.CreateAclsResponse], error) {
	g.calls++
	for i, b := range req.Msg.GetAcls() {
		if _, err := guard.BindingFromProto(b); err != nil {
			return nil, apierr.New(connect.CodeInvalidArgument, 0, "ACL binding %d: %v", i+1, err)
		}
	}
	for _, b := range req.Msg.GetAcls() {
		if !slices.ContainsFunc(g.acls, func(x *commonv1.AclBinding) bool { return proto.Equal(x, b) }) {
			g.acls = append(g.acls, proto.Clone(b).(*commonv1.AclBinding))
		}
	}
	return connect.NewResponse(&gatewayv1.CreateAclsResponse{}), nil
}

func filterMatch(f *controllerv1.AclFilter, b *commonv1.AclBinding) bool {
	return (f.GetPrincipal() == "" || f.GetPrincipal() == b.GetPrincipal()) &&
		(f.GetPermission() == 0 || f.GetPermission() == b.GetPermission()) &&
		(f.GetOperation() == 0 || f.GetOperation() == b.GetOperation()) &&
		(f.GetResourceType() == 0 || f.GetResourceType() == b.GetResourceType()) &&
		(f.GetResourceName() == "" || f.GetResourceName() == b.GetResourceName()) &&
		(f.GetPatternType() == 0 || f.GetPatternType() == b.GetPatternType())
}

func (g *aclGateway) DescribeAcls(_ context.Context, req *connect.Request[gatewayv1.DescribeAclsRequest]) (*connect.Response[gatewayv1.DescribeAclsResponse], error) {
	g.calls++
	out := &gatewayv1.DescribeAclsResponse{}
	for _, b := range g.acls {
		if filterMatch(req.Msg.GetFilter(), b) {
			out.Acls = append(out.Acls, b)
		}
	}
	return connect.NewResponse(out), nil
}

func (g *aclGateway) DeleteAcls(_ context.Context, req *connect.Request[gatewayv1.DeleteAclsRequest]) (*connect.Response[gatewayv1.DeleteAclsResponse], error) {
	g.calls++
	out := &gatewayv1.DeleteAclsResponse{}
	g.acls = slices.DeleteFunc(g.acls, func(b *commonv1.AclBinding) bool {
		if filterMatch(req.Msg.GetFilter(), b) {
			out.Deleted = append(out.Deleted, b)
			return true
		}
		return false
	})
	return connect.NewResponse(out), nil
}

func creation(rt kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType, principal, host string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) kmsg.CreateACLsRequestCreation {
	c := kmsg.NewCreateACLsRequestCreation()
	c.ResourceType, c.ResourceName, c.ResourcePatternType = rt, name, pt
	c.Principal, c.Host, c.Operation, c.PermissionType = principal, host, op, perm
	return c
}

// stored is a store's bindings as sorted lines.
func stored(acls []*commonv1.AclBinding) []string {
	var out []string
	for _, b := range acls {
		ab, _ := guard.BindingFromProto(b)
		out = append(out, ab.String())
	}
	sort.Strings(out)
	return out
}

const (
	literal  = kmsg.ACLResourcePatternTypeLiteral
	prefixed = kmsg.ACLResourcePatternTypePrefixed
	allow    = kmsg.ACLPermissionTypeAllow
	deny     = kmsg.ACLPermissionTypeDeny
)

// aclBridge is a bridge on an aclGateway holding four bindings created
// through CreateAcls: User:alice allow read on topic orders, deny write
// on topics prefixed ord; User:* allow describe on every group; User:ops
// allow alter on the cluster.
func aclBridge(t *testing.T) (*Bridge, *aclGateway, context.Context, context.Context) {
	t.Helper()
	g, reader, admin := clusterGuard(t)
	gw := &aclGateway{}
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient, Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrCreateACLsRequest()
	req.Creations = []kmsg.CreateACLsRequestCreation{
		creation(kmsg.ACLResourceTypeTopic, "orders", literal, "User:alice", "*", kmsg.ACLOperationRead, allow),
		creation(kmsg.ACLResourceTypeTopic, "ord", prefixed, "User:alice", "*", kmsg.ACLOperationWrite, deny),
		creation(kmsg.ACLResourceTypeGroup, "*", literal, "User:*", "*", kmsg.ACLOperationDescribe, allow),
		creation(kmsg.ACLResourceTypeCluster, "kafka-cluster", literal, "User:ops", "*", kmsg.ACLOperationAlter, allow),
	}
	resp, err := b.createAcls(admin, 3, req)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range decoded(t, resp, 3).(*kmsg.CreateACLsResponse).Results {
		if r.ErrorCode != 0 {
			t.Fatalf("creation %d: %d %v", i, r.ErrorCode, r.ErrorMessage)
		}
	}
	return b, gw, reader, admin
}

// TestCreateAclsMapping: Kafka's bindings become Strata's field for
// field; what Strata cannot hold (a resource type or operation it has
// not, a host, a principal of another type) and what Kafka refuses (a
// pattern type other than LITERAL and PREFIXED, ANY, a cluster not named
// kafka-cluster, an empty name, a principal without a type) is
// INVALID_REQUEST with the reason, on its own, the others created.
func TestCreateAclsMapping(t *testing.T) {
	b, gw, _, admin := aclBridge(t)
	want := []string{
		"User:* allow describe group *",
		"User:alice allow read topic orders",
		"User:alice deny write topic ord (prefixed)",
		"User:ops allow alter cluster kafka-cluster",
	}
	if got := stored(gw.acls); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stored %q, want %q", got, want)
	}
	req := kmsg.NewPtrCreateACLsRequest()
	req.Creations = []kmsg.CreateACLsRequestCreation{
		creation(kmsg.ACLResourceTypeDelegationToken, "tok", literal, "User:bob", "*", kmsg.ACLOperationDescribe, allow),
		creation(kmsg.ACLResourceTypeCluster, "kafka-cluster", literal, "User:bob", "*", kmsg.ACLOperationIdempotentWrite, allow),
		creation(kmsg.ACLResourceTypeTopic, "t", literal, "User:bob", "10.0.0.1", kmsg.ACLOperationRead, allow),
		creation(kmsg.ACLResourceTypeCluster, "other", literal, "User:bob", "*", kmsg.ACLOperationAlter, allow),
		creation(kmsg.ACLResourceTypeTopic, "t", kmsg.ACLResourcePatternTypeMatch, "User:bob", "*", kmsg.ACLOperationRead, allow),
		creation(kmsg.ACLResourceTypeTopic, "t", literal, "bob", "*", kmsg.ACLOperationRead, allow),
		creation(kmsg.ACLResourceTypeTopic, "t", literal, "Group:devs", "*", kmsg.ACLOperationRead, allow),
		creation(kmsg.ACLResourceTypeTopic, "", literal, "User:bob", "*", kmsg.ACLOperationRead, allow),
		creation(kmsg.ACLResourceTypeTopic, "t", literal, "User:bob", "*", kmsg.ACLOperationAny, allow),
		creation(kmsg.ACLResourceTypeTopic, "t", literal, "User:bob", "*", kmsg.ACLOperationAll, allow),
	}
	resp, err := b.createAcls(admin, 2, req)
	if err != nil {
		t.Fatal(err)
	}
	results := decoded(t, resp, 2).(*kmsg.CreateACLsResponse).Results
	for i, r := range results {
		wantCode := kerr.InvalidRequest.Code
		if i == len(results)-1 {
			wantCode = 0
		}
		if r.ErrorCode != wantCode || (wantCode != 0 && (r.ErrorMessage == nil || *r.ErrorMessage == "")) {
			t.Errorf("creation %d: code %d message %v, want %d", i, r.ErrorCode, r.ErrorMessage, wantCode)
		}
	}
	if msg := results[3].ErrorMessage; msg == nil || *msg != "The only valid name for the CLUSTER resource is kafka-cluster" {
		t.Errorf("cluster name: %v", msg)
	}
	if got := stored(gw.acls); len(got) != 5 || !slices.Contains(got, "User:bob allow all topic t") {
		t.Errorf("stored %q", got)
	}

	// A transactional id is a resource Strata holds (kafka-acls.sh
	// --transactional-id).
	req = kmsg.NewPtrCreateACLsRequest()
	req.Creations = []kmsg.CreateACLsRequestCreation{creation(kmsg.ACLResourceTypeTransactionalId, "etl-", kmsg.ACLResourcePatternTypePrefixed, "User:bob", "*", kmsg.ACLOperationWrite, allow)}
	resp, err = b.createAcls(admin, 2, req)
	if err != nil {
		t.Fatal(err)
	}
	if r := decoded(t, resp, 2).(*kmsg.CreateACLsResponse).Results[0]; r.ErrorCode != 0 {
		t.Errorf("transactional id: code %d message %v", r.ErrorCode, r.ErrorMessage)
	}
	if got := stored(gw.acls); !slices.Contains(got, "User:bob allow write transactional-id etl- (prefixed)") {
		t.Errorf("stored %q, want bob's transactional id", got)
	}

	// v0 carries no pattern type: literal.
	req = kmsg.NewPtrCreateACLsRequest()
	req.Creations = []kmsg.CreateACLsRequestCreation{creation(kmsg.ACLResourceTypeTopic, "v0", kmsg.ACLResourcePatternTypeUnknown, "User:bob", "*", kmsg.ACLOperationRead, allow)}
	if resp, _ := b.createAcls(admin, 0, req); decoded(t, resp, 0).(*kmsg.CreateACLsResponse).Results[0].ErrorCode != 0 || !slices.Contains(stored(gw.acls), "User:bob allow read topic v0") {
		t.Errorf("v0: stored %q", stored(gw.acls))
	}
}

func describeFilter(rt kmsg.ACLResourceType, name *string, pt kmsg.ACLResourcePatternType) *kmsg.DescribeACLsRequest {
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType, req.ResourceName, req.ResourcePatternType = rt, name, pt
	req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	return req
}

// described is an answer as lines "type name pattern principal host op perm".
func described(t *testing.T, resp kmsg.Response, version int16) (int16, []string) {
	t.Helper()
	r := decoded(t, resp, version).(*kmsg.DescribeACLsResponse)
	var out []string
	for _, res := range r.Resources {
		for _, a := range res.ACLs {
			out = append(out, fmt.Sprintf("%s %s %s %s %s %s %s", res.ResourceType, res.ResourceName, res.ResourcePatternType, a.Principal, a.Host, a.Operation, a.PermissionType))
		}
	}
	sort.Strings(out)
	return r.ErrorCode, out
}

// TestDescribeAclsFilters: Kafka's filter semantics over the stored
// bindings: ANY and null match all; MATCH with a name matches the literal
// name, the literal "*" and the prefixes of the name; LITERAL and
// PREFIXED match exactly; a host other than "*" or an operation Strata
// has not matches nothing; an UNKNOWN element is INVALID_REQUEST.
func TestDescribeAclsFilters(t *testing.T) {
	b, _, _, admin := aclBridge(t)
	name := func(s string) *string { return &s }
	topic, group := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup
	for _, tc := range []struct {
		name string
		req  *kmsg.DescribeACLsRequest
		want []string
	}{
		{"everything", describeFilter(kmsg.ACLResourceTypeAny, nil, kmsg.ACLResourcePatternTypeAny), []string{
			"CLUSTER kafka-cluster LITERAL User:ops * ALTER ALLOW",
			"GROUP * LITERAL User:* * DESCRIBE ALLOW",
			"TOPIC ord PREFIXED User:alice * WRITE DENY",
			"TOPIC orders LITERAL User:alice * READ ALLOW",
		}},
		{"match orders", describeFilter(topic, name("orders"), kmsg.ACLResourcePatternTypeMatch), []string{
			"TOPIC ord PREFIXED User:alice * WRITE DENY",
			"TOPIC orders LITERAL User:alice * READ ALLOW",
		}},
		{"match other", describeFilter(topic, name("other"), kmsg.ACLResourcePatternTypeMatch), nil},
		{"match a group", describeFilter(group, name("g1"), kmsg.ACLResourcePatternTypeMatch), []string{"GROUP * LITERAL User:* * DESCRIBE ALLOW"}},
		{"literal orders", describeFilter(topic, name("orders"), literal), []string{"TOPIC orders LITERAL User:alice * READ ALLOW"}},
		{"literal ord", describeFilter(topic, name("ord"), literal), nil},
		{"prefixed ord", describeFilter(topic, name("ord"), prefixed), []string{"TOPIC ord PREFIXED User:alice * WRITE DENY"}},
		{"any ord", describeFilter(topic, name("ord"), kmsg.ACLResourcePatternTypeAny), []string{"TOPIC ord PREFIXED User:alice * WRITE DENY"}},
		{"match without a name", describeFilter(topic, nil, kmsg.ACLResourcePatternTypeMatch), []string{
			"TOPIC ord PREFIXED User:alice * WRITE DENY",
			"TOPIC orders LITERAL User:alice * READ ALLOW",
		}},
		{"another host", func() *kmsg.DescribeACLsRequest {
			r := describeFilter(kmsg.ACLResourceTypeAny, nil, kmsg.ACLResourcePatternTypeAny)
			r.Host = name("10.0.0.1")
			return r
		}(), nil},
		{"principal and permission", func() *kmsg.DescribeACLsRequest {
			r := describeFilter(kmsg.ACLResourceTypeAny, nil, kmsg.ACLResourcePatternTypeAny)
			r.Principal, r.PermissionType = name("User:alice"), deny
			return r
		}(), []string{"TOPIC ord PREFIXED User:alice * WRITE DENY"}},
		{"operation Strata has not", func() *kmsg.DescribeACLsRequest {
			r := describeFilter(kmsg.ACLResourceTypeAny, nil, kmsg.ACLResourcePatternTypeAny)
			r.Operation = kmsg.ACLOperationIdempotentWrite
			return r
		}(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := b.describeAcls(admin, 3, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			code, got := described(t, resp, 3)
			if code != 0 || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("code %d, %q, want %q", code, got, tc.want)
			}
		})
	}
	req := describeFilter(topic, nil, kmsg.ACLResourcePatternTypeAny)
	req.Operation = kmsg.ACLOperationUnknown
	if resp, _ := b.describeAcls(admin, 3, req); decoded(t, resp, 3).(*kmsg.DescribeACLsResponse).ErrorCode != kerr.InvalidRequest.Code {
		t.Error("an UNKNOWN operation is not INVALID_REQUEST")
	}
	// v0: no pattern type, so LITERAL.
	resp, _ := b.describeAcls(admin, 0, describeFilter(topic, name("ord"), kmsg.ACLResourcePatternTypeMatch))
	if _, got := described(t, resp, 0); len(got) != 0 {
		t.Errorf("v0 literal ord: %q", got)
	}
}

// TestDeleteAclsFilters: each filter deletes what it matches and answers
// it; MATCH with a name deletes the literal name and its prefixes and
// leaves the rest; a filter matching nothing answers none.
func TestDeleteAclsFilters(t *testing.T) {
	b, gw, _, admin := aclBridge(t)
	name := func(s string) *string { return &s }
	filter := func(rt kmsg.ACLResourceType, n *string, pt kmsg.ACLResourcePatternType) kmsg.DeleteACLsRequestFilter {
		f := kmsg.NewDeleteACLsRequestFilter()
		f.ResourceType, f.ResourceName, f.ResourcePatternType = rt, n, pt
		f.Operation, f.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		return f
	}
	req := kmsg.NewPtrDeleteACLsRequest()
	req.Filters = []kmsg.DeleteACLsRequestFilter{
		filter(kmsg.ACLResourceTypeTopic, name("orders"), kmsg.ACLResourcePatternTypeMatch),
		filter(kmsg.ACLResourceTypeTopic, name("nothing"), literal),
		filter(kmsg.ACLResourceTypeCluster, nil, kmsg.ACLResourcePatternTypeAny),
	}
	resp, err := b.deleteAcls(admin, 3, req)
	if err != nil {
		t.Fatal(err)
	}
	results := decoded(t, resp, 3).(*kmsg.DeleteACLsResponse).Results
	var got []string
	for i, r := range results {
		if r.ErrorCode != 0 {
			t.Fatalf("filter %d: %d %v", i, r.ErrorCode, r.ErrorMessage)
		}
		for _, m := range r.MatchingACLs {
			got = append(got, fmt.Sprintf("%d %s %s %s %s %s %s", i, m.ResourceName, m.ResourcePatternType, m.Principal, m.Host, m.Operation, m.PermissionType))
		}
	}
	sort.Strings(got)
	want := []string{
		"0 ord PREFIXED User:alice * WRITE DENY",
		"0 orders LITERAL User:alice * READ ALLOW",
		"2 kafka-cluster LITERAL User:ops * ALTER ALLOW",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("deleted %q, want %q", got, want)
	}
	if left := stored(gw.acls); fmt.Sprint(left) != "[User:* allow describe group *]" {
		t.Fatalf("left %q", left)
	}
}

// TestAclsNeedClusterACL: CreateAcls and DeleteAcls need alter on the
// cluster, DescribeAcls describe: CLUSTER_AUTHORIZATION_FAILED on every
// creation, every filter, or at the top, and nothing reaches the store.
func TestAclsNeedClusterACL(t *testing.T) {
	b, gw, reader, _ := aclBridge(t)
	calls := gw.calls
	creq := kmsg.NewPtrCreateACLsRequest()
	creq.Creations = []kmsg.CreateACLsRequestCreation{creation(kmsg.ACLResourceTypeTopic, "t", literal, "User:reader", "*", kmsg.ACLOperationAll, allow)}
	resp, _ := b.createAcls(reader, 3, creq)
	if r := decoded(t, resp, 3).(*kmsg.CreateACLsResponse).Results; r[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("create: %+v", r)
	}
	resp, _ = b.describeAcls(reader, 3, describeFilter(kmsg.ACLResourceTypeAny, nil, kmsg.ACLResourcePatternTypeAny))
	if code, got := described(t, resp, 3); code != kerr.ClusterAuthorizationFailed.Code || len(got) != 0 {
		t.Errorf("describe: %d %q", code, got)
	}
	dreq := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourcePatternType, f.Operation, f.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeMatch, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	dreq.Filters = append(dreq.Filters, f)
	resp, _ = b.deleteAcls(reader, 3, dreq)
	if r := decoded(t, resp, 3).(*kmsg.DeleteACLsResponse).Results; r[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code || len(r[0].MatchingACLs) != 0 {
		t.Errorf("delete: %+v", r)
	}
	if gw.calls != calls || len(gw.acls) != 4 {
		t.Fatalf("refused, yet %d calls reached the store (%d bindings)", gw.calls-calls, len(gw.acls))
	}

}
