package guard

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// Access is who may call an RPC, in the words of its rule.
type Access uint8

const (
	// ServiceOnly: Strata's own services (a service identity), and a
	// particular one where the rule says so.
	ServiceOnly Access = iota + 1
	// ACL: an operation on a resource, checked against the ACLs.
	ACL
	// Filtered: anyone authenticated; the answer holds only what the
	// caller may describe.
	Filtered
	// Authenticated: any authenticated principal, with no ACL.
	Authenticated
	// Forwarded: a door's RPC that the owner of the data answers. The
	// door checks nothing itself and calls the owner in the caller's
	// name (Forward); the owner checks the rule its own table names, and
	// Check says which owner that is.
	Forwarded
)

func (a Access) String() string {
	switch a {
	case ServiceOnly:
		return "service only"
	case ACL:
		return "ACL"
	case Filtered:
		return "filtered"
	case Authenticated:
		return "authenticated"
	case Forwarded:
		return "forwarded"
	}
	return fmt.Sprintf("Access(%d)", uint8(a))
}

// Rule is what one RPC requires of its caller, as its handler checks it.
type Rule struct {
	Access Access
	// Check is the rule in words: "write on the topic", "the storage
	// node the request names".
	Check string
}

// Rules is a service's table of every RPC it serves, by full procedure
// name ("/strata.storage.v1.StorageService/Produce"): one place that says
// what each requires. Its Interceptor refuses any procedure the table does
// not name, so an RPC added to a service without a rule is refused by
// default; each service's test compares its table with the service's
// descriptor (Missing), so such an RPC fails the build's tests first.
type Rules map[string]Rule

// Missing returns the RPCs of sd without a rule, and the rules that name
// no RPC of sd, each sorted.
func (r Rules) Missing(sd protoreflect.ServiceDescriptor) (noRule, noRPC []string) {
	served := map[string]bool{}
	ms := sd.Methods()
	for i := range ms.Len() {
		proc := "/" + string(sd.FullName()) + "/" + string(ms.Get(i).Name())
		served[proc] = true
		if _, ok := r[proc]; !ok {
			noRule = append(noRule, proc)
		}
	}
	for proc := range r {
		if !served[proc] {
			noRPC = append(noRPC, proc)
		}
	}
	slices.Sort(noRule)
	slices.Sort(noRPC)
	return noRule, noRPC
}

// Interceptor refuses, with PERMISSION_DENIED, every call of a procedure
// the table does not name; the others go to their handler, which checks
// their rule. A Forwarded procedure's handler runs with its context
// marked by Forward, so its calls to the owner carry the caller's
// principal.
func (r Rules) Interceptor() connect.Interceptor { return rulesInterceptor{r} }

type rulesInterceptor struct{ r Rules }

// admit returns the context the handler of proc runs with, or the
// refusal of a procedure without a rule.
func (i rulesInterceptor) admit(ctx context.Context, proc string) (context.Context, error) {
	rule, ok := i.r[proc]
	if !ok {
		return ctx, apierr.New(connect.CodePermissionDenied, commonv1.Reason_REASON_CLUSTER_AUTHORIZATION_FAILED,
			"permission denied: %s has no access rule, and is refused by default", proc)
	}
	if rule.Access == Forwarded {
		ctx = Forward(ctx)
	}
	return ctx, nil
}

func (i rulesInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, err := i.admit(ctx, req.Spec().Procedure)
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i rulesInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i rulesInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := i.admit(ctx, conn.Spec().Procedure)
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
