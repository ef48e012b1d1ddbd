package serve

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/testwait"
)

// TestCallLimits: a user holds at most maxStreams streams and maxPolls
// waiting long polls in a process; past them its next is refused with
// RESOURCE_EXHAUSTED while other users, services and calls that do not
// wait go on; a slot freed is usable again.
func TestCallLimits(t *testing.T) {
	l := newCallLimits(3, 2)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	mux := http.NewServeMux()
	mux.Handle("/test.v1/Watch", connect.NewServerStreamHandler("/test.v1/Watch",
		func(ctx context.Context, _ *connect.Request[gatewayv1.WatchClusterRequest], s *connect.ServerStream[gatewayv1.WatchClusterResponse]) error {
			if err := s.Send(&gatewayv1.WatchClusterResponse{}); err != nil {
				return err
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}, connect.WithInterceptors(l)))
	mux.Handle("/test.v1/Fetch", connect.NewUnaryHandler("/test.v1/Fetch",
		func(ctx context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
			if req.Msg.GetMaxWaitMs() > 0 {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return connect.NewResponse(&storagev1.FetchResponse{}), nil
		}, connect.WithInterceptors(l)))
	// The principal comes from a header here; Guard.Wrap sets it in a
	// process.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := r.Header.Get("Test-Principal"); name != "" {
			info := authn.Info{Principal: acl.User(name), Method: authn.MethodToken}
			if svc, ok := strings.CutPrefix(name, "svc:"); ok {
				info = authn.Info{Principal: acl.Principal{Type: acl.TypeService, Name: svc}, Method: authn.MethodCertificate}
			}
			r = r.WithContext(authn.NewContext(r.Context(), info))
		}
		mux.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	hc := srv.Client()
	watch := connect.NewClient[gatewayv1.WatchClusterRequest, gatewayv1.WatchClusterResponse](hc, srv.URL+"/test.v1/Watch")
	fetch := connect.NewClient[storagev1.FetchRequest, storagev1.FetchResponse](hc, srv.URL+"/test.v1/Fetch")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// open starts a stream as who and waits for its first message: the
	// stream holds its slot from then on. cancel ends it.
	open := func(who string) (cancel func(), err error) {
		sctx, cancel := context.WithCancel(ctx)
		req := connect.NewRequest(&gatewayv1.WatchClusterRequest{})
		req.Header().Set("Test-Principal", who)
		s, err := watch.CallServerStream(sctx, req)
		if err != nil {
			return cancel, err
		}
		if !s.Receive() {
			return cancel, s.Err()
		}
		return cancel, nil
	}
	exhausted := func(err error) bool { return connect.CodeOf(err) == connect.CodeResourceExhausted }

	var alice []func()
	for range 3 {
		c, err := open("alice")
		if err != nil {
			t.Fatalf("alice's stream within the bound: %v", err)
		}
		alice = append(alice, c)
	}
	if _, err := open("alice"); !exhausted(err) || !strings.Contains(err.Error(), "User:alice has 3 streams open") {
		t.Fatalf("alice's fourth stream: %v; want RESOURCE_EXHAUSTED naming her bound", err)
	}
	if _, err := open("bob"); err != nil {
		t.Fatalf("bob's stream, with alice at her bound: %v", err)
	}
	for range 5 {
		if _, err := open("svc:storage/1"); err != nil {
			t.Fatalf("a service's stream: %v", err)
		}
	}
	alice[0]()
	testwait.Until(t, time.Minute, "alice's stream after she closed one", func() error { _, err := open("alice"); return err })

	// Long polls: calls that wait count, calls that do not wait never do.
	poll := func(who string, wait int32) error {
		req := connect.NewRequest(&storagev1.FetchRequest{MaxWaitMs: wait})
		req.Header().Set("Test-Principal", who)
		_, err := fetch.CallUnary(ctx, req)
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- poll("carol", 500) }()
	}
	testwait.Until(t, time.Minute, "carol's two polls both waiting", func() error {
		return testwait.True(l.count(l.polls, "User:carol") == 2)
	})
	if err := poll("carol", 500); !exhausted(err) {
		t.Fatalf("carol's third long poll: %v; want RESOURCE_EXHAUSTED", err)
	}
	if err := poll("carol", 0); err != nil {
		t.Fatalf("carol's fetch that does not wait: %v", err)
	}
	once.Do(func() { close(release) })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("carol's waiting poll: %v", err)
		}
	}
	if n := l.count(l.polls, "User:carol"); n != 0 {
		t.Fatalf("%d of carol's polls still counted after they ended", n)
	}
}

// count is how many slots of counts principal holds.
func (l *callLimits) count(counts map[string]int, principal string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return counts[principal]
}
