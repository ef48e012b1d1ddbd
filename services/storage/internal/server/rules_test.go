package server

import (
	"testing"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
)

// TestEveryRPCHasARule: every StorageService RPC has an access rule, and
// every rule names an RPC; an RPC added without one would be refused.
func TestEveryRPCHasARule(t *testing.T) {
	sd := storagev1.File_strata_storage_v1_storage_proto.Services().ByName("StorageService")
	if noRule, noRPC := rules.Missing(sd); len(noRule)+len(noRPC) > 0 {
		t.Fatalf("RPCs without an access rule: %v; rules naming no RPC: %v", noRule, noRPC)
	}
}
