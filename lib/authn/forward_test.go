package authn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/strata-mq/strata/lib/acl"
)

// callAs calls WhoAmI with the Authorization header authorization ("" for
// none) and ForwardHeader values forward.
func callAs(t *testing.T, client *http.Client, url, authorization string, forward ...string) (string, error) {
	t.Helper()
	c := connect.NewClient[emptypb.Empty, wrapperspb.StringValue](client, url+whoAmI)
	req := connect.NewRequest(&emptypb.Empty{})
	if authorization != "" {
		req.Header().Set("Authorization", authorization)
	}
	for _, f := range forward {
		req.Header().Add(ForwardHeader, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.CallUnary(ctx, req)
	if err != nil {
		return "", err
	}
	return res.Msg.GetValue(), nil
}

// TestForwardedPrincipal: a door's service identity may name the
// principal it calls for, which the request then has; a user, a service
// that is not a door, or a door naming a service or a wildcard is
// refused; without enforcement a user's header is ignored.
func TestForwardedPrincipal(t *testing.T) {
	pki := newPKI(t)
	users, toks := newUsers(t, "bob")
	certPrincipal := func(c *x509.Certificate) (string, bool) {
		switch c.Subject.CommonName {
		case "gateway-1":
			return "Service:gateway/1", true
		case "tiering-1":
			return "Service:tiering/1", true
		}
		return "User:" + c.Subject.CommonName, true
	}
	door := func(p acl.Principal) bool { return p.String() == "Service:gateway/1" }
	for _, anonymous := range []bool{false, true} {
		a, err := New(context.Background(), Config{CertPrincipal: certPrincipal, Users: users, MayForward: door, AllowAnonymous: anonymous})
		if err != nil {
			t.Fatal(err)
		}
		bob := "Bearer " + toks["bob"].Reveal()
		for _, tc := range []struct {
			name, cn, authorization string
			forward                 []string
			want, refused           string
		}{
			{"a door's call for a user", "gateway-1", "", []string{"User:alice"}, "User:alice forwarded", ""},
			{"a door's own call", "gateway-1", "", nil, "Service:gateway/1 certificate", ""},
			{"a door naming a service", "gateway-1", "", []string{"Service:controller"}, "", "names no principal a user can be"},
			{"a door naming every user", "gateway-1", "", []string{"User:*"}, "", "names no principal a user can be"},
			{"a door naming two", "gateway-1", "", []string{"User:alice", "User:carol"}, "", "more than one"},
			{"a service that is no door", "tiering-1", "", []string{"User:alice"}, "", "Service:tiering/1 may not send " + ForwardHeader},
			{"a user's certificate", "alice", "", []string{"User:admin"}, "", "User:alice may not send " + ForwardHeader},
			{"a user's token", "", bob, []string{"User:admin"}, "", "User:bob may not send " + ForwardHeader},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var cert *tls.Certificate
				if tc.cn != "" {
					c := pki.clientCert(t, tc.cn)
					cert = &c
				}
				srv, client := serveTLS(t, a, pki, tls.VerifyClientCertIfGiven, cert)
				got, err := callAs(t, client, srv.URL, tc.authorization, tc.forward...)
				switch {
				case tc.refused != "" && anonymous && (tc.cn == "alice" || tc.authorization != "" || tc.cn == "tiering-1"):
					// Without enforcement a header nobody may send is
					// ignored: the caller stays itself.
					if err != nil || got == "" || strings.HasPrefix(got, "User:admin") {
						t.Fatalf("without enforcement: got %q, %v; want the caller itself", got, err)
					}
				case tc.refused != "":
					wantRefused(t, err, tc.refused, toks["bob"].Reveal())
				case err != nil || got != tc.want:
					t.Fatalf("got %q, %v; want %q", got, err, tc.want)
				}
			})
		}
	}
}
