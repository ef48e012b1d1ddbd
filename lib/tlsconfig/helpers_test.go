package tlsconfig_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

// waitTimeout bounds every wait for a reload: a poll every 10ms on an idle
// machine, sized for one whose cores are busy with other work.
const waitTimeout = 30 * time.Second

// testPoll is the poll interval of the Sources the tests load.
const testPoll = 10 * time.Millisecond

func newCA(t *testing.T, name string) *devca.CA {
	t.Helper()
	ca, err := devca.New(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issueService(t *testing.T, ca *devca.CA, role tlsconfig.Role, id string) *devca.Cert {
	t.Helper()
	c, err := ca.IssueService(tlsconfig.Identity{Role: role, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func issueClient(t *testing.T, ca *devca.CA, user string) *devca.Cert {
	t.Helper()
	c, err := ca.IssueClient(user)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writePair writes c as dir/name.crt and dir/name.key and returns the
// paths.
func writePair(t *testing.T, dir, name string, c *devca.Cert) (certPath, keyPath string) {
	t.Helper()
	certPath, keyPath = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := c.WriteFiles(certPath, keyPath); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

// writeBundle writes the certificates of cas, concatenated, to path by
// renaming a temporary file over it.
func writeBundle(t *testing.T, path string, cas ...*devca.CA) {
	t.Helper()
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.CertPEM...)
	}
	replaceFile(t, path, b)
}

// replaceFile writes b to path as an atomic writer does: a new file
// renamed over the old one.
func replaceFile(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func load(t *testing.T, f tlsconfig.Files, opts ...tlsconfig.Option) *tlsconfig.Source {
	t.Helper()
	opts = append([]tlsconfig.Option{tlsconfig.WithPollInterval(testPoll), tlsconfig.WithLogger(discardLogger())}, opts...)
	s, err := tlsconfig.Load(context.Background(), f, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func serverConfig(t *testing.T, s *tlsconfig.Source, auth tlsconfig.ClientAuth) *tls.Config {
	t.Helper()
	cfg, err := s.ServerConfig(auth)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// lockedBuffer is a log destination written by a Source's goroutine and
// read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startTLSServer serves cfg on a loopback port: each connection that
// completes its handshake is answered with one line, the client's
// principal ("none" when it presented no certificate, "refused: ..." when
// PeerPrincipal refuses it), and closed. It returns the port.
func startTLSServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				tc := c.(*tls.Conn)
				tc.SetDeadline(time.Now().Add(waitTimeout))
				if err := tc.Handshake(); err != nil {
					return
				}
				cs := tc.ConnectionState()
				p, err := tlsconfig.PeerPrincipal(&cs)
				switch {
				case err != nil:
					fmt.Fprintf(tc, "refused: %v", err)
				case p.IsZero():
					io.WriteString(tc, "none")
				default:
					io.WriteString(tc, p.String())
				}
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// result is what a client saw of one connection.
type result struct {
	reply     string   // the server's line
	serial    *big.Int // the serial number of the server's certificate
	didResume bool
}

// dial connects to host:port with cfg, reads the server's answer and
// returns it, or the error of the handshake or of the read (under TLS 1.3
// a server refuses a client certificate after the client's side of the
// handshake is done, so the refusal arrives on the read).
func dial(host, port string, cfg *tls.Config) (result, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(host, port), cfg)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitTimeout))
	b, err := io.ReadAll(c)
	if err != nil {
		return result{}, err
	}
	if len(b) == 0 {
		return result{}, errors.New("connection closed without an answer")
	}
	cs := c.ConnectionState()
	return result{reply: string(b), serial: cs.PeerCertificates[0].SerialNumber, didResume: cs.DidResume}, nil
}

// plainClient is a crypto/tls client config that trusts ca for the server
// "localhost" and presents cert, if given, whatever CAs the server names
// as acceptable (crypto/tls would otherwise send no certificate to a
// server that does not name its issuer, and the server's check would go
// untested).
func plainClient(ca *devca.CA, cert ...*devca.Cert) *tls.Config {
	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
	if len(cert) > 0 {
		c := cert[0].TLS()
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	return cfg
}
