package kafkabridge

import (
	"context"
	"errors"
	"fmt"

	"github.com/xdg-go/scram"

	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/token"
)

// SASL SCRAM (RFC 5802, RFC 7677) as Kafka offers it: the username is the
// user's name, the password its Strata token, and the server checks the
// client's proof against the credentials the controller derived from the
// token when it issued it (lib/token, "SCRAM credentials"). The exchange
// itself is github.com/xdg-go/scram's server; this file looks the
// credentials up and maps the outcome onto the connection's principal.

// errSCRAMRefused is the reason given for an unknown user and for a
// wrong token alike, so the answer does not say which it was.
var errSCRAMRefused = errors.New("unknown user or wrong token")

// scramMechanism is SASL mechanism m on the users a knows.
func scramMechanism(a *authn.Authenticator, m token.SCRAMMechanism) kafkawire.Mechanism {
	hash := scram.SHA256
	if m == token.SCRAMSHA512 {
		hash = scram.SHA512
	}
	return kafkawire.Mechanism{Name: m.String(), Start: func(context.Context) kafkawire.Exchange {
		return &scramExchange{a: a, mech: m, hash: hash}
	}}
}

// scramExchange is one connection's SCRAM exchange: the client's first
// message (username and nonce) answered with the salt, iteration count
// and server nonce, then its proof checked and answered with the server's
// signature.
type scramExchange struct {
	a    *authn.Authenticator
	mech token.SCRAMMechanism
	hash scram.HashGeneratorFcn
	conv *scram.ServerConversation
	// refusal is why the credential lookup failed, kept because the
	// library answers a failed lookup with its own error.
	refusal error
}

func (e *scramExchange) Step(ctx context.Context, msg []byte) ([]byte, context.Context, error) {
	if e.conv == nil {
		// The users in force at the first message serve the whole
		// exchange; a user deleted in between is refused at the next
		// exchange, as a token is at the next request.
		users := e.a.Users()
		srv, err := e.hash.NewServer(func(name string) (scram.StoredCredentials, error) {
			k, err := lookupSCRAM(users, name, e.mech)
			e.refusal = err
			return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(k.Salt), Iters: k.Iterations},
				StoredKey: k.StoredKey, ServerKey: k.ServerKey}, err
		})
		if err != nil {
			return nil, nil, err
		}
		e.conv = srv.NewConversation()
		reply, err := e.conv.Step(string(msg))
		if err != nil {
			if e.refusal != nil {
				return nil, nil, e.refusal
			}
			// Not the library's text: it may quote the message.
			return nil, nil, errors.New("malformed first message (want n,,n=<user>,r=<nonce>)")
		}
		if z := e.conv.AuthzID(); z != "" && z != e.conv.Username() {
			return nil, nil, fmt.Errorf("the authorization id %q differs from the username; acting as another user is not offered", z)
		}
		return []byte(reply), nil, nil
	}
	reply, err := e.conv.Step(string(msg))
	if err != nil || !e.conv.Valid() {
		return nil, nil, errSCRAMRefused
	}
	info := authn.Info{Principal: acl.User(e.conv.Username()), Method: authn.MethodToken}
	return []byte(reply), authn.NewContext(ctx, info), nil
}

// lookupSCRAM returns a user's credential for m, or why there is none:
// the user is unknown, or its token was issued before SCRAM was offered
// and has only its hash.
func lookupSCRAM(users *token.Users, name string, m token.SCRAMMechanism) (token.SCRAMKeys, error) {
	if k, ok := users.SCRAM(name, m); ok {
		return k, nil
	}
	if _, ok := users.Hashed(name); ok {
		return token.SCRAMKeys{}, fmt.Errorf("the token of user %s predates SCRAM: re-issue it (strata user delete %s, then strata user create %s; ACLs and quotas stay) or use PLAIN", name, name, name)
	}
	return token.SCRAMKeys{}, errSCRAMRefused
}
