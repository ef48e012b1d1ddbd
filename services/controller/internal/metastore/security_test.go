package metastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/token"
)

const (
	allow    = commonv1.AclPermission_ACL_PERMISSION_ALLOW
	deny     = commonv1.AclPermission_ACL_PERMISSION_DENY
	opRead   = commonv1.AclOperation_ACL_OPERATION_READ
	opWrite  = commonv1.AclOperation_ACL_OPERATION_WRITE
	opAlter  = commonv1.AclOperation_ACL_OPERATION_ALTER
	topicRT  = commonv1.AclResourceType_ACL_RESOURCE_TYPE_TOPIC
	groupRT  = commonv1.AclResourceType_ACL_RESOURCE_TYPE_GROUP
	cluster  = commonv1.AclResourceType_ACL_RESOURCE_TYPE_CLUSTER
	literal  = commonv1.AclPatternType_ACL_PATTERN_TYPE_LITERAL
	prefixed = commonv1.AclPatternType_ACL_PATTERN_TYPE_PREFIXED
)

func binding(principal string, perm commonv1.AclPermission, op commonv1.AclOperation, rt commonv1.AclResourceType, name string, pt commonv1.AclPatternType) *commonv1.AclBinding {
	return &commonv1.AclBinding{Principal: principal, Permission: perm, Operation: op, ResourceType: rt, ResourceName: name, PatternType: pt}
}

// bindingText renders bindings as lib/acl prints them, for comparisons.
func bindingText(t *testing.T, bs []*commonv1.AclBinding) []string {
	t.Helper()
	out := make([]string, len(bs))
	for i, b := range bs {
		ab, err := guard.BindingFromProto(b)
		if err != nil {
			t.Fatalf("binding %v: %v", b, err)
		}
		out[i] = ab.String()
	}
	return out
}

func TestUsers(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, 6*time.Second)
	cred, tok, err := s.CreateUser(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if cred.GetName() != "alice" || cred.GetCreatedMs() <= 0 || tok.IsZero() {
		t.Fatalf("created %v", cred)
	}
	if _, _, err := s.CreateUser(ctx, "bob@example.com"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateUser(ctx, "alice"); code(err) != commonv1.Code_CODE_ALREADY_EXISTS {
		t.Fatalf("second alice: %v", err)
	}

	// Only the hash is stored: the token's text is in no value, and the
	// stored hash authenticates the token as lib/token checks it.
	raw, err := s.Client().Get(ctx, Prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range raw.Kvs {
		if bytes.Contains(kv.Value, []byte(tok.Reveal())) {
			t.Fatalf("key %s holds the token", kv.Key)
		}
	}
	m, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var h token.Hashed
	copy(h[:], m.Users["alice"].GetTokenSha256())
	if !token.Verify(tok, h) {
		t.Fatal("stored hash does not verify the token")
	}
	// The SCRAM credentials derived at creation: both mechanisms, each
	// from the token with its own random salt and 4096 iterations.
	keys, err := guard.SCRAMFromProto(m.Users["alice"])
	if err != nil || len(keys) != 2 {
		t.Fatalf("alice's stored SCRAM credentials: %d, %v; want SHA-256 and SHA-512", len(keys), err)
	}
	for _, k := range keys {
		if !token.VerifySCRAM(tok, k) || k.Iterations != token.SCRAMIterations {
			t.Errorf("stored %s credential was not derived from the token with %d iterations", k.Mechanism, token.SCRAMIterations)
		}
	}
	if bytes.Equal(keys[0].Salt, keys[1].Salt) {
		t.Error("the SHA-256 and SHA-512 credentials share a salt")
	}
	users := map[string]token.Hashed{}
	for name, u := range m.Users {
		var h token.Hashed
		copy(h[:], u.GetTokenSha256())
		users[name] = h
	}
	tu, err := token.NewUsers(users)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := tu.Authenticate(tok); !ok || name != "alice" {
		t.Fatalf("token authenticates as %q, %v", name, ok)
	}

	list, err := s.ListUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range list {
		if len(u.GetTokenSha256()) != 0 || u.GetScramSha256() != nil || u.GetScramSha512() != nil {
			t.Fatalf("ListUsers returned %s's hash or SCRAM credentials", u.GetName())
		}
		if u.GetCreatedMs() <= 0 {
			t.Fatalf("ListUsers: %s has no creation time", u.GetName())
		}
		names = append(names, u.GetName())
	}
	if !slices.Equal(names, []string{"alice", "bob@example.com"}) {
		t.Fatalf("ListUsers: %v", names)
	}

	if err := s.DeleteUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUser(ctx, "alice"); code(err) != commonv1.Code_CODE_NOT_FOUND {
		t.Fatalf("deleting alice again: %v", err)
	}
	if list, _ := s.ListUsers(ctx); len(list) != 1 || list[0].GetName() != "bob@example.com" {
		t.Fatalf("after delete: %v", list)
	}
}

func TestUserNames(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, 6*time.Second)
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"svc.orders-1_x@corp", true},
		{strings.Repeat("n", 64), true},
		{"", false},
		{strings.Repeat("n", 65), false},
		{"a b", false},
		{"a/b", false}, // acl.CheckName allows / but the user name rule does not
		{"a+b", false},
		{"a:b", false},
		{"*", false},
		{"élise", false},
		{"ANONYMOUS", false},
	} {
		_, _, err := s.CreateUser(ctx, tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("CreateUser(%q): %v, want ok=%v", tc.name, err, tc.ok)
		}
		if !tc.ok && code(err) != commonv1.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("CreateUser(%q): code %v, want INVALID_ARGUMENT", tc.name, code(err))
		}
	}
}

// Two controllers creating the same user at once: exactly one wins.
func TestCreateUserRace(t *testing.T) {
	s := startStore(t, 6*time.Second)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, _, errs[i] = s.CreateUser(context.Background(), "carol") })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case code(err) != commonv1.Code_CODE_ALREADY_EXISTS:
			t.Errorf("racing create: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d racing creates succeeded, want 1", won, n)
	}
}

func TestAcls(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, 6*time.Second)
	all := []*commonv1.AclBinding{
		binding("User:alice", allow, opWrite, topicRT, "orders", literal),
		binding("User:alice", allow, opRead, topicRT, "orders", 0), // unset pattern: literal
		binding("User:alice", deny, opRead, topicRT, "orders-secret", literal),
		binding("User:alice", allow, opRead, groupRT, "billing", prefixed),
		binding("User:bob", allow, opAlter, cluster, acl.ClusterName, literal),
		binding("User:*", allow, opRead, topicRT, "public/", prefixed),
		binding("User:a/b", allow, opRead, topicRT, "c", literal), // slashes in the principal and the name stay distinct
		binding("User:a", allow, opRead, topicRT, "b/c", literal),
	}
	n, err := s.CreateAcls(ctx, all)
	if err != nil || n != len(all) {
		t.Fatalf("CreateAcls: %d new, %v", n, err)
	}
	// Creating them again writes nothing: no new revision.
	before, err := s.Client().Get(ctx, KeyClusterID)
	if err != nil {
		t.Fatal(err)
	}
	n, err = s.CreateAcls(ctx, all[:3])
	if err != nil || n != 0 {
		t.Fatalf("CreateAcls again: %d new, %v", n, err)
	}
	after, err := s.Client().Get(ctx, KeyClusterID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.Revision != before.Header.Revision {
		t.Fatalf("creating existing bindings moved the revision from %d to %d", before.Header.Revision, after.Header.Revision)
	}

	// A request with one bad binding writes none of its bindings.
	for _, bad := range []*commonv1.AclBinding{
		binding("Service:storage/1", allow, opRead, topicRT, "x", literal),
		binding("alice", allow, opRead, topicRT, "x", literal),
		binding("User:alice", allow, opRead, cluster, "x", literal),
		binding("User:alice", allow, opRead, cluster, acl.ClusterName, prefixed),
		binding("User:alice", allow, 0, topicRT, "x", literal),
		binding("User:alice", 0, opRead, topicRT, "x", literal),
		binding("User:alice", allow, opRead, 0, "x", literal),
		binding("User:alice", allow, opRead, topicRT, "", literal),
		binding("User:alice", allow, opRead, topicRT, "*", prefixed),
	} {
		good := binding("User:dave", allow, opRead, topicRT, "x", literal)
		if _, err := s.CreateAcls(ctx, []*commonv1.AclBinding{good, bad}); code(err) != commonv1.Code_CODE_INVALID_ARGUMENT ||
			!strings.Contains(err.Error(), "ACL binding 2") {
			t.Errorf("CreateAcls(%v): %v, want INVALID_ARGUMENT naming binding 2", bad, err)
		}
	}
	if got, _ := s.DescribeAcls(ctx, &controllerv1.AclFilter{Principal: "User:dave"}); len(got) != 0 {
		t.Fatalf("a refused request wrote %v", got)
	}

	everything, err := s.DescribeAcls(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"User:* allow read topic public/ (prefixed)",
		"User:a allow read topic b/c",
		"User:a/b allow read topic c",
		"User:alice allow read topic orders",
		"User:alice allow write topic orders",
		"User:alice deny read topic orders-secret",
		"User:alice allow read group billing (prefixed)",
		"User:bob allow alter cluster kafka-cluster",
	}
	if got := bindingText(t, everything); !slices.Equal(got, want) {
		t.Fatalf("DescribeAcls:\n got %q\nwant %q", got, want)
	}

	for _, tc := range []struct {
		name   string
		filter *controllerv1.AclFilter
		want   int
	}{
		{"principal", &controllerv1.AclFilter{Principal: "User:alice"}, 4},
		{"wildcard principal is literal", &controllerv1.AclFilter{Principal: "User:*"}, 1},
		{"permission", &controllerv1.AclFilter{Permission: deny}, 1},
		{"operation", &controllerv1.AclFilter{Operation: opRead}, 6},
		{"resource type", &controllerv1.AclFilter{ResourceType: groupRT}, 1},
		{"resource name", &controllerv1.AclFilter{ResourceName: "orders"}, 2},
		{"pattern type", &controllerv1.AclFilter{PatternType: prefixed}, 2},
		{"literal pattern", &controllerv1.AclFilter{PatternType: literal}, 6},
		{"all fields", &controllerv1.AclFilter{Principal: "User:alice", Permission: allow, Operation: opWrite,
			ResourceType: topicRT, ResourceName: "orders", PatternType: literal}, 1},
		{"no match", &controllerv1.AclFilter{Principal: "User:nobody"}, 0},
	} {
		got, err := s.DescribeAcls(ctx, tc.filter)
		if err != nil || len(got) != tc.want {
			t.Errorf("%s: %d bindings (%v), want %d", tc.name, len(got), err, tc.want)
		}
		for _, b := range got {
			if p := tc.filter.GetPrincipal(); p != "" && b.GetPrincipal() != p {
				t.Errorf("%s: returned %v", tc.name, b)
			}
		}
	}
	for _, bad := range []*controllerv1.AclFilter{
		{Principal: "alice"},
		{Operation: 42},
		{Permission: 9},
		{ResourceType: 7},
		{PatternType: 3},
	} {
		if _, err := s.DescribeAcls(ctx, bad); code(err) != commonv1.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("DescribeAcls(%v): %v, want INVALID_ARGUMENT", bad, err)
		}
		if _, err := s.DeleteAcls(ctx, bad); code(err) != commonv1.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("DeleteAcls(%v): %v, want INVALID_ARGUMENT", bad, err)
		}
	}

	deleted, err := s.DeleteAcls(ctx, &controllerv1.AclFilter{Principal: "User:alice", ResourceType: topicRT})
	if err != nil {
		t.Fatal(err)
	}
	if got := bindingText(t, deleted); !slices.Equal(got, want[3:6]) {
		t.Fatalf("deleted %q, want %q", got, want[3:6])
	}
	rest, err := s.DescribeAcls(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := bindingText(t, rest); !slices.Equal(got, append(slices.Clone(want[:3]), want[6:]...)) {
		t.Fatalf("after delete: %q", got)
	}
	if deleted, err := s.DeleteAcls(ctx, &controllerv1.AclFilter{Principal: "User:alice", ResourceType: topicRT}); err != nil || len(deleted) != 0 {
		t.Fatalf("deleting again: %v, %v", deleted, err)
	}
	// An empty filter matches every binding.
	if deleted, err := s.DeleteAcls(ctx, &controllerv1.AclFilter{}); err != nil || len(deleted) != 5 {
		t.Fatalf("delete all: %d, %v", len(deleted), err)
	}
	if rest, _ := s.DescribeAcls(ctx, nil); len(rest) != 0 {
		t.Fatalf("after deleting all: %v", rest)
	}
}

// Writers racing on different bindings all land; a delete racing with
// them returns exactly what it deleted.
func TestConcurrentAclWrites(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, 6*time.Second)
	const writers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				b := binding(fmt.Sprintf("User:w%d", w), allow, opRead, topicRT, fmt.Sprintf("t%d", i), literal)
				if _, err := s.CreateAcls(ctx, []*commonv1.AclBinding{b}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var deleted []*commonv1.AclBinding
	wg.Go(func() {
		d, err := s.DeleteAcls(ctx, &controllerv1.AclFilter{Principal: "User:w0"})
		if err != nil {
			errs <- err
		}
		deleted = d
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := s.DescribeAcls(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got)+len(deleted) != writers*each {
		t.Fatalf("%d bindings left and %d deleted, want %d in all", len(got), len(deleted), writers*each)
	}
	for _, d := range deleted {
		if d.GetPrincipal() != "User:w0" {
			t.Fatalf("deleted %v", d)
		}
	}
}

func TestQuotas(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, 6*time.Second)
	set := func(p string, produce, fetch int64) error {
		return s.SetQuota(ctx, &commonv1.Quota{Principal: p, ProduceBytesPerSecond: produce, FetchBytesPerSecond: fetch})
	}
	for _, q := range []struct {
		p              string
		produce, fetch int64
	}{{"User:bob", 0, 2000}, {"User:alice", 1000, 0}, {"User:alice", 1500, 500}, {"User:*", 100, 0}} {
		if err := set(q.p, q.produce, q.fetch); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.ListQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []*commonv1.Quota{
		{Principal: "User:*", ProduceBytesPerSecond: 100},
		{Principal: "User:alice", ProduceBytesPerSecond: 1500, FetchBytesPerSecond: 500},
		{Principal: "User:bob", FetchBytesPerSecond: 2000},
	}
	if !slices.EqualFunc(list, want, func(a, b *commonv1.Quota) bool { return proto.Equal(a, b) }) {
		t.Fatalf("ListQuotas: %v", list)
	}
	for _, bad := range []struct {
		p              string
		produce, fetch int64
	}{{"User:alice", -1, 0}, {"User:alice", 0, -5}, {"alice", 1, 1}, {"Service:storage/1", 1, 1}, {"", 1, 1}} {
		if err := set(bad.p, bad.produce, bad.fetch); code(err) != commonv1.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("SetQuota(%v): %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	// Both rates 0 removes; removing an absent quota is not an error.
	if err := set("User:alice", 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := set("User:nobody", 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := set("User:*", 0, 0); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.ListQuotas(ctx); len(list) != 1 || list[0].GetPrincipal() != "User:bob" {
		t.Fatalf("after removing alice's quota: %v", list)
	}
}

// A request percentage is a quota of its own: stored alone or beside the
// byte rates, refused when negative or not a number, and removed only
// with every rate 0.
func TestRequestPercentageQuotas(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, 6*time.Second)
	for _, q := range []*commonv1.Quota{
		{Principal: "User:carol", RequestPercentage: 2.5},
		{Principal: "User:dave", FetchBytesPerSecond: 100, RequestPercentage: 150},
		{Principal: "User:*", RequestPercentage: 10},
	} {
		if err := s.SetQuota(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		if err := s.SetQuota(ctx, &commonv1.Quota{Principal: "User:carol", RequestPercentage: bad}); code(err) != commonv1.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("request percentage %v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	want := []*commonv1.Quota{
		{Principal: "User:*", RequestPercentage: 10},
		{Principal: "User:carol", RequestPercentage: 2.5},
		{Principal: "User:dave", FetchBytesPerSecond: 100, RequestPercentage: 150},
	}
	list, err := s.ListQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(list, want, func(a, b *commonv1.Quota) bool { return proto.Equal(a, b) }) {
		t.Fatalf("ListQuotas: %v", list)
	}
	// Byte rates 0 keep a quota that still has a request percentage.
	if err := s.SetQuota(ctx, &commonv1.Quota{Principal: "User:dave", RequestPercentage: 150}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetQuota(ctx, &commonv1.Quota{Principal: "User:carol"}); err != nil {
		t.Fatal(err)
	}
	list, _ = s.ListQuotas(ctx)
	if len(list) != 2 || list[1].GetPrincipal() != "User:dave" || list[1].GetRequestPercentage() != 150 {
		t.Fatalf("after removing carol's quota and dave's byte rates: %v", list)
	}
}

// watchLog runs WatchMetadata from a snapshot and keeps every message.
type watchLog struct {
	mu   sync.Mutex
	msgs []*controllerv1.WatchMetadataResponse
}

func startWatch(t *testing.T, s *Store) *watchLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchLog{}
	done := make(chan error, 1)
	go func() {
		done <- s.WatchMetadata(ctx, 0, time.Hour, func(r *controllerv1.WatchMetadataResponse) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.msgs = append(w.msgs, r)
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("WatchMetadata ended with %v", err)
		}
	})
	return w
}

// after returns the messages after the first n.
func (w *watchLog) after(n int) []*controllerv1.WatchMetadataResponse {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n > len(w.msgs) {
		return nil
	}
	return slices.Clone(w.msgs[n:])
}

// waitDelta waits for the message after the first n, a delta at
// revision rev, and returns it.
func (w *watchLog) waitDelta(t *testing.T, n int, rev int64) *controllerv1.MetadataDelta {
	t.Helper()
	var d *controllerv1.MetadataDelta
	testwait.Until(t, 10*time.Second, fmt.Sprintf("a delta at revision %d", rev), func() error {
		for _, m := range w.after(n) {
			if m.GetVersion() == rev {
				d = m.GetDelta()
				return nil
			}
		}
		return fmt.Errorf("messages after the first %d: %v", n, w.after(n))
	})
	if d == nil {
		t.Fatalf("the message at revision %d is not a delta", rev)
	}
	return d
}

func revision(t *testing.T, s *Store) int64 {
	t.Helper()
	r, err := s.Client().Get(context.Background(), KeyClusterID)
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

func TestSecurityInSnapshotAndDelta(t *testing.T) {
	ctx := context.Background()
	s := startStore(t, 6*time.Second)
	if _, _, err := s.CreateUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, s)
	testwait.Until(t, 10*time.Second, "the snapshot", func() error { return testwait.True(len(w.after(0)) > 0) })
	snap := w.after(0)[0].GetSnapshot()
	if users := snap.GetSecurity().GetUsers(); len(users) != 1 || users[0].GetName() != "alice" || len(users[0].GetTokenSha256()) != 32 ||
		len(users[0].GetScramSha256().GetStoredKey()) != 32 || len(users[0].GetScramSha512().GetStoredKey()) != 64 {
		t.Fatalf("snapshot security: %v", snap.GetSecurity())
	}

	// A change outside the security state leaves delta.security unset.
	seen := len(w.after(0))
	if _, err := s.AllocateProducerIDs(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if d := w.waitDelta(t, seen, revision(t, s)); d.GetSecurity() != nil {
		t.Fatalf("producer-id delta carries security %v", d.GetSecurity())
	}

	// Each security change carries the whole state.
	seen = len(w.after(0))
	if _, err := s.CreateAcls(ctx, []*commonv1.AclBinding{binding("User:alice", allow, opRead, topicRT, "orders", literal)}); err != nil {
		t.Fatal(err)
	}
	d := w.waitDelta(t, seen, revision(t, s))
	if st := d.GetSecurity(); len(st.GetUsers()) != 1 || len(st.GetAcls()) != 1 || len(st.GetQuotas()) != 0 {
		t.Fatalf("delta after CreateAcls: %v", st)
	}
	seen = len(w.after(0))
	if err := s.SetQuota(ctx, &commonv1.Quota{Principal: "User:alice", ProduceBytesPerSecond: 100}); err != nil {
		t.Fatal(err)
	}
	d = w.waitDelta(t, seen, revision(t, s))
	if st := d.GetSecurity(); len(st.GetUsers()) != 1 || len(st.GetAcls()) != 1 || len(st.GetQuotas()) != 1 {
		t.Fatalf("delta after SetQuota: %v", st)
	}

	// Removing the last entry sends an empty state, not nil.
	for _, remove := range []func() error{
		func() error { return s.DeleteUser(ctx, "alice") },
		func() error { _, err := s.DeleteAcls(ctx, nil); return err },
		func() error { return s.SetQuota(ctx, &commonv1.Quota{Principal: "User:alice"}) },
	} {
		if err := remove(); err != nil {
			t.Fatal(err)
		}
	}
	d = w.waitDelta(t, 0, revision(t, s))
	if d.GetSecurity() == nil || !proto.Equal(d.GetSecurity(), &commonv1.SecurityState{}) {
		t.Fatalf("delta after removing everything: %v", d.GetSecurity())
	}
	// Over the wire too: an empty message field is sent.
	b, err := proto.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back controllerv1.MetadataDelta
	if err := proto.Unmarshal(b, &back); err != nil || back.GetSecurity() == nil {
		t.Fatalf("decoded delta lost the empty security state: %v", err)
	}
}

func TestWatchSecurity(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := startStore(t, 6*time.Second)
	var mu sync.Mutex
	var states []*commonv1.SecurityState
	done := make(chan error, 1)
	go func() {
		done <- s.WatchSecurity(ctx, func(st *commonv1.SecurityState) {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, st)
		}, func(err error) { t.Errorf("WatchSecurity: %v", err) })
	}()
	last := func() (*commonv1.SecurityState, int) {
		mu.Lock()
		defer mu.Unlock()
		if len(states) == 0 {
			return nil, 0
		}
		return states[len(states)-1], len(states)
	}
	testwait.Until(t, 10*time.Second, "the first state", func() error {
		_, n := last()
		return testwait.True(n == 1)
	})
	if st, _ := last(); st == nil || len(st.GetUsers())+len(st.GetAcls())+len(st.GetQuotas()) != 0 {
		t.Fatalf("first state %v, want empty", st)
	}
	// Changes outside the security state are not applied.
	if _, err := s.AllocateProducerIDs(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "alice in the applied state", func() error {
		st, _ := last()
		if len(st.GetUsers()) != 1 || st.GetUsers()[0].GetName() != "alice" {
			return fmt.Errorf("last state %v", st)
		}
		return nil
	})
	if _, n := last(); n != 2 {
		t.Fatalf("%d states applied, want 2 (the first, then alice)", n)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WatchSecurity returned %v", err)
	}
}
