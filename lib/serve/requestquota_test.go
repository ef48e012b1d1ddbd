package serve

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/quota"
)

// testClock is a clock the handlers below move by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestRequestQuota: a user over its request percentage is answered with
// the throttle (header and throttle_time_ms) and its next request is held
// back; the time a handler waits, by Pause or in a call to another
// service, is not charged; services and users without a quota are never
// throttled.
func TestRequestQuota(t *testing.T) {
	clock := &testClock{now: time.Unix(1000, 0)}
	g, err := guard.New(context.Background(), guard.Config{RequireAuth: true, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	// 1%: 10ms of handling a second, a bucket of 10ms.
	g.Apply(&commonv1.SecurityState{Quotas: []*commonv1.Quota{{Principal: "User:slow", RequestPercentage: 1}}})
	rt := connect.WithInterceptors(requestTime{g: g})

	mux := http.NewServeMux()
	var srvURL string
	// Busy handles for 50ms of the clock: five times slow's bucket.
	mux.Handle("/test.v1/Busy", connect.NewUnaryHandler("/test.v1/Busy",
		func(ctx context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
			clock.Add(50 * time.Millisecond)
			return connect.NewResponse(&storagev1.FetchResponse{ThrottleTimeMs: 7}), nil
		}, rt))
	// Poll works 1ms and waits 10 s, as a long poll does.
	mux.Handle("/test.v1/Poll", connect.NewUnaryHandler("/test.v1/Poll",
		func(ctx context.Context, req *connect.Request[storagev1.FetchRequest]) (*connect.Response[storagev1.FetchResponse], error) {
			clock.Add(time.Millisecond)
			resume := quota.Pause(ctx)
			clock.Add(10 * time.Second)
			resume()
			return connect.NewResponse(&storagev1.FetchResponse{}), nil
		}, rt))
	// Upstream is another service, whose handling takes 10 s of the
	// clock; Forward calls it, as the gateway calls a storage node.
	mux.Handle("/test.v1/Upstream", connect.NewUnaryHandler("/test.v1/Upstream",
		func(ctx context.Context, req *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
			clock.Add(10 * time.Second)
			return connect.NewResponse(&gatewayv1.MetadataResponse{}), nil
		}))
	var upstream *connect.Client[gatewayv1.MetadataRequest, gatewayv1.MetadataResponse]
	mux.Handle("/test.v1/Forward", connect.NewUnaryHandler("/test.v1/Forward",
		func(ctx context.Context, req *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
			return upstream.CallUnary(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{}))
		}, rt))
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
	srvURL = srv.URL
	hc := srv.Client()
	upstream = connect.NewClient[gatewayv1.MetadataRequest, gatewayv1.MetadataResponse](hc, srvURL+"/test.v1/Upstream", rt)
	busy := connect.NewClient[storagev1.FetchRequest, storagev1.FetchResponse](hc, srvURL+"/test.v1/Busy")
	poll := connect.NewClient[storagev1.FetchRequest, storagev1.FetchResponse](hc, srvURL+"/test.v1/Poll")
	forward := connect.NewClient[gatewayv1.MetadataRequest, gatewayv1.MetadataResponse](hc, srvURL+"/test.v1/Forward")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The waits cost slow nothing: a second of throttle would follow
	// otherwise.
	for range 3 {
		req := connect.NewRequest(&storagev1.FetchRequest{})
		req.Header().Set("Test-Principal", "slow")
		resp, err := poll.CallUnary(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if h := resp.Header().Get(ThrottleHeader); h != "" || resp.Msg.GetThrottleTimeMs() != 0 {
			t.Fatalf("a long poll handled for 1ms answered throttle %q / %d ms, want none", h, resp.Msg.GetThrottleTimeMs())
		}
		req2 := connect.NewRequest(&gatewayv1.MetadataRequest{})
		req2.Header().Set("Test-Principal", "slow")
		resp2, err := forward.CallUnary(ctx, req2)
		if err != nil {
			t.Fatal(err)
		}
		if h := resp2.Header().Get(ThrottleHeader); h != "" {
			t.Fatalf("a call that waited 10 s on another service answered throttle %q, want none", h)
		}
	}

	// Others are not throttled however busy.
	for _, who := range []string{"fast", "svc:gateway/1"} {
		req := connect.NewRequest(&storagev1.FetchRequest{})
		req.Header().Set("Test-Principal", who)
		resp, err := busy.CallUnary(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if h := resp.Header().Get(ThrottleHeader); h != "" || resp.Msg.GetThrottleTimeMs() != 7 {
			t.Fatalf("%s answered throttle %q / %d ms, want none and the handler's own 7", who, h, resp.Msg.GetThrottleTimeMs())
		}
	}

	// slow, handled for 50ms, owes more than one window: the throttle is
	// bounded at a second, in the header and in throttle_time_ms.
	req := connect.NewRequest(&storagev1.FetchRequest{})
	req.Header().Set("Test-Principal", "slow")
	resp, err := busy.CallUnary(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if h, ms := resp.Header().Get(ThrottleHeader), resp.Msg.GetThrottleTimeMs(); h != "1000" || ms != 1000 {
		t.Fatalf("slow after 50ms handled at 1%%: throttle %q / %d ms, want 1000", h, ms)
	}

	// The clock stands still, so slow still owes: its next request is
	// held back until its deadline.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	req = connect.NewRequest(&storagev1.FetchRequest{})
	req.Header().Set("Test-Principal", "slow")
	_, err = poll.CallUnary(short, req)
	if ce := new(connect.Error); !errors.As(err, &ce) || ce.Code() != connect.CodeDeadlineExceeded {
		t.Fatalf("slow's request while it owes: %v, want DEADLINE_EXCEEDED", err)
	}
	// Once the debt is paid, it is admitted again.
	clock.Add(time.Second)
	req = connect.NewRequest(&storagev1.FetchRequest{})
	req.Header().Set("Test-Principal", "slow")
	if _, err := poll.CallUnary(ctx, req); err != nil {
		t.Fatalf("slow after its throttle: %v", err)
	}
}
