package guard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
)

// TestRulesRefuseByDefault: a procedure the table names reaches its
// handler; one it does not name is refused before the handler runs, and
// Missing names it against the service's descriptor.
func TestRulesRefuseByDefault(t *testing.T) {
	const named, unnamed = "/strata.storage.v1.StorageService/DescribeLog", "/strata.storage.v1.StorageService/Replicate"
	rules := Rules{named: {Access: ACL, Check: "describe on the cluster"}}
	ran := map[string]bool{}
	mux := http.NewServeMux()
	for _, proc := range []string{named, unnamed} {
		mux.Handle(proc, connect.NewUnaryHandler(proc,
			func(context.Context, *connect.Request[commonv1.TopicPartition]) (*connect.Response[commonv1.TopicPartition], error) {
				ran[proc] = true
				return connect.NewResponse(&commonv1.TopicPartition{}), nil
			}, connect.WithInterceptors(rules.Interceptor())))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	call := func(proc string) error {
		c := connect.NewClient[commonv1.TopicPartition, commonv1.TopicPartition](srv.Client(), srv.URL+proc)
		_, err := c.CallUnary(context.Background(), connect.NewRequest(&commonv1.TopicPartition{}))
		return err
	}
	if err := call(named); err != nil || !ran[named] {
		t.Fatalf("a named procedure: %v, handler ran %v", err, ran[named])
	}
	err := call(unnamed)
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "has no access rule") || ran[unnamed] {
		t.Fatalf("an unnamed procedure: %v, handler ran %v; want PERMISSION_DENIED before the handler", err, ran[unnamed])
	}
	svc := storagev1.File_strata_storage_v1_storage_proto.Services().ByName("StorageService")
	noRule, noRPC := rules.Missing(svc)
	if len(noRule) != svc.Methods().Len()-1 || !strings.Contains(strings.Join(noRule, " "), unnamed) || len(noRPC) != 0 {
		t.Fatalf("Missing: no rule %v, no RPC %v", noRule, noRPC)
	}
	if _, noRPC := (Rules{"/x.Y/Z": {}}).Missing(storagev1.File_strata_storage_v1_storage_proto.Services().ByName("StorageService")); len(noRPC) != 1 {
		t.Fatalf("a rule naming no RPC was not reported: %v", noRPC)
	}
}
