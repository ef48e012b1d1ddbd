package server

import (
	"testing"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
)

// TestEveryRPCHasARule: every ControllerService RPC has an access rule,
// and every rule names an RPC; an RPC added without one would be refused.
func TestEveryRPCHasARule(t *testing.T) {
	sd := controllerv1.File_strata_controller_v1_controller_proto.Services().ByName("ControllerService")
	if noRule, noRPC := rules.Missing(sd); len(noRule)+len(noRPC) > 0 {
		t.Fatalf("RPCs without an access rule: %v; rules naming no RPC: %v", noRule, noRPC)
	}
}
