package tests

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/tests/harness"
)

// scramFirstAnswer opens a TLS connection to the Kafka listener at addr,
// starts SASL SCRAM-SHA-256 for user with a fixed client nonce and
// returns the server-first message, or the error code and message the
// listener answered the client-first message with.
func scramFirstAnswer(ctx context.Context, addr string, pool *x509.CertPool, user string) (string, error) {
	d := tls.Dialer{Config: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("principals-test"))
	roundTrip := func(req kmsg.Request, corr int32) (kmsg.Response, error) {
		if _, err := conn.Write(f.AppendRequest(nil, req, corr)); err != nil {
			return nil, err
		}
		var size [4]byte
		if _, err := io.ReadFull(conn, size[:]); err != nil {
			return nil, err
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(conn, body); err != nil {
			return nil, err
		}
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		return resp, resp.ReadFrom(body[4:]) // after the correlation id
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "SCRAM-SHA-256"
	hr, err := roundTrip(hs, 1)
	if err != nil {
		return "", err
	}
	if code := hr.(*kmsg.SASLHandshakeResponse).ErrorCode; code != 0 {
		return "", fmt.Errorf("SaslHandshake: error code %d", code)
	}
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.Version, auth.SASLAuthBytes = 1, []byte("n,,n="+user+",r=principalstestnonce")
	ar, err := roundTrip(auth, 2)
	if err != nil {
		return "", err
	}
	r := ar.(*kmsg.SASLAuthenticateResponse)
	if r.ErrorCode != 0 {
		msg := ""
		if r.ErrorMessage != nil {
			msg = *r.ErrorMessage
		}
		return "", fmt.Errorf("SaslAuthenticate: error code %d: %s", r.ErrorCode, msg)
	}
	return string(r.SASLAuthBytes), nil
}

// saltAndIterations are the s= and i= fields of a server-first message.
func saltAndIterations(t *testing.T, serverFirst string) (string, string) {
	t.Helper()
	f := strings.Split(serverFirst, ",")
	if len(f) != 3 || !strings.HasPrefix(f[0], "r=principalstestnonce") || !strings.HasPrefix(f[1], "s=") || !strings.HasPrefix(f[2], "i=") {
		t.Fatalf("server-first message %q", serverFirst)
	}
	return f[1][2:], f[2][2:]
}

// testSCRAMDoesNotRevealUsers: on every Kafka listener of the cluster,
// the first SCRAM answer for a name that is no user has the form of a
// user's (same iteration count, same salt length), and its salt is the
// same on each listener and each connection, as a real user's is: the
// controller's mock secret reached them all.
func testSCRAMDoesNotRevealUsers(ctx context.Context, t *testing.T, addrs []string, pool *x509.CertPool, user string) {
	var userSalt, userIter string
	salts := map[string]string{}
	for _, addr := range addrs {
		first, err := scramFirstAnswer(ctx, addr, pool, user)
		if err != nil {
			t.Fatalf("%s: %s's first message: %v", addr, user, err)
		}
		userSalt, userIter = saltAndIterations(t, first)
		for _, name := range []string{"nobody", "nobody", harness.AdminUser} {
			first, err := scramFirstAnswer(ctx, addr, pool, name)
			if err != nil {
				t.Fatalf("%s: %s's first message refused (the answer tells it is no user): %v", addr, name, err)
			}
			salt, iter := saltAndIterations(t, first)
			if iter != userIter || len(salt) != len(userSalt) {
				t.Errorf("%s: %s gets salt %q and %s iterations; a user gets %q and %s", addr, name, salt, iter, userSalt, userIter)
			}
			if prev, ok := salts[name]; ok && prev != salt {
				t.Errorf("%s: %s's fake salt %q differs from %q seen before", addr, name, salt, prev)
			}
			salts[name] = salt
		}
	}
}
