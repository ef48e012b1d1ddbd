// Package guard is what a Strata service asks about every request: who
// sent it (lib/authn: a client certificate, a token the cluster issued, or
// an OIDC JWT), whether they may do it (lib/acl), and how long they must
// wait when over their quota (lib/quota). lib/serve builds one Guard per
// process from the security flags every service shares and wraps the API
// handler in its authentication; handlers call Authorize, RequireService
// and Throttle; the service keeps it current with Apply, from the users,
// ACLs and quotas in the controller's metadata stream (the controller,
// from its own store), so no check costs a round trip.
//
// A Guard that does not enforce (no --require-auth: the plain local
// cluster of make run) lets every request through as User:ANONYMOUS and
// allows everything; quotas still apply to the principals they name.
//
// Concurrency: every method is safe for concurrent use; the state swaps
// atomically.
package guard

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/audit"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/quota"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/token"
)

// Config sets a Guard up.
type Config struct {
	// RequireAuth makes every request authenticate (a certificate, a
	// token or an OIDC JWT) and enforces ACLs. Default false: anonymous
	// requests pass as User:ANONYMOUS and nothing is checked.
	RequireAuth bool
	// SuperUsers may do everything, like the services' own identities.
	// Default none.
	SuperUsers []acl.Principal
	// OIDC, when set, accepts JWTs from one issuer. Default none.
	OIDC *authn.OIDCConfig
	// Logger receives state changes at info (refusals go to Audit).
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock quotas are measured on. Default time.Now.
	Now func() time.Time
	// Audit receives a line for every authentication failure and
	// denied request (lib/audit). Default nil: none are written.
	Audit *audit.Logger
}

// Guard authenticates, authorizes and throttles requests for one process.
type Guard struct {
	require bool
	authn   *authn.Authenticator
	authz   *acl.Authorizer
	quotas  *quota.Limiter
	logger  *slog.Logger
	now     func() time.Time
	audit   *audit.Logger // nil: no audit lines

	mu      sync.Mutex
	applied *commonv1.SecurityState // last state applied, for DescribeState; nil before
}

// New builds a Guard. It fails on a super user that is not a valid
// principal or an OIDC issuer it cannot reach.
func New(ctx context.Context, cfg Config) (*Guard, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a, err := authn.New(ctx, authn.Config{
		CertPrincipal:  CertPrincipal,
		OIDC:           cfg.OIDC,
		AllowAnonymous: !cfg.RequireAuth,
		Reserved:       reservedNames(cfg.SuperUsers),
		OnRefused:      auditRefused(cfg.Audit),
		MayForward:     isDoor,
	})
	if err != nil {
		return nil, err
	}
	z, err := acl.NewAuthorizer(cfg.SuperUsers)
	if err != nil {
		return nil, fmt.Errorf("guard: super users: %w", err)
	}
	q, err := quota.NewLimiter(nil)
	if err != nil {
		return nil, err
	}
	return &Guard{require: cfg.RequireAuth, authn: a, authz: z, quotas: q, logger: cfg.Logger, now: cfg.Now, audit: cfg.Audit}, nil
}

// reservedNames are the user names only a certificate may carry: the
// super users' (User: ones) and the services' role names, so that no
// token user or OIDC account can be, or look like, either (lib/authn's
// reserved.go).
func reservedNames(supers []acl.Principal) map[string]string {
	r := map[string]string{}
	for _, role := range []tlsconfig.Role{tlsconfig.RoleController, tlsconfig.RoleStorage, tlsconfig.RoleGateway, tlsconfig.RoleCoordinator, tlsconfig.RoleTiering} {
		r[string(role)] = "the name of a Strata service role"
	}
	for _, p := range supers {
		if p.Type == acl.TypeUser {
			r[p.Name] = "a super user (--super-users), who authenticates with a certificate"
		}
	}
	return r
}

// CheckNewUserName returns INVALID_ARGUMENT when name may not be a
// token user's because a certificate principal or OIDC owns it (a super
// user, a service role, the OIDC prefix), nil otherwise. The controller
// asks it before creating a user.
func (g *Guard) CheckNewUserName(name string) error {
	if err := g.authn.CheckTokenUserName(name); err != nil {
		return apierr.Error(&commonv1.ErrorDetail{Code: commonv1.Code_CODE_INVALID_ARGUMENT, Message: err.Error()})
	}
	return nil
}

// CertPrincipal maps a verified client certificate to its principal's
// text: "Service:<role>[/<id>]" for a Strata service identity, "User:<CN>"
// for a user certificate, nothing for a certificate that names neither or
// whose common name is not a valid user name.
func CertPrincipal(cert *x509.Certificate) (string, bool) {
	p, err := tlsconfig.PrincipalOf(cert)
	if err != nil {
		return "", false
	}
	if p.IsService() {
		return ServicePrincipal(p.Service).String(), true
	}
	u := acl.User(p.User)
	if acl.CheckName(p.User) != nil {
		return "", false
	}
	return u.String(), true
}

// ServicePrincipal is the principal of a service identity:
// Service:<role>, or Service:<role>/<id>.
func ServicePrincipal(id tlsconfig.Identity) acl.Principal {
	name := string(id.Role)
	if id.ID != "" {
		name += "/" + id.ID
	}
	return acl.Principal{Type: acl.TypeService, Name: name}
}

// Enforcing reports whether requests must authenticate and ACLs apply.
func (g *Guard) Enforcing() bool { return g.require }

// Wrap authenticates every request to h: the principal is in the request
// context (Principal), and a request without valid credentials is refused
// with UNAUTHENTICATED and one line when the Guard enforces. CORS
// preflights (OPTIONS) pass unauthenticated, so the CORS handler outside
// can answer them.
func (g *Guard) Wrap(h http.Handler) http.Handler {
	wrapped := g.authn.Wrap(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions {
			h.ServeHTTP(w, r)
			return
		}
		wrapped.ServeHTTP(w, r)
	})
}

// Authenticator is the Guard's authentication, for listeners that are not
// HTTP (the Kafka listener's TLS client certificates and SASL).
func (g *Guard) Authenticator() *authn.Authenticator { return g.authn }

// Principal is who sent the request of ctx; the zero Principal when the
// request did not go through Wrap (an internal call).
func Principal(ctx context.Context) acl.Principal {
	p, _ := authn.PrincipalFrom(ctx)
	return p
}

// Info is how the request of ctx authenticated.
func Info(ctx context.Context) (authn.Info, bool) { return authn.FromContext(ctx) }

// Authorize allows the request of ctx to do op to the resource, or
// returns PERMISSION_DENIED with one line naming the principal, the
// operation and the resource. It allows everything when the Guard does
// not enforce, and every service identity.
func (g *Guard) Authorize(ctx context.Context, op acl.Operation, rt acl.ResourceType, name string) error {
	if !g.require {
		return nil
	}
	p := Principal(ctx)
	d := g.authz.Allowed(p, op, rt, name)
	if d.Allowed {
		return nil
	}
	g.auditDenied(ctx, d)
	if p.IsZero() {
		// A request that skipped authentication (an internal call).
		return DeniedOn(rt, fmt.Sprintf("permission denied: a caller without a principal may not %s %s", op, d.Resource))
	}
	return DeniedOn(rt, d.Message())
}

// Allowed is Authorize as a yes or no, for filtering lists (topics a
// principal may describe).
func (g *Guard) Allowed(ctx context.Context, op acl.Operation, rt acl.ResourceType, name string) bool {
	return !g.require || g.authz.Allowed(Principal(ctx), op, rt, name).Allowed
}

// AuthorizeCreateTopic allows creating topic name with create on the
// topic or, as in Kafka, create on the cluster (every topic). The cluster
// is asked first, so a request it allows writes no denied line to the
// audit log; a refusal names the topic.
func (g *Guard) AuthorizeCreateTopic(ctx context.Context, name string) error {
	if g.Allowed(ctx, acl.Create, acl.Cluster, acl.ClusterName) {
		return nil
	}
	return g.Authorize(ctx, acl.Create, acl.Topic, name)
}

// Denied is the PERMISSION_DENIED error a handler returns, with msg as
// its one line, for a refusal that names no resource.
func Denied(msg string) error {
	return apierr.Error(&commonv1.ErrorDetail{Code: commonv1.Code_CODE_PERMISSION_DENIED, Message: msg})
}

// DeniedOn is the PERMISSION_DENIED error of a refusal on a resource of
// type rt, with msg as its one line. Its reason names the type
// (REASON_TOPIC_, GROUP_, CLUSTER_ or TRANSACTIONAL_ID_AUTHORIZATION_FAILED), so that a door
// that passes the owner's refusal on answers Kafka's error of that type.
func DeniedOn(rt acl.ResourceType, msg string) error {
	return apierr.Error(&commonv1.ErrorDetail{Code: commonv1.Code_CODE_PERMISSION_DENIED, Reason: deniedReason(rt), Message: msg})
}

func deniedReason(rt acl.ResourceType) commonv1.Reason {
	switch rt {
	case acl.Topic:
		return commonv1.Reason_REASON_TOPIC_AUTHORIZATION_FAILED
	case acl.Group:
		return commonv1.Reason_REASON_GROUP_AUTHORIZATION_FAILED
	case acl.TransactionalID:
		return commonv1.Reason_REASON_TRANSACTIONAL_ID_AUTHORIZATION_FAILED
	}
	return commonv1.Reason_REASON_CLUSTER_AUTHORIZATION_FAILED
}

// RequireService allows the request of ctx only from a Strata service in
// one of roles (any role when none are given), and returns its identity.
// A user, however privileged, is refused: only a storage node may
// replicate or register, only the controller's peers may watch metadata.
// It allows everything, returning the zero Identity, when the Guard does
// not enforce.
func (g *Guard) RequireService(ctx context.Context, roles ...tlsconfig.Role) (tlsconfig.Identity, error) {
	if !g.require {
		return tlsconfig.Identity{}, nil
	}
	p := Principal(ctx)
	if p.IsService() {
		id, err := serviceIdentity(p)
		if err == nil && (len(roles) == 0 || slices.Contains(roles, id.Role)) {
			return id, nil
		}
	}
	want := "a Strata service"
	if len(roles) > 0 {
		names := make([]string, len(roles))
		for i, r := range roles {
			names[i] = string(r)
		}
		want = "the " + strings.Join(names, " or ") + " service"
	}
	g.auditServiceOnly(ctx, p, "is not "+want)
	return tlsconfig.Identity{}, DeniedOn(acl.Cluster, fmt.Sprintf("permission denied: %s is not %s", p.String(), want))
}

// serviceIdentity parses a Service principal back into an identity.
func serviceIdentity(p acl.Principal) (tlsconfig.Identity, error) {
	role, id, _ := strings.Cut(p.Name, "/")
	out := tlsconfig.Identity{Role: tlsconfig.Role(role), ID: id}
	return out, out.Validate()
}

// RequireStorageNode allows the request of ctx only from storage node
// nodeID's own identity (spiffe://strata/storage/<nodeID>).
func (g *Guard) RequireStorageNode(ctx context.Context, nodeID int32) error {
	id, err := g.RequireService(ctx, tlsconfig.RoleStorage)
	if err != nil || !g.require {
		return err
	}
	if n, ok := id.NodeID(); !ok || n != nodeID {
		g.auditServiceOnly(ctx, ServicePrincipal(id), fmt.Sprintf("may not act as storage node %d", nodeID))
		return DeniedOn(acl.Cluster, fmt.Sprintf("permission denied: %s may not act as storage node %d", ServicePrincipal(id), nodeID))
	}
	return nil
}

// Reserve admits a request of kind for the request's principal before it
// is served: it waits while the principal owes an earlier throttle (so a
// client that ignores throttle_time_ms gains nothing), then charges bytes
// at once; the caller settles the charge with what it moved. It fails with
// ctx's error when the request ends while held back. See lib/quota.
func (g *Guard) Reserve(ctx context.Context, kind quota.Kind, bytes int64) (quota.Reservation, error) {
	return g.quotas.Reserve(ctx, Principal(ctx), kind, bytes, g.now)
}

// Settle corrects r with the bytes the request moved and returns its
// throttle time (0 within the quota or without one).
func (g *Guard) Settle(r quota.Reservation, used int64) time.Duration {
	return r.Settle(used, g.now())
}

// FetchEstimate is what a fetch of at most maxBytes reserves for the
// request's principal: maxBytes, but never more than one second of its
// fetch quota, so a long poll does not hold back its principal's other
// requests for longer than that.
func (g *Guard) FetchEstimate(ctx context.Context, maxBytes int64) int64 {
	return min(maxBytes, g.quotas.Capacity(Principal(ctx), quota.Fetch))
}

// TakeQuotaUsage is what each principal with a quota moved through this
// process since the last call, in bytes per second (lib/quota's
// TakeUsage): a storage node sends it with its heartbeat.
func (g *Guard) TakeQuotaUsage() map[acl.Principal]quota.Rates {
	return g.quotas.TakeUsage(g.now())
}

// SetQuotaCluster shares the quotas with the other nodes: nodes is how
// many share them, others what the other nodes moved per principal
// (lib/quota's SetCluster).
func (g *Guard) SetQuotaCluster(nodes int, others map[acl.Principal]quota.Elsewhere) {
	g.quotas.SetCluster(nodes, others)
}

// Apply replaces users, ACLs and quotas with st, as the controller's
// metadata stream delivers them. A malformed entry is skipped and logged,
// never applied half: the rest applies. nil clears everything.
func (g *Guard) Apply(st *commonv1.SecurityState) {
	if b := st.GetScramMockSecret(); len(b) > 0 {
		if err := g.authn.SetSCRAMMockSecret(b); err != nil {
			g.logger.Warn("skipping a malformed SCRAM mock secret in the security state", "err", err)
		}
	}
	users := map[string]token.Hashed{}
	scram := map[string][]token.SCRAMKeys{}
	for _, u := range st.GetUsers() {
		var h token.Hashed
		if len(u.GetTokenSha256()) != len(h) || acl.CheckName(u.GetName()) != nil {
			g.logger.Warn("skipping a malformed user in the security state", "user", u.GetName())
			continue
		}
		copy(h[:], u.GetTokenSha256())
		users[u.GetName()] = h
		// Malformed SCRAM credentials leave the user's token working
		// everywhere but SCRAM.
		keys, err := SCRAMFromProto(u)
		if err != nil {
			g.logger.Warn("skipping a user's malformed SCRAM credentials in the security state", "user", u.GetName(), "err", err)
			continue
		}
		if len(keys) > 0 {
			scram[u.GetName()] = keys
		}
	}
	us, err := token.NewUsers(users)
	if err == nil {
		us, err = us.WithSCRAM(scram)
	}
	if err != nil {
		g.logger.Warn("users not applied", "err", err)
	} else {
		g.authn.SetUsers(us)
	}
	var bindings []acl.Binding
	for _, b := range st.GetAcls() {
		ab, err := BindingFromProto(b)
		if err != nil {
			g.logger.Warn("skipping a malformed ACL in the security state", "err", err)
			continue
		}
		bindings = append(bindings, ab)
	}
	if err := g.authz.Set(bindings); err != nil {
		g.logger.Warn("ACLs not applied", "err", err)
	}
	rates := map[acl.Principal]quota.Rates{}
	for _, q := range st.GetQuotas() {
		p, err := acl.ParsePrincipal(q.GetPrincipal())
		if err != nil {
			g.logger.Warn("skipping a malformed quota in the security state", "err", err)
			continue
		}
		rates[p] = quota.Rates{ProduceBytesPerSec: q.GetProduceBytesPerSecond(), FetchBytesPerSec: q.GetFetchBytesPerSecond(),
			RequestPercentage: q.GetRequestPercentage()}
	}
	if err := g.quotas.Set(rates); err != nil {
		g.logger.Warn("quotas not applied", "err", err)
	}
	g.mu.Lock()
	g.applied = st
	g.mu.Unlock()
}

// Applied is the last state given to Apply, nil before the first.
func (g *Guard) Applied() *commonv1.SecurityState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.applied
}

// ErrBadBinding wraps every error of BindingFromProto.
var ErrBadBinding = errors.New("guard: bad ACL binding")
