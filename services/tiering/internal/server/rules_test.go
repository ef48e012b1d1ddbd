package server

import (
	"testing"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
)

// TestEveryRPCHasARule: every TieringService RPC has an access rule, and
// every rule names an RPC; an RPC added without one would be refused.
func TestEveryRPCHasARule(t *testing.T) {
	sd := tieringv1.File_strata_tiering_v1_tiering_proto.Services().ByName("TieringService")
	if noRule, noRPC := rules.Missing(sd); len(noRule)+len(noRPC) > 0 {
		t.Fatalf("RPCs without an access rule: %v; rules naming no RPC: %v", noRule, noRPC)
	}
}
