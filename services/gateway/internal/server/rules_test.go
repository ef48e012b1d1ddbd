package server

import (
	"testing"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// TestEveryRPCHasARule: every GatewayService RPC has an access rule, and
// every rule names an RPC; an RPC added without one would be refused.
func TestEveryRPCHasARule(t *testing.T) {
	sd := gatewayv1.File_strata_gateway_v1_gateway_proto.Services().ByName("GatewayService")
	if noRule, noRPC := rules.Missing(sd); len(noRule)+len(noRPC) > 0 {
		t.Fatalf("RPCs without an access rule: %v; rules naming no RPC: %v", noRule, noRPC)
	}
}
