package tlsconfig_test

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/tlsconfig"
)

func TestParseIdentity(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want tlsconfig.Identity // zero: refused
	}{
		{"spiffe://strata/storage/0", tlsconfig.Identity{Role: tlsconfig.RoleStorage, ID: "0"}},
		{"spiffe://strata/storage/2147483647", tlsconfig.Identity{Role: tlsconfig.RoleStorage, ID: "2147483647"}},
		{"spiffe://strata/controller/1", tlsconfig.Identity{Role: tlsconfig.RoleController, ID: "1"}},
		{"spiffe://strata/controller", tlsconfig.Identity{Role: tlsconfig.RoleController}},
		{"spiffe://strata/gateway", tlsconfig.Identity{Role: tlsconfig.RoleGateway}},
		{"spiffe://strata/gateway/strata-gateway-7d9f8-x2x4q", tlsconfig.Identity{Role: tlsconfig.RoleGateway, ID: "strata-gateway-7d9f8-x2x4q"}},
		{"spiffe://strata/coordinator/host_1.example", tlsconfig.Identity{Role: tlsconfig.RoleCoordinator, ID: "host_1.example"}},
		{"spiffe://strata/tiering/t1", tlsconfig.Identity{Role: tlsconfig.RoleTiering, ID: "t1"}},

		{"spiffe://strata/storage", tlsconfig.Identity{}},            // a storage node has an id
		{"spiffe://strata/storage/03", tlsconfig.Identity{}},         // not canonical
		{"spiffe://strata/storage/-1", tlsconfig.Identity{}},         // negative
		{"spiffe://strata/storage/2147483648", tlsconfig.Identity{}}, // beyond int32
		{"spiffe://strata/storage/x", tlsconfig.Identity{}},
		{"spiffe://strata/admin/1", tlsconfig.Identity{}}, // unknown role
		{"spiffe://strata/Gateway", tlsconfig.Identity{}}, // roles are lower case
		{"spiffe://strata/gateway/", tlsconfig.Identity{}},
		{"spiffe://strata/gateway/a/b", tlsconfig.Identity{}},
		{"spiffe://strata/gateway/.hidden", tlsconfig.Identity{}},
		{"spiffe://strata/gateway/..", tlsconfig.Identity{}},
		{"spiffe://strata/gateway/" + strings.Repeat("a", 65), tlsconfig.Identity{}},
		{"spiffe://strata/gateway/a%20b", tlsconfig.Identity{}},
		{"spiffe://strata/storage/%31", tlsconfig.Identity{}}, // an escape, even of a digit
		{"spiffe://strata/gateway?x=1", tlsconfig.Identity{}},
		{"spiffe://strata/gateway#f", tlsconfig.Identity{}},
		{"spiffe://strata:443/gateway", tlsconfig.Identity{}},
		{"spiffe://user@strata/gateway", tlsconfig.Identity{}},
		{"spiffe://Strata/gateway", tlsconfig.Identity{}},
		{"SPIFFE://strata/gateway", tlsconfig.Identity{}},
		{"spiffe://other/gateway", tlsconfig.Identity{}},
		{"https://strata/gateway", tlsconfig.Identity{}},
		{"spiffe:strata/gateway", tlsconfig.Identity{}},
		{"spiffe://strata", tlsconfig.Identity{}},
		{"spiffe://strata/", tlsconfig.Identity{}},
		{"", tlsconfig.Identity{}},
	} {
		got, err := tlsconfig.ParseIdentity(tc.in)
		if tc.want == (tlsconfig.Identity{}) {
			if err == nil {
				t.Errorf("ParseIdentity(%q) = %+v; want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseIdentity(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if s := got.String(); s != tc.in {
			t.Errorf("ParseIdentity(%q).String() = %q", tc.in, s)
		}
		if u := got.URL().String(); u != tc.in {
			t.Errorf("ParseIdentity(%q).URL() = %q", tc.in, u)
		}
	}
}

func TestIdentityNodeID(t *testing.T) {
	if n, ok := (tlsconfig.Identity{Role: tlsconfig.RoleStorage, ID: "42"}).NodeID(); !ok || n != 42 {
		t.Errorf("storage/42 NodeID = %d, %v", n, ok)
	}
	if _, ok := (tlsconfig.Identity{Role: tlsconfig.RoleController, ID: "42"}).NodeID(); ok {
		t.Error("controller/42 has a node id")
	}
}

func uri(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func TestIdentityAndPrincipalOf(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cn        string
		uris      []string
		identity  string // IdentityOf's, "" for none
		principal string // PrincipalOf's String(), or the error's text after "!"
	}{
		{"service", "", []string{"spiffe://strata/storage/3"}, "spiffe://strata/storage/3", "spiffe://strata/storage/3"},
		{"service with a CN", "alice", []string{"spiffe://strata/gateway"}, "spiffe://strata/gateway", "spiffe://strata/gateway"},
		{"other URIs ignored", "", []string{"https://example.com/x", "spiffe://strata/tiering", "spiffe://other.org/storage/3"}, "spiffe://strata/tiering", "spiffe://strata/tiering"},
		{"user", "alice", nil, "", "User:alice"},
		{"user with foreign URI", "bob@example.com", []string{"spiffe://other.org/svc"}, "", "User:bob@example.com"},
		{"user with a space", "Carol Smith", nil, "", "User:Carol Smith"},
		{"two identities", "alice", []string{"spiffe://strata/storage/1", "spiffe://strata/controller"}, "", "!names 2 strata identities"},
		{"same identity twice", "", []string{"spiffe://strata/storage/1", "spiffe://strata/storage/1"}, "", "!names 2 strata identities"},
		{"unknown role, not read as its CN", "alice", []string{"spiffe://strata/admin/1"}, "", `!unknown role "admin"`},
		{"upper-case domain still claims strata", "alice", []string{"spiffe://STRATA/storage/1"}, "", "!want spiffe://strata/<role>[/<id>]"},
		{"neither", "", nil, "", "!names neither a strata identity (URI SAN) nor a user (Subject CN)"},
		{"control character in CN", "ali\nce", nil, "", "!non-printable"},
		{"CN too long", strings.Repeat("x", 65), nil, "", "!longer than 64"},
		{"CN with outer space", " alice", nil, "", "!leading or trailing space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert := &x509.Certificate{Subject: pkix.Name{CommonName: tc.cn}}
			for _, u := range tc.uris {
				cert.URIs = append(cert.URIs, uri(u))
			}
			id, ok := tlsconfig.IdentityOf(cert)
			if got := map[bool]string{true: id.String(), false: ""}[ok]; got != tc.identity {
				t.Errorf("IdentityOf = %q, %v; want %q", id, ok, tc.identity)
			}
			p, err := tlsconfig.PrincipalOf(cert)
			if want, refused := strings.CutPrefix(tc.principal, "!"); refused {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("PrincipalOf = %q, %v; want an error containing %q", p, err, want)
				}
				return
			}
			if err != nil || p.String() != tc.principal {
				t.Errorf("PrincipalOf = %q, %v; want %q", p, err, tc.principal)
			}
			if p.IsService() != (tc.identity != "") {
				t.Errorf("IsService = %v", p.IsService())
			}
		})
	}
}

func TestPeerPrincipalReadsVerifiedChainsOnly(t *testing.T) {
	user := &x509.Certificate{Subject: pkix.Name{CommonName: "alice"}}
	for _, tc := range []struct {
		name string
		cs   *tls.ConnectionState
		want string // principal, "" for none, "!" for an error
	}{
		{"plain HTTP", nil, ""},
		{"no certificate", &tls.ConnectionState{}, ""},
		{"verified", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{user}, VerifiedChains: [][]*x509.Certificate{{user}}}, "User:alice"},
		{"presented but not verified", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{user}}, "!"},
	} {
		p, err := tlsconfig.PeerPrincipal(tc.cs)
		switch {
		case tc.want == "!" && err == nil:
			t.Errorf("%s: PeerPrincipal = %q; want an error", tc.name, p)
		case tc.want != "!" && (err != nil || p.String() != tc.want):
			t.Errorf("%s: PeerPrincipal = %q, %v; want %q", tc.name, p, err, tc.want)
		case tc.want == "" && !p.IsZero():
			t.Errorf("%s: PeerPrincipal not zero: %+v", tc.name, p)
		}
	}
}
