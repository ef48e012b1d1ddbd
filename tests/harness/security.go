package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/launch"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// Secure mode (ClusterConfig.Secure) runs a cluster as a secured
// deployment, with the identities `strata dev --secure` gives its
// processes (docs/design/security.md, "Dev cluster identities"):
//
//	DIR/tls/ca.pem, ca-key.pem                 a dev CA (lib/tlsconfig/devca) in the test's temp dir
//	DIR/tls/<role>-<id>.pem, <role>-<id>-key.pem  each process: spiffe://strata/<role>/<id>
//	DIR/tls/admin.pem, admin-key.pem           the admin's client certificate, CN admin
//
// Every process (controllers, storage nodes, and the services started in
// front of them) runs with its certificate, the CA as --tls-client-ca,
// --require-auth and --super-users User:admin, so every URL is https://.
// The harness's own calls (Ctl, StorageClient, the /readyz waits,
// DescribeCluster) are the admin's. A test makes other callers with
// UserCert, CreateUser, NoCredentials and ServiceCert, and calls as them
// with HTTPClientAs, Credentials.ClientOpts or Credentials.CLIArgs.

// AdminUser is the admin's user name in a secure cluster: its certificate's
// CN, and every process's --super-users is "User:" + AdminUser.
const AdminUser = "admin"

// Credentials are what a caller of a secure cluster presents: the CA
// bundle that verifies the servers, a client certificate, a bearer token,
// any of them empty. The zero value is a caller of a plain cluster (h2c,
// no credentials).
type Credentials struct {
	// Principal is who the cluster takes the caller for: "User:admin",
	// "Service:storage/3"; empty for no credentials.
	Principal string
	// CA is the PEM file of the cluster's CA; empty for a plain cluster.
	CA string
	// Cert and Key are the client certificate's PEM files; empty for none.
	Cert, Key string
	// Token is a bearer token the cluster issued; empty for none. Tests
	// must not log it.
	Token string
}

// ClientOpts are the Go client's options for cr: TLSCA, ClientCertificate
// and Token for what cr has; none for the zero Credentials.
func (cr Credentials) ClientOpts() []client.Opt {
	var out []client.Opt
	if cr.CA != "" {
		out = append(out, client.TLSCA(cr.CA))
	}
	if cr.Cert != "" {
		out = append(out, client.ClientCertificate(cr.Cert, cr.Key))
	}
	if cr.Token != "" {
		out = append(out, client.Token(cr.Token))
	}
	return out
}

// CLIArgs are the strata CLI's global flags for cr (--tls-ca, --tls-cert,
// --tls-key, --token), to put before the command.
func (cr Credentials) CLIArgs() []string {
	var out []string
	add := func(flag, v string) {
		if v != "" {
			out = append(out, flag, v)
		}
	}
	add("--tls-ca", cr.CA)
	add("--tls-cert", cr.Cert)
	add("--tls-key", cr.Key)
	add("--token", cr.Token)
	return out
}

// clusterSecurity is a secure cluster's CA and the files it issued.
// Safe for concurrent use.
type clusterSecurity struct {
	dir    string // DIR/tls
	ca     *devca.CA
	caFile string
	admin  Credentials

	mu     sync.Mutex
	issued map[string]Credentials // by file name stem: "storage-3", "user-bob"
}

// newClusterSecurity makes a CA in dir (created, mode 0700) and the
// admin's certificate.
func newClusterSecurity(dir string) (*clusterSecurity, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	ca, err := devca.New("Strata test CA")
	if err != nil {
		return nil, err
	}
	s := &clusterSecurity{dir: dir, ca: ca, caFile: filepath.Join(dir, "ca.pem"), issued: map[string]Credentials{}}
	if err := ca.WriteFiles(s.caFile, filepath.Join(dir, "ca-key.pem")); err != nil {
		return nil, err
	}
	if s.admin, err = s.user(AdminUser); err != nil {
		return nil, err
	}
	return s, nil
}

// write writes c's files as DIR/tls/<stem>.pem and <stem>-key.pem and
// returns them as Credentials for principal.
func (s *clusterSecurity) write(stem, principal string, c *devca.Cert) (Credentials, error) {
	cr := Credentials{Principal: principal, CA: s.caFile,
		Cert: filepath.Join(s.dir, stem+".pem"), Key: filepath.Join(s.dir, stem+"-key.pem")}
	if err := c.WriteFiles(cr.Cert, cr.Key); err != nil {
		return Credentials{}, err
	}
	s.issued[stem] = cr
	return cr, nil
}

// service returns the certificate of identity id, issuing it on first use.
func (s *clusterSecurity) service(id tlsconfig.Identity) (Credentials, error) {
	stem := string(id.Role) + "-" + id.ID
	s.mu.Lock()
	defer s.mu.Unlock()
	if cr, ok := s.issued[stem]; ok {
		return cr, nil
	}
	c, err := s.ca.IssueService(id)
	if err != nil {
		return Credentials{}, err
	}
	return s.write(stem, "Service:"+string(id.Role)+"/"+id.ID, c)
}

// user returns the client certificate of user name, issuing it on first
// use.
func (s *clusterSecurity) user(name string) (Credentials, error) {
	stem := "user-" + name
	if name == AdminUser {
		stem = AdminUser // DIR/tls/admin.pem, as strata dev --secure names it
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cr, ok := s.issued[stem]; ok {
		return cr, nil
	}
	c, err := s.ca.IssueClient(name)
	if err != nil {
		return Credentials{}, err
	}
	return s.write(stem, "User:"+name, c)
}

// processSecurity is the security flags of the process with identity id.
func (s *clusterSecurity) processSecurity(id tlsconfig.Identity) (launch.Security, error) {
	cr, err := s.service(id)
	if err != nil {
		return launch.Security{}, err
	}
	return launch.Security{TLSCert: cr.Cert, TLSKey: cr.Key, TLSClientCA: s.caFile,
		RequireAuth: true, SuperUsers: []string{"User:" + AdminUser}}, nil
}

// Secure reports whether the cluster runs in secure mode
// (ClusterConfig.Secure).
func (c *Cluster) Secure() bool { return c.sec != nil }

// scheme is the scheme of the cluster's API and admin URLs.
func (c *Cluster) scheme() string {
	if c.sec != nil {
		return "https://"
	}
	return "http://"
}

// process is the flags of a process of the cluster with its role and id:
// processFlags, plus, in secure mode, its certificate (issued now unless
// it was before) and the security flags.
func (c *Cluster) process(bin, api, admin string, role tlsconfig.Role, id int) launch.Process {
	c.t.Helper()
	p := processFlags(bin, api, admin)
	if c.sec != nil {
		sec, err := c.sec.processSecurity(tlsconfig.Identity{Role: role, ID: strconv.Itoa(id)})
		if err != nil {
			c.t.Fatalf("harness: %v", err)
		}
		sec.AuditLog = c.auditLogPath(string(role), id)
		p.Security = sec
	}
	return p
}

// auditLogPath is where the process of role and id writes its audit log
// in a secure cluster: DIR/audit-<role>-<id>.log.
func (c *Cluster) auditLogPath(role string, id int) string {
	return filepath.Join(filepath.Dir(c.sec.dir), fmt.Sprintf("audit-%s-%d.log", role, id))
}

// AuditLines are the lines of n's audit log (--audit-log) so far, in a
// secure cluster; none before the process writes one.
func (n *Node) AuditLines() ([]string, error) {
	n.c.mustSecure("AuditLines")
	b, err := os.ReadFile(n.c.auditLogPath(n.Service, n.ID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}

// Admin is the admin's credentials in a secure cluster (the CA and
// DIR/tls/admin.pem; User:admin is a super user everywhere), and the zero
// Credentials in a plain one: the harness's own calls use them.
func (c *Cluster) Admin() Credentials {
	if c.sec == nil {
		return Credentials{}
	}
	return c.sec.admin
}

// UserCert returns a client certificate of user name (CN name, principal
// User:<name>) issued by the cluster's CA, with the CA. The same name
// gives the same files. Secure mode only.
func (c *Cluster) UserCert(name string) Credentials {
	c.t.Helper()
	c.mustSecure("UserCert")
	cr, err := c.sec.user(name)
	if err != nil {
		c.t.Fatalf("harness: user certificate %q: %v", name, err)
	}
	return cr
}

// ServiceCert returns a service certificate of identity
// spiffe://strata/<role>/<id> issued by the cluster's CA, with the CA: a
// running process's own (ServiceCert(tlsconfig.RoleStorage, "3") is
// storage node 3's), or a new one. Secure mode only.
func (c *Cluster) ServiceCert(role tlsconfig.Role, id string) Credentials {
	c.t.Helper()
	c.mustSecure("ServiceCert")
	cr, err := c.sec.service(tlsconfig.Identity{Role: role, ID: id})
	if err != nil {
		c.t.Fatalf("harness: service certificate %s/%s: %v", role, id, err)
	}
	return cr
}

// NoCredentials is a caller that trusts the cluster's CA and presents
// nothing: no certificate, no token. Secure mode only.
func (c *Cluster) NoCredentials() Credentials {
	c.t.Helper()
	c.mustSecure("NoCredentials")
	return Credentials{CA: c.sec.caFile}
}

// CAFile is the cluster's CA certificate (PEM); empty for a plain cluster.
func (c *Cluster) CAFile() string {
	if c.sec == nil {
		return ""
	}
	return c.sec.caFile
}

func (c *Cluster) mustSecure(what string) {
	c.t.Helper()
	if c.sec == nil {
		c.t.Fatalf("harness: %s needs a secure cluster (ClusterConfig.Secure)", what)
	}
}

// CreateUser creates user name through the controller, as the admin, and
// returns its token with the CA. It returns once every controller,
// storage node, gateway and coordinator of the cluster authenticates the
// token (it reaches them through the controller's metadata stream), so a
// test may use it anywhere at once; it fails the test when one does not
// within ctx. Secure mode only.
func (c *Cluster) CreateUser(ctx context.Context, name string) Credentials {
	c.t.Helper()
	c.mustSecure("CreateUser")
	resp, err := c.Ctl().CreateUser(ctx, connect.NewRequest(&controllerv1.CreateUserRequest{Name: name}))
	if err != nil {
		c.t.Fatalf("harness: create user %s: %v", name, err)
	}
	cr := Credentials{Principal: "User:" + name, CA: c.sec.caFile, Token: resp.Msg.GetToken()}
	for _, n := range c.authenticating() {
		if err := n.waitAuthenticates(ctx, cr); err != nil {
			c.t.Fatalf("harness: user %s: %v", name, err)
		}
	}
	return cr
}

// authenticating lists the running processes that authenticate users:
// every one but tiering, which serves Strata services only.
func (c *Cluster) authenticating() []*Node {
	var out []*Node
	for _, n := range append(append(c.Controllers(), c.StorageNodes()...), c.Services()...) {
		if n.Service != "tiering" && !n.Proc.Exited() {
			out = append(out, n)
		}
	}
	return out
}

// waitAuthenticates waits until n answers a call with cr with anything
// but UNAUTHENTICATED: a call its ACLs may refuse, so PERMISSION_DENIED
// counts as authenticated.
func (n *Node) waitAuthenticates(ctx context.Context, cr Credentials) error {
	hc := n.c.HTTPClientAs(cr)
	var call func(context.Context) error
	switch n.Service {
	case "controller":
		cl := controllerv1connect.NewControllerServiceClient(hc, n.URL)
		call = func(ctx context.Context) error {
			_, err := cl.DescribeCluster(ctx, connect.NewRequest(&controllerv1.DescribeClusterRequest{}))
			return err
		}
	case "storage":
		cl := storagev1connect.NewStorageServiceClient(hc, n.URL)
		call = func(ctx context.Context) error {
			_, err := cl.DescribeLog(ctx, connect.NewRequest(&storagev1.DescribeLogRequest{}))
			return err
		}
	case "gateway":
		cl := gatewayv1connect.NewGatewayServiceClient(hc, n.URL)
		call = func(ctx context.Context) error {
			_, err := cl.WhoAmI(ctx, connect.NewRequest(&gatewayv1.WhoAmIRequest{}))
			return err
		}
	case "coordinator":
		cl := coordinatorv1connect.NewCoordinatorServiceClient(hc, n.URL)
		call = func(ctx context.Context) error {
			_, err := cl.ListGroups(ctx, connect.NewRequest(&coordinatorv1.ListGroupsRequest{}))
			return err
		}
	default:
		return nil
	}
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := call(cctx)
		cancel()
		if err == nil || connect.CodeOf(err) == connect.CodePermissionDenied {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not authenticate %s: %v; last answer: %v", n.Name(), cr.Principal, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// HTTPClient is the HTTP client the harness calls the cluster with: h2c,
// or in a secure cluster HTTP/2 over TLS as the admin. Build Connect
// clients of any service on it.
func (c *Cluster) HTTPClient() *http.Client { return c.http }

// HTTPClientAs returns an HTTP client calling the cluster as cr: HTTP/2
// over TLS verifying the servers with cr.CA and presenting cr's
// certificate, and cr.Token as a bearer token on every request; h2c for
// the zero Credentials. Its idle connections are closed when the test
// ends; it fails the test when cr's files do not load.
func (c *Cluster) HTTPClientAs(cr Credentials) *http.Client {
	c.t.Helper()
	hc, err := httpClientAs(cr)
	if err != nil {
		c.t.Fatalf("harness: %v", err)
	}
	c.t.Cleanup(hc.CloseIdleConnections)
	return hc
}

func httpClientAs(cr Credentials) (*http.Client, error) {
	var hc *http.Client
	if cr.CA == "" && cr.Cert == "" {
		hc = H2CClient()
	} else {
		cfg, err := tlsClientConfig(cr)
		if err != nil {
			return nil, err
		}
		var protos http.Protocols
		protos.SetHTTP2(true)
		hc = &http.Client{Transport: &http.Transport{
			Protocols:       &protos,
			TLSClientConfig: cfg,
			DialContext:     (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		}}
	}
	if cr.Token != "" {
		hc.Transport = bearer{header: "Bearer " + cr.Token, next: hc.Transport}
	}
	return hc, nil
}

// TLSConfig is the TLS client configuration of cr (see HTTPClientAs), for
// a test that speaks TLS itself: it verifies servers against cr.CA (the
// system's roots without one) and presents cr's certificate to every
// server that asks. It offers no ALPN protocol; set NextProtos.
func (cr Credentials) TLSConfig() (*tls.Config, error) { return tlsClientConfig(cr) }

// tlsClientConfig is TLS 1.3 verifying servers against cr.CA (the
// system's roots without one) and presenting cr's certificate, when it has
// one, to every server that asks.
func tlsClientConfig(cr Credentials) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	if cr.CA != "" {
		b, err := os.ReadFile(cr.CA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%s: no PEM certificate", cr.CA)
		}
		cfg.RootCAs = pool
	}
	if cr.Cert != "" {
		pair, err := tls.LoadX509KeyPair(cr.Cert, cr.Key)
		if err != nil {
			return nil, err
		}
		// Presented whatever CAs the server names as acceptable, as
		// lib/tlsconfig's clients do: the server decides. (With
		// Certificates, crypto/tls would send none that the server's CAs
		// did not sign, and a test of a foreign certificate would test
		// nothing.)
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return cfg, nil
}

// bearer adds the Authorization header to every request.
type bearer struct {
	header string
	next   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.header)
	return b.next.RoundTrip(r)
}

func (b bearer) CloseIdleConnections() {
	if c, ok := b.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// newReadyClient is the client the admin listeners' /readyz is asked
// with: plain, or TLS verifying the processes against sec's CA (admin
// listeners ask for no client certificate).
func newReadyClient(sec *clusterSecurity) (*http.Client, error) {
	if sec == nil {
		return &http.Client{Timeout: 2 * time.Second}, nil
	}
	cfg, err := tlsClientConfig(Credentials{CA: sec.caFile})
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}
