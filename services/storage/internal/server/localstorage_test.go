package server

import (
	"context"
	"testing"

	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/guard"
)

// TestLocalStorageKeepsThePrincipalNotTheMark: the node's own Kafka
// listener calls its StorageService in the Kafka principal's name, so the
// handlers check and charge that principal; but what the handlers call in
// turn (the tiering service, which answers services only) must go as the
// node, not be forwarded as the user.
func TestLocalStorageKeepsThePrincipalNotTheMark(t *testing.T) {
	alice := authn.NewContext(context.Background(), authn.Info{Principal: acl.User("alice"), Method: authn.MethodToken})
	marked := guard.Forward(alice)
	if _, ok := guard.ForwardedPrincipal(marked); !ok {
		t.Fatal("the listener's context is not marked to forward")
	}
	ctx := localStorage{}.ctx(marked)
	if p := guard.Principal(ctx); p != acl.User("alice") {
		t.Fatalf("the handlers see %v; want User:alice", p)
	}
	if p, ok := guard.ForwardedPrincipal(ctx); ok {
		t.Fatalf("the handlers' calls would forward %v; want none", p)
	}
}
