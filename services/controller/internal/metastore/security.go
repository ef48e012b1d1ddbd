package metastore

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/token"
)

// The security state: users (a name, the SHA-256 of the one token the
// cluster issued them and the SCRAM credentials derived from it), ACL bindings and quotas, under PrefixSecurity
// (keys.go). Every write is one etcd transaction, so writers on different
// controllers never lose each other's updates:
//
//   - CreateUser: the user key's CreateRevision is 0 (one of two racing
//     creators wins, the other gets ALREADY_EXISTS);
//   - CreateAcls: every binding has its own key, derived from the binding,
//     and the keys it adds are absent (racing creators of the same binding
//     write it once; of different ones, both);
//   - DeleteAcls: the ModRevision of every key it deletes is the one read
//     (retried on conflict, so what it returns is exactly what it deleted);
//   - DeleteUser, SetQuota: one delete or put of one key.

// Limits of one request.
const (
	// MaxUserNameLen is the longest user name (the CreateUser contract).
	MaxUserNameLen = 64
	// MaxAclsPerRequest bounds the bindings CreateAcls takes at once.
	MaxAclsPerRequest = 1000
	// MaxAclsPerDelete bounds the bindings one DeleteAcls deletes (one
	// etcd transaction deletes them all); a wider filter is refused.
	MaxAclsPerDelete = 10000
)

// securityRetry is how long WatchSecurity waits before reading the state
// again after its watch failed (the member lost the quorum, or history
// was compacted).
const securityRetry = 500 * time.Millisecond

// ValidateUserName applies the user name rule: 1 to MaxUserNameLen
// characters of [A-Za-z0-9._@-] (a subset of acl.CheckName's, so that a
// user name is a plain word in a CLI argument, a file name or an e-mail
// address), and not ANONYMOUS, the principal of requests without
// credentials.
func ValidateUserName(name string) error {
	switch {
	case name == "":
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "empty user name")
	case len(name) > MaxUserNameLen:
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "user name longer than %d characters", MaxUserNameLen)
	case strings.IndexFunc(name, func(r rune) bool { return !userNameRune(r) }) >= 0 || acl.CheckName(name) != nil:
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "user name %q has characters outside [A-Za-z0-9._@-]", name)
	case name == acl.Anonymous.Name:
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "user name %s is the principal of requests without credentials", name)
	}
	return nil
}

func userNameRune(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("._@-", r)
}

// CreateUser creates user name with a fresh token (lib/token) and stores
// only the token's SHA-256 and its SCRAM-SHA-256 and SCRAM-SHA-512
// credentials (salt, iterations, StoredKey, ServerKey). It returns the
// stored credential and the token, which exists nowhere else afterwards:
// the caller hands it to the user once. ALREADY_EXISTS when the user
// exists.
func (s *Store) CreateUser(ctx context.Context, name string) (*commonv1.UserCredential, token.Token, error) {
	if err := ValidateUserName(name); err != nil {
		return nil, token.Token{}, err
	}
	tok, err := token.New()
	if err != nil {
		return nil, token.Token{}, err
	}
	h := token.Hash(tok)
	cred := &commonv1.UserCredential{Name: name, TokenSha256: h[:], CreatedMs: time.Now().UnixMilli()}
	// The one moment the token exists here: derive its SCRAM credentials
	// (random salt, 4096 iterations) for the Kafka listeners' SASL SCRAM.
	for _, m := range token.SCRAMMechanisms {
		k, err := token.DeriveSCRAM(tok, m)
		if err != nil {
			return nil, token.Token{}, err
		}
		guard.SCRAMToProto(cred, k)
	}
	b, err := proto.Marshal(cred)
	if err != nil {
		return nil, token.Token{}, err
	}
	tx, err := s.cl.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(userKey(name)), "=", 0)).
		Then(clientv3.OpPut(userKey(name), string(b))).Commit()
	if err != nil {
		return nil, token.Token{}, err
	}
	if !tx.Succeeded {
		return nil, token.Token{}, errf(commonv1.Code_CODE_ALREADY_EXISTS, 0, "user %s already exists", name)
	}
	return cred, tok, nil
}

// DeleteUser deletes user name: its token stops authenticating wherever
// the state is applied. The user's ACLs and quota stay (as in Kafka,
// where credentials and ACLs are separate): a user created again with
// the same name has them. NOT_FOUND for an unknown user.
func (s *Store) DeleteUser(ctx context.Context, name string) error {
	if err := ValidateUserName(name); err != nil {
		return err
	}
	resp, err := s.cl.Delete(ctx, userKey(name))
	if err != nil {
		return err
	}
	if resp.Deleted == 0 {
		return errf(commonv1.Code_CODE_NOT_FOUND, 0, "user %s not found", name)
	}
	return nil
}

// ListUsers returns the users by name, with their creation times and
// without their token hashes.
func (s *Store) ListUsers(ctx context.Context) ([]*commonv1.UserCredential, error) {
	m, err := loadPrefix(ctx, s.cl, PrefixUsers, 0)
	if err != nil {
		return nil, err
	}
	out := make([]*commonv1.UserCredential, 0, len(m.Users))
	for _, name := range slices.Sorted(maps.Keys(m.Users)) {
		out = append(out, &commonv1.UserCredential{Name: name, CreatedMs: m.Users[name].GetCreatedMs()})
	}
	return out, nil
}

// bindingFromProto validates a wire binding (guard.BindingFromProto) and
// returns it in its stored form, with the pattern type set.
func bindingFromProto(i int, b *commonv1.AclBinding) (acl.Binding, error) {
	ab, err := guard.BindingFromProto(b)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), guard.ErrBadBinding.Error()+": ")
		return acl.Binding{}, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "ACL binding %d: %s", i+1, strings.TrimPrefix(msg, "acl: "))
	}
	return ab, nil
}

// CreateAcls adds bindings (at most MaxAclsPerRequest), all or none:
// INVALID_ARGUMENT names the first malformed one. A binding that exists
// already is not written again, so creating it twice changes nothing. It
// returns how many bindings were new.
func (s *Store) CreateAcls(ctx context.Context, bindings []*commonv1.AclBinding) (int, error) {
	if len(bindings) > MaxAclsPerRequest {
		return 0, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "%d ACL bindings in one request; at most %d", len(bindings), MaxAclsPerRequest)
	}
	values := map[string]string{}
	for i, b := range bindings {
		ab, err := bindingFromProto(i, b)
		if err != nil {
			return 0, err
		}
		v, err := proto.Marshal(guard.BindingToProto(ab))
		if err != nil {
			return 0, err
		}
		values[aclKey(ab)] = string(v)
	}
	keys := slices.Sorted(maps.Keys(values))
	for {
		// Which keys exist, read at one revision in one round trip.
		gets := make([]clientv3.Op, len(keys))
		for i, k := range keys {
			gets[i] = clientv3.OpGet(k, clientv3.WithCountOnly())
		}
		resp, err := s.cl.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return 0, err
		}
		var cmps []clientv3.Cmp
		var puts []clientv3.Op
		for i, k := range keys {
			if resp.Responses[i].GetResponseRange().GetCount() == 0 {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
				puts = append(puts, clientv3.OpPut(k, values[k]))
			}
		}
		if len(puts) == 0 {
			return 0, nil
		}
		tx, err := s.cl.Txn(ctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			return 0, err
		}
		if tx.Succeeded {
			return len(puts), nil
		}
		// Another writer created one of them meanwhile: read again.
	}
}

// aclFilter is a compiled controllerv1.AclFilter: every set field must
// match exactly; unset fields (empty, UNSPECIFIED) match anything.
type aclFilter struct {
	principal    string
	permission   commonv1.AclPermission
	operation    commonv1.AclOperation
	resourceType commonv1.AclResourceType
	resourceName string
	patternType  commonv1.AclPatternType
}

// compileFilter checks f: a principal that is not one, or an enum value
// the API does not define, is INVALID_ARGUMENT rather than a filter that
// quietly matches nothing. A nil filter matches every binding.
func compileFilter(f *controllerv1.AclFilter) (aclFilter, error) {
	out := aclFilter{
		principal: f.GetPrincipal(), permission: f.GetPermission(), operation: f.GetOperation(),
		resourceType: f.GetResourceType(), resourceName: f.GetResourceName(), patternType: f.GetPatternType(),
	}
	if out.principal != "" {
		if _, err := acl.ParsePrincipal(out.principal); err != nil {
			return aclFilter{}, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "ACL filter: %s", strings.TrimPrefix(err.Error(), "acl: "))
		}
	}
	bad := func(what string, v int32) error {
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "ACL filter: unknown %s %d", what, v)
	}
	if _, ok := commonv1.AclPermission_name[int32(out.permission)]; !ok {
		return aclFilter{}, bad("permission", int32(out.permission))
	}
	if _, ok := commonv1.AclOperation_name[int32(out.operation)]; !ok {
		return aclFilter{}, bad("operation", int32(out.operation))
	}
	if _, ok := commonv1.AclResourceType_name[int32(out.resourceType)]; !ok {
		return aclFilter{}, bad("resource type", int32(out.resourceType))
	}
	if _, ok := commonv1.AclPatternType_name[int32(out.patternType)]; !ok {
		return aclFilter{}, bad("pattern type", int32(out.patternType))
	}
	return out, nil
}

// match reports whether stored binding b (pattern type always set) passes f.
func (f aclFilter) match(b *commonv1.AclBinding) bool {
	return (f.principal == "" || f.principal == b.GetPrincipal()) &&
		(f.permission == 0 || f.permission == b.GetPermission()) &&
		(f.operation == 0 || f.operation == b.GetOperation()) &&
		(f.resourceType == 0 || f.resourceType == b.GetResourceType()) &&
		(f.resourceName == "" || f.resourceName == b.GetResourceName()) &&
		(f.patternType == 0 || f.patternType == b.GetPatternType())
}

// DescribeAcls returns the bindings matching f, sorted (sortBindings).
func (s *Store) DescribeAcls(ctx context.Context, f *controllerv1.AclFilter) ([]*commonv1.AclBinding, error) {
	cf, err := compileFilter(f)
	if err != nil {
		return nil, err
	}
	m, err := loadPrefix(ctx, s.cl, PrefixAcls, 0)
	if err != nil {
		return nil, err
	}
	var out []*commonv1.AclBinding
	for _, b := range m.Acls {
		if cf.match(b) {
			out = append(out, b)
		}
	}
	return sortBindings(out), nil
}

// DeleteAcls deletes the bindings matching f (every binding for an empty
// filter, as the filter's contract says) in one transaction and returns
// them, sorted. More than MaxAclsPerDelete matches is INVALID_ARGUMENT.
func (s *Store) DeleteAcls(ctx context.Context, f *controllerv1.AclFilter) ([]*commonv1.AclBinding, error) {
	cf, err := compileFilter(f)
	if err != nil {
		return nil, err
	}
	for {
		resp, err := s.cl.Get(ctx, PrefixAcls, clientv3.WithPrefix())
		if err != nil {
			return nil, err
		}
		var cmps []clientv3.Cmp
		var dels []clientv3.Op
		var deleted []*commonv1.AclBinding
		for _, kv := range resp.Kvs {
			b := &commonv1.AclBinding{}
			if err := proto.Unmarshal(kv.Value, b); err != nil {
				return nil, fmt.Errorf("metastore: decode %s: %w", kv.Key, err)
			}
			if !cf.match(b) {
				continue
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
			dels = append(dels, clientv3.OpDelete(string(kv.Key)))
			deleted = append(deleted, b)
		}
		if len(dels) == 0 {
			return nil, nil
		}
		if len(dels) > MaxAclsPerDelete {
			return nil, errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "the filter matches %d ACL bindings; at most %d are deleted at once: narrow it", len(dels), MaxAclsPerDelete)
		}
		tx, err := s.cl.Txn(ctx).If(cmps...).Then(dels...).Commit()
		if err != nil {
			return nil, err
		}
		if tx.Succeeded {
			return sortBindings(deleted), nil
		}
		// One of them was deleted or rewritten meanwhile: read again, so
		// the answer lists only what this call deleted.
	}
}

// sortBindings sorts stored bindings as listings show them: by
// principal, resource type, resource name, pattern type, permission and
// operation (acl.Compare). It sorts bs in place and returns it.
func sortBindings(bs []*commonv1.AclBinding) []*commonv1.AclBinding {
	keyed := make(map[*commonv1.AclBinding]acl.Binding, len(bs))
	for _, b := range bs {
		ab, _ := guard.BindingFromProto(b) // stored bindings were validated; a bad one sorts first
		keyed[b] = ab
	}
	slices.SortFunc(bs, func(a, b *commonv1.AclBinding) int { return acl.Compare(keyed[a], keyed[b]) })
	return bs
}

// SetQuota sets q's rates for its principal, or removes its quota when
// both rates are 0. The principal must be a user (User:NAME; not User:*,
// which lib/quota does not read as a default, and not a service, whose
// traffic is the cluster's own); rates are bytes per second, 0 or more.
func (s *Store) SetQuota(ctx context.Context, q *commonv1.Quota) error {
	p, err := acl.ParsePrincipal(q.GetPrincipal())
	if err != nil {
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "quota: %s", strings.TrimPrefix(err.Error(), "acl: "))
	}
	if p.Type != acl.TypeUser {
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "quota principal %s is not a user (User:NAME, or User:* for the default)", p)
	}
	if q.GetProduceBytesPerSecond() < 0 || q.GetFetchBytesPerSecond() < 0 {
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "quota of %s: rates must be 0 (unlimited) or more", p)
	}
	if pct := q.GetRequestPercentage(); pct < 0 || math.IsNaN(pct) || math.IsInf(pct, 0) {
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "quota of %s: the request percentage must be 0 (unlimited) or more", p)
	}
	if q.GetProduceBytesPerSecond() == 0 && q.GetFetchBytesPerSecond() == 0 && q.GetRequestPercentage() == 0 {
		_, err := s.cl.Delete(ctx, quotaKey(p))
		return err
	}
	b, err := proto.Marshal(&commonv1.Quota{
		Principal: p.String(), ProduceBytesPerSecond: q.GetProduceBytesPerSecond(), FetchBytesPerSecond: q.GetFetchBytesPerSecond(),
		RequestPercentage: q.GetRequestPercentage(),
	})
	if err != nil {
		return err
	}
	_, err = s.cl.Put(ctx, quotaKey(p), string(b))
	return err
}

// ListQuotas returns every quota, by principal.
func (s *Store) ListQuotas(ctx context.Context) ([]*commonv1.Quota, error) {
	m, err := loadPrefix(ctx, s.cl, PrefixQuotas, 0)
	if err != nil {
		return nil, err
	}
	return m.quotaList(), nil
}

func (m *Model) quotaList() []*commonv1.Quota {
	out := slices.Collect(maps.Values(m.Quotas))
	slices.SortFunc(out, func(a, b *commonv1.Quota) int { return cmp.Compare(a.GetPrincipal(), b.GetPrincipal()) })
	return out
}

// Security renders the security state: users by name (with their token
// hashes: it is for the cluster's services only), bindings sorted as
// DescribeAcls lists them, quotas by principal. Never nil. The messages
// are the model's own, which Apply replaces and never modifies, so the
// result stays valid after the model moves on; callers must not modify
// them.
func (m *Model) Security() *commonv1.SecurityState {
	st := &commonv1.SecurityState{}
	for _, name := range slices.Sorted(maps.Keys(m.Users)) {
		st.Users = append(st.Users, m.Users[name])
	}
	st.Acls = sortBindings(slices.Collect(maps.Values(m.Acls)))
	st.Quotas = m.quotaList()
	st.ScramMockSecret = m.SCRAMMockSecret
	return st
}

// EnsureSCRAMMockSecret draws the cluster's mock SCRAM secret
// (token.MockSCRAM) unless etcd has one: every controller calls it at
// start, and the first one's stays (the key is written only while
// absent). Drawn once for the cluster rather than per process, so that an
// unknown name gets the same fake salt from every Kafka listener, as a
// real user's salt is the same everywhere.
func (s *Store) EnsureSCRAMMockSecret(ctx context.Context) error {
	b := make([]byte, token.MockSCRAMSecretLen)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("metastore: reading random bytes: %w", err)
	}
	_, err := s.cl.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(KeySCRAMMockSecret), "=", 0)).
		Then(clientv3.OpPut(KeySCRAMMockSecret, string(b))).Commit()
	return err
}

// WatchSecurity calls apply with the security state at once and then
// after every change, until ctx ends; it returns ctx's error. When its
// watch fails (the member lost the quorum, history was compacted) it
// reports the error to onError (when not nil) and, after securityRetry,
// reads the whole state again. apply runs on WatchSecurity's goroutine,
// one call at a time, and sees the states in revision order; several
// changes arriving together are applied once.
func (s *Store) WatchSecurity(ctx context.Context, apply func(*commonv1.SecurityState), onError func(error)) error {
	for {
		err := s.watchSecurity(ctx, apply)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if onError != nil {
			onError(err)
		}
		t := time.NewTimer(securityRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// watchSecurity is one read of the state and the watch after it, until
// the watch fails.
func (s *Store) watchSecurity(ctx context.Context, apply func(*commonv1.SecurityState)) error {
	m, err := loadPrefix(ctx, s.cl, PrefixSecurity, 0)
	if err != nil {
		return err
	}
	apply(m.Security())
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cl.Watch(wctx, PrefixSecurity, clientv3.WithPrefix(), clientv3.WithRev(m.Revision+1)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("%w: %v", ErrWatchLost, err)
		}
		t := newTouched()
		if err := m.Apply(resp.Events, t); err != nil {
			return err
		}
		if t.Security {
			apply(m.Security())
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return ErrWatchLost
}
