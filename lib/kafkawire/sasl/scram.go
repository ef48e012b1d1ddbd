package sasl

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/token"
)

// SASL SCRAM (RFC 5802, RFC 7677) as Kafka offers it: the username is the
// user's name, the password its Strata token, and the server checks the
// client's proof against the credentials the controller derived from the
// token when it issued it (lib/token, "SCRAM credentials"). Two messages
// from the client:
//
//	client-first  n,,n=<user>,r=<client nonce>
//	server-first  r=<client nonce><server nonce>,s=<salt>,i=<iterations>
//	client-final  c=biws,r=<nonce>,p=<proof>
//	server-final  v=<server signature>
//
// The server side is written here rather than taken from a SCRAM library
// because of one rule of Kafka's own server that clients rely on: the
// client-final nonce must end with the server-first nonce, not equal it.
// librdkafka (kcat, confluent-kafka-python, -go, -dotnet) sends its own
// nonce followed by the whole server-first nonce, and a strict server
// refuses every one of its logins. Accepting it is safe: the server's
// fresh nonce is in server-first, which is part of the AuthMessage the
// proof covers, so an old exchange cannot be replayed. The keys and the
// proof check are lib/token's, tested against RFC 7677's vector; the
// exchange is tested against two independent clients (franz-go's and
// xdg-go/scram's) and librdkafka.
//
// Channel binding (SCRAM-...-PLUS) is not offered; a client that asks
// for it is refused. Message extensions in client-first (Kafka's
// tokenauth=true for delegation tokens) are ignored; a mandatory one
// (m=) is refused.

// errSCRAMRefused is the reason given, at the final message, for an
// unknown user, a wrong token and a token issued before SCRAM was offered
// alike: a more precise reason would tell a stranger which users exist.
var errSCRAMRefused = errors.New("unknown user or wrong token (a token issued before SCRAM was offered works with PLAIN only: re-issue it)")

// scramNonceBytes is how many random bytes the server adds to the nonce.
const scramNonceBytes = 24

// scramMechanism is SASL mechanism m on the users a knows.
func scramMechanism(a *authn.Authenticator, m token.SCRAMMechanism) kafkawire.Mechanism {
	return kafkawire.Mechanism{Name: m.String(), Start: func(context.Context) kafkawire.Exchange {
		return &scramExchange{a: a, mech: m}
	}}
}

// scramExchange is one connection's SCRAM exchange.
type scramExchange struct {
	a    *authn.Authenticator
	mech token.SCRAMMechanism
	// Set by the client's first message:
	user        string          // the user the first message names
	keys        token.SCRAMKeys // the user's credential, or a fake one
	real        bool            // keys is the user's credential
	gs2Header   string          // "n,," or "y,," (and an authorization id)
	firstBare   string          // client-first without the GS2 header
	serverFirst string
	nonce       string // client nonce and server nonce, as in serverFirst
}

func (e *scramExchange) Step(ctx context.Context, msg []byte) ([]byte, context.Context, error) {
	if e.serverFirst == "" {
		reply, err := e.first(string(msg))
		return reply, nil, err
	}
	reply, err := e.final(string(msg))
	if err != nil {
		return nil, nil, err
	}
	info := authn.Info{Principal: acl.User(e.user), Method: authn.MethodToken}
	return reply, authn.NewContext(ctx, info), nil
}

// first answers the client's first message with the nonce, salt and
// iteration count of the user's credential.
func (e *scramExchange) first(msg string) ([]byte, error) {
	malformed := errors.New("malformed first message (want n,,n=<user>,r=<nonce>)")
	flag, rest, ok := strings.Cut(msg, ",")
	if !ok {
		return nil, malformed
	}
	switch {
	case flag == "n" || flag == "y":
	case strings.HasPrefix(flag, "p="):
		return nil, errors.New("channel binding (SCRAM-...-PLUS) is not offered")
	default:
		return nil, malformed
	}
	authzField, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, malformed
	}
	authzid := ""
	if authzField != "" {
		raw, ok := strings.CutPrefix(authzField, "a=")
		if authzid, ok = decodeSASLName(raw, ok); !ok {
			return nil, malformed
		}
	}
	fields := strings.Split(bare, ",")
	if len(fields) < 2 {
		return nil, malformed
	}
	if strings.HasPrefix(fields[0], "m=") {
		return nil, errors.New("mandatory SCRAM extensions are not supported")
	}
	raw, ok := strings.CutPrefix(fields[0], "n=")
	user, ok := decodeSASLName(raw, ok)
	cnonce, nok := strings.CutPrefix(fields[1], "r=")
	if !ok || user == "" || !nok || cnonce == "" {
		return nil, malformed
	}
	if authzid != "" && authzid != user {
		return nil, fmt.Errorf("the authorization id %q differs from the username; acting as another user is not offered", authzid)
	}
	// An unknown name gets a fake credential and the exchange goes on,
	// to be refused at the final message like a wrong token: the first
	// answer looks the same for every name (authn.SCRAMCredential).
	keys, real := e.a.SCRAMCredential(user, e.mech)
	var b [scramNonceBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("server nonce: %w", err)
	}
	e.user, e.keys, e.real = user, keys, real
	e.gs2Header = msg[:len(msg)-len(bare)]
	e.firstBare = bare
	e.nonce = cnonce + base64.RawStdEncoding.EncodeToString(b[:])
	e.serverFirst = "r=" + e.nonce + ",s=" + base64.StdEncoding.EncodeToString(keys.Salt) + ",i=" + strconv.Itoa(keys.Iterations)
	return []byte(e.serverFirst), nil
}

// final checks the client's proof and answers with the server's
// signature.
func (e *scramExchange) final(msg string) ([]byte, error) {
	malformed := errors.New("malformed final message (want c=<binding>,r=<nonce>,p=<proof>)")
	cut := strings.LastIndexByte(msg, ',')
	if cut < 0 {
		return nil, malformed
	}
	withoutProof := msg[:cut]
	proofB64, ok := strings.CutPrefix(msg[cut+1:], "p=")
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	fields := strings.Split(withoutProof, ",")
	if !ok || err != nil || len(fields) < 2 {
		return nil, malformed
	}
	binding, ok := strings.CutPrefix(fields[0], "c=")
	cbind, err := base64.StdEncoding.DecodeString(binding)
	if !ok || err != nil || string(cbind) != e.gs2Header {
		return nil, errors.New("the channel binding of the final message is not the first message's GS2 header")
	}
	// Kafka's rule: the nonce ends with the server-first nonce (see the
	// comment at the top of this file).
	if nonce, ok := strings.CutPrefix(fields[1], "r="); !ok || !strings.HasSuffix(nonce, e.nonce) {
		return nil, errors.New("the nonce of the final message is not the server's")
	}
	authMessage := e.firstBare + "," + e.serverFirst + "," + withoutProof
	// The proof is checked against a fake credential as against a real
	// one, so that both refusals cost the same.
	if ok := e.keys.VerifyProof(authMessage, proof); !ok || !e.real {
		return nil, errSCRAMRefused
	}
	return []byte("v=" + base64.StdEncoding.EncodeToString(e.keys.ServerSignature(authMessage))), nil
}

// decodeSASLName undoes SCRAM's escaping of a name (RFC 5802, section
// 5.1: "=2C" is a comma, "=3D" an equals sign, any other "=" is
// malformed). ok passes through a failed prefix cut.
func decodeSASLName(raw string, ok bool) (string, bool) {
	if !ok {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] != '=' {
			b.WriteByte(raw[i])
			continue
		}
		switch {
		case strings.HasPrefix(raw[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(raw[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}
