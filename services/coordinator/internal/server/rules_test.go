package server

import (
	"testing"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
)

// TestEveryRPCHasARule: every CoordinatorService RPC has an access rule,
// and every rule names an RPC; an RPC added without one would be refused.
func TestEveryRPCHasARule(t *testing.T) {
	sd := coordinatorv1.File_strata_coordinator_v1_coordinator_proto.Services().ByName("CoordinatorService")
	if noRule, noRPC := rules.Missing(sd); len(noRule)+len(noRPC) > 0 {
		t.Fatalf("RPCs without an access rule: %v; rules naming no RPC: %v", noRule, noRPC)
	}
}
