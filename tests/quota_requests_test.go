package tests

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// TestRequestQuota: on `strata dev --secure`, `strata quota set
// --request-percentage` gives User:busy a hundredth of a percent of a
// request handler's time per process (Kafka's request_percentage). busy and
// User:idle, which has no quota, each send cheap requests as fast as
// they are answered, at the same time, to the gateway: Metadata on its
// Kafka listener, then Metadata on its Connect API. busy's answers carry
// a throttle (throttle_time_ms; the Strata-Throttle-Time-Ms header) and
// it is held to a small fraction of idle's requests; idle's answers carry
// none.
//
// Nothing here is timed against the clock: each phase runs until idle
// has had its requests answered, and compares the two principals'
// counts over that same stretch. A busy machine slows idle's requests
// more than it raises busy's allowance: at 0.05% a run beside a full
// test suite saw busy at 0.29 of idle's count (23/s against 79/s, each of
// Metadata's handlings some 20 µs); at 0.01% busy's allowance is a fifth
// of that, which leaves the quarter the check wants four times over.
func TestRequestQuota(t *testing.T) {
	t.Parallel()
	d := harness.StartDev(t, "--secure", "--storage-nodes", "1")
	ctx := harness.Deadline(t, 3*time.Minute)
	admin := readAdminEnv(t, filepath.Join(d.Dir, "admin.env"))
	var adminEnv []string
	for k, v := range admin {
		adminEnv = append(adminEnv, k+"="+v)
	}
	cli := func(args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		r := runCLIEnv(cctx, t, d.Strata, adminEnv, "", args...)
		if r.code != 0 {
			t.Fatalf("strata %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
		}
		return r.stdout
	}
	tokenOf := func(user string) string {
		return strings.TrimPrefix(strings.TrimSpace(cli("user", "create", user)), "STRATA_TOKEN=")
	}
	busyToken, idleToken := tokenOf("busy"), tokenOf("idle")
	if out := cli("quota", "set", "--principal", "User:busy", "--request-percentage", "0.01"); out != "quota of User:busy: produce unlimited, fetch unlimited, requests 0.01%\n" {
		t.Fatalf("quota set: %q", out)
	}
	if out := cli("quota", "list"); !strings.Contains(out, "REQUESTS") || !strings.Contains(out, "0.01%") {
		t.Fatalf("quota list:\n%s", out)
	}

	caPEM, err := os.ReadFile(d.File.TLSCA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA in " + d.File.TLSCA)
	}
	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}

	t.Run("Kafka", func(t *testing.T) {
		// Each client sends to the bootstrap only: the gateway, one
		// process, whose quota is what is measured.
		kafkaAs := func(user, token string) *kgo.Broker {
			cl, err := kgo.NewClient(kgo.SeedBrokers(d.File.KafkaBootstrap), kgo.DialTLSConfig(tlsCfg),
				kgo.SASL(plain.Auth{User: user, Pass: token}.AsMechanism()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cl.Close)
			return cl.SeedBrokers()[0]
		}
		busy, idle := kafkaAs("busy", busyToken), kafkaAs("idle", idleToken)
		metadata := func(ctx context.Context, b *kgo.Broker) (int32, error) {
			resp, err := b.Request(ctx, kmsg.NewPtrMetadataRequest())
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.MetadataResponse).ThrottleMillis, nil
		}
		// The token and the quota reach the gateway with the metadata
		// stream: busy is throttled once they have.
		testwait.Until(t, 60*time.Second, "User:busy's request quota to throttle it on the Kafka listener", func() error {
			for range 200 {
				ms, err := metadata(ctx, busy)
				if err != nil {
					return err
				}
				if ms > 0 {
					return nil
				}
			}
			return errors.New("200 Metadata answers without a throttle")
		})
		compareRequestRates(ctx, t, "Kafka Metadata", func(ctx context.Context) (int32, error) { return metadata(ctx, busy) },
			func(ctx context.Context) (int32, error) { return metadata(ctx, idle) })
	})

	t.Run("Connect", func(t *testing.T) {
		connectAs := func(token string) gatewayv1connect.GatewayServiceClient {
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}}
			t.Cleanup(hc.CloseIdleConnections)
			return gatewayv1connect.NewGatewayServiceClient(hc, d.File.Gateway, connect.WithInterceptors(bearer(token)))
		}
		busy, idle := connectAs(busyToken), connectAs(idleToken)
		metadata := func(c gatewayv1connect.GatewayServiceClient) func(ctx context.Context) (int32, error) {
			return func(ctx context.Context) (int32, error) {
				resp, err := c.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{}))
				if err != nil {
					return 0, err
				}
				h := resp.Header().Get(serve.ThrottleHeader)
				if h == "" {
					return 0, nil
				}
				ms, err := strconv.Atoi(h)
				if err != nil || ms <= 0 {
					return 0, fmt.Errorf("%s: %q", serve.ThrottleHeader, h)
				}
				return int32(ms), nil
			}
		}
		testwait.Until(t, 60*time.Second, "User:busy's request quota to throttle it on the Connect API", func() error {
			for range 200 {
				ms, err := metadata(busy)(ctx)
				if err != nil {
					return err
				}
				if ms > 0 {
					return nil
				}
			}
			return errors.New("200 Metadata answers without a throttle")
		})
		compareRequestRates(ctx, t, "Connect Metadata", metadata(busy), metadata(idle))
	})
}

// bearer sends token as the Authorization of every call.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// compareRequestRates runs busy's and idle's requests back to back, at
// the same time, until idle has had idleRequests answered and busy
// busyAnswers (busy's first request may be held up to a second, longer
// than idle's run on a quiet machine), and checks that busy's answers
// carry throttles and that it got fewer than a quarter of idle's
// requests through over that stretch; idle's carry no throttle.
func compareRequestRates(ctx context.Context, t *testing.T, what string, busy, idle func(context.Context) (int32, error)) {
	t.Helper()
	const idleRequests, busyAnswers = 2000, 2
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg                   sync.WaitGroup
		busyN, busyThrottled int
		busyMaxMs            int32
		busyErr              error
		busyDone             atomic.Int64 // busy's answers so far, for idle's loop
		busyOver             atomic.Bool  // busy's loop ended (an error)
	)
	wg.Go(func() {
		defer busyOver.Store(true)
		for runCtx.Err() == nil {
			ms, err := busy(runCtx)
			if err != nil {
				if runCtx.Err() == nil {
					busyErr = err
				}
				return
			}
			busyN++
			busyDone.Add(1)
			if ms > 0 {
				busyThrottled++
				busyMaxMs = max(busyMaxMs, ms)
			}
		}
	})
	start := time.Now()
	var idleMaxMs int32
	var idleErr error
	idleN := 0
	for ; idleN < idleRequests || (busyDone.Load() < busyAnswers && !busyOver.Load()); idleN++ {
		ms, err := idle(ctx)
		if err != nil {
			idleErr = err
			break
		}
		idleMaxMs = max(idleMaxMs, ms)
	}
	took := time.Since(start)
	stop()
	wg.Wait()
	if idleErr != nil || busyErr != nil {
		t.Fatalf("%s: User:idle's error %v, User:busy's %v", what, idleErr, busyErr)
	}
	t.Logf("%s over %v: User:idle (no quota) %d requests (%.0f/s); User:busy (0.01%%) %d (%.1f/s), %d answered with a throttle, the longest %d ms",
		what, took.Round(time.Millisecond), idleN, float64(idleN)/took.Seconds(), busyN, float64(busyN)/took.Seconds(), busyThrottled, busyMaxMs)
	if idleMaxMs != 0 {
		t.Errorf("%s: User:idle, which has no quota, was answered with a throttle of %d ms", what, idleMaxMs)
	}
	if busyThrottled == 0 {
		t.Errorf("%s: none of User:busy's %d answers carried a throttle", what, busyN)
	}
	if busyN*4 > idleN {
		t.Errorf("%s: User:busy got %d requests through while User:idle got %d; want fewer than a quarter", what, busyN, idleN)
	}
}
