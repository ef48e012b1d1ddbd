package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/lib/tlsconfig/devca"
)

const testToken = "strata_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"

func TestValidateSecurityOptions(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.pem")
	for _, tc := range []struct {
		name string
		opts []ProducerOpt
		want string
	}{
		{"token alone", []ProducerOpt{Token(testToken)}, ""},
		{"http client and TLS files", []ProducerOpt{HTTPClient(http.DefaultClient), TLSCA("/ca.pem")},
			"option HTTPClient cannot be combined with TLSCA, ClientCertificate or TLSConfig"},
		{"TLS config and files", []ProducerOpt{TLSConfig(&tls.Config{}), ClientCertificate("/c.pem", "/k.pem")},
			"option TLSConfig cannot be combined with TLSCA or ClientCertificate"},
		{"certificate without key", []ProducerOpt{ClientCertificate("/c.pem", "")},
			"option ClientCertificate needs both a certificate file and a key file"},
		{"token with a newline", []ProducerOpt{Token(testToken + "\nX-Evil: 1")},
			"option Token: the token has spaces or characters an HTTP header cannot carry"},
		{"CA file missing", []ProducerOpt{TLSCA(missing)}, fmt.Sprintf("client: TLS files: CA bundle %q: no such file", missing)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewProducer("https://127.0.0.1:1", tc.opts...)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				p.Close()
				return
			}
			if err == nil {
				p.Close()
				t.Fatalf("no error; want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q; want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), testToken) {
				t.Errorf("error %q shows the token", err)
			}
		})
	}
}

// TestTokenNeverPrinted: a configuration printed by fmt, whatever the verb,
// shows no token.
func TestTokenNeverPrinted(t *testing.T) {
	cfg := defaultConfig()
	Token(testToken).applyProducer(&cfg)
	ic := newBearerInterceptor(cfg.token)
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{cfg, &cfg, cfg.token, ic} {
			if s := fmt.Sprintf(verb, v); strings.Contains(s, testToken) || strings.Contains(s, "0123456789") {
				t.Errorf("%s of %T shows the token: %s", verb, v, s)
			}
		}
	}
	if got := cfg.token.String(); got != "[redacted]" {
		t.Errorf("String() = %q", got)
	}
}

// tlsPeer is an https server standing in for a gateway and a storage node
// at once: it answers Metadata (topic "t", one partition led by itself)
// and ListOffsets, and records what each call carried.
type tlsPeer struct {
	gatewayv1connect.UnimplementedGatewayServiceHandler
	storagev1connect.UnimplementedStorageServiceHandler
	url string

	mu    sync.Mutex
	calls []peerCall
}

type peerCall struct {
	path, auth, cn string
	protoMajor     int
}

func (p *tlsPeer) Metadata(context.Context, *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	return connect.NewResponse(&gatewayv1.MetadataResponse{
		MetadataVersion: 1,
		Nodes:           []*commonv1.Node{{NodeId: 1, Address: p.url}},
		Topics: []*commonv1.TopicMetadata{{Name: "t", TopicId: "id",
			Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}}}}},
	}), nil
}

func (p *tlsPeer) ListOffsets(_ context.Context, req *connect.Request[storagev1.ListOffsetsRequest]) (*connect.Response[storagev1.ListOffsetsResponse], error) {
	out := &storagev1.ListOffsetsResponse{}
	for _, lp := range req.Msg.GetPartitions() {
		out.Partitions = append(out.Partitions, &storagev1.ListOffsetsPartitionResult{Topic: lp.GetTopic(), Partition: lp.GetPartition(), Offset: 42})
	}
	return connect.NewResponse(out), nil
}

func (p *tlsPeer) seen() []peerCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]peerCall(nil), p.calls...)
}

// startTLSPeer serves a tlsPeer over TLS (HTTP/2 by ALPN) with a
// gateway's certificate from ca; client certificates from ca are
// verified when given.
func startTLSPeer(t *testing.T, ca *devca.CA) *tlsPeer {
	t.Helper()
	cert, err := ca.IssueService(tlsconfig.Identity{Role: tlsconfig.RoleGateway, ID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	peer := &tlsPeer{}
	mux := http.NewServeMux()
	mux.Handle(gatewayv1connect.NewGatewayServiceHandler(peer))
	mux.Handle(storagev1connect.NewStorageServiceHandler(peer))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := peerCall{path: r.URL.Path, auth: r.Header.Get("Authorization"), protoMajor: r.ProtoMajor}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			c.cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		peer.mu.Lock()
		peer.calls = append(peer.calls, c)
		peer.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{cert.TLS()},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    ca.Pool(),
		MinVersion:   tls.VersionTLS13,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	peer.url = srv.URL
	return peer
}

// writeCA writes ca's bundle and a client certificate for user; it returns
// the three file names.
func writeCA(t *testing.T, ca *devca.CA, user string) (caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := ca.IssueClient(user)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, user+".pem"), filepath.Join(dir, user+"-key.pem")
	if err := c.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	return caFile, certFile, keyFile
}

// TestHTTPSWithCertificateAndToken: against an https gateway and storage
// node, the client verifies them with the CA it was given, speaks HTTP/2,
// presents its certificate and sends the token on every call.
func TestHTTPSWithCertificateAndToken(t *testing.T) {
	ca, err := devca.New("test CA")
	if err != nil {
		t.Fatal(err)
	}
	peer := startTLSPeer(t, ca)
	caFile, certFile, keyFile := writeCA(t, ca, "alice")

	c, err := NewConsumer(peer.url, TLSCA(caFile), ClientCertificate(certFile, keyFile), Token(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	offs, err := c.ListOffsets(ctxT(t), "t", []int32{0}, StartOffset())
	if err != nil {
		t.Fatal(err)
	}
	if offs[0] != 42 {
		t.Fatalf("offsets %v", offs)
	}
	calls := peer.seen()
	paths := map[string]bool{}
	for _, call := range calls {
		paths[call.path] = true
		if call.auth != "Bearer "+testToken || call.cn != "alice" || call.protoMajor != 2 {
			t.Errorf("%s: Authorization %q, certificate CN %q, HTTP/%d; want the bearer token, alice, HTTP/2",
				call.path, call.auth, call.cn, call.protoMajor)
		}
	}
	for _, want := range []string{"/strata.gateway.v1.GatewayService/Metadata", "/strata.storage.v1.StorageService/ListOffsets"} {
		if !paths[want] {
			t.Errorf("no call to %s among %v", want, calls)
		}
	}

	// TLSConfig instead of files, and no token: no Authorization header.
	pool := ca.Pool()
	c2, err := NewConsumer(peer.url, TLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	before := len(peer.seen())
	if _, err := c2.Partitions(ctxT(t), "t"); err != nil {
		t.Fatal(err)
	}
	for _, call := range peer.seen()[before:] {
		if call.auth != "" || call.cn != "" {
			t.Errorf("without token or certificate: Authorization %q, CN %q", call.auth, call.cn)
		}
	}
}

// TestHTTPSWithoutTheCA: a server whose CA the client was not given is
// refused at once, and the error does not carry the token.
func TestHTTPSWithoutTheCA(t *testing.T) {
	ca, err := devca.New("test CA")
	if err != nil {
		t.Fatal(err)
	}
	peer := startTLSPeer(t, ca)
	other, err := devca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, _, _ := writeCA(t, other, "bob")
	p, err := NewProducer(peer.url, TLSCA(otherCA), Token(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Partitions(ctxT(t), "t")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err %v; want a certificate verification failure", err)
	}
	if strings.Contains(err.Error(), testToken) {
		t.Errorf("error shows the token: %v", err)
	}
	if n := len(peer.seen()); n != 0 {
		t.Errorf("%d calls reached a server the client does not trust", n)
	}
}

// TestRefusalsAreTypedAndNotRetried: UNAUTHENTICATED and PERMISSION_DENIED
// match ErrUnauthenticated and ErrPermissionDenied, carry the server's
// line, and are not retried by the producer, the consumer or the metadata
// lookup.
func TestRefusalsAreTypedAndNotRetried(t *testing.T) {
	t.Run("produce", func(t *testing.T) {
		fc := newFake(t, 1, "t", 1)
		f := fc.AddFault(&fakecluster.Fault{Method: "Produce", Partition: -1, Code: connect.CodePermissionDenied})
		p := newProducer(t, fc)
		err := p.ProduceSync(ctxT(t), &Record{Topic: "t", Value: []byte("v")})
		var e *Error
		if !errors.Is(err, ErrPermissionDenied) || errors.Is(err, ErrUnauthenticated) || !errors.As(err, &e) || e.Message == "" {
			t.Fatalf("err %v; want ErrPermissionDenied with the server's message", err)
		}
		if n := fc.Fired(f); n != 1 {
			t.Errorf("produce sent %d times; a refusal is not retried", n)
		}
	})
	t.Run("fetch", func(t *testing.T) {
		fc := newFake(t, 1, "t", 1)
		f := fc.AddFault(&fakecluster.Fault{Method: "Fetch", Partition: -1, Code: connect.CodeUnauthenticated})
		c := newConsumer(t, fc)
		c.Assign(map[string]map[int32]Offset{"t": {0: AtOffset(0)}})
		_, err := c.Poll(ctxT(t))
		if !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("Poll: %v; want ErrUnauthenticated", err)
		}
		if n := fc.Fired(f); n != 1 {
			t.Errorf("fetch sent %d times; a refusal is not retried", n)
		}
	})
	t.Run("metadata after an answer", func(t *testing.T) {
		fc := newFake(t, 1, "t", 1)
		if err := fc.CreateTopic("u", 1, 1); err != nil {
			t.Fatal(err)
		}
		p := newProducer(t, fc, UnknownTopicWait(time.Minute))
		if _, err := p.Partitions(ctxT(t), "t"); err != nil {
			t.Fatal(err)
		}
		f := fc.AddFault(&fakecluster.Fault{Method: "Metadata", Partition: -1, Code: connect.CodePermissionDenied})
		_, err := p.Partitions(ctxT(t), "u")
		if !errors.Is(err, ErrPermissionDenied) {
			t.Fatalf("err %v; want ErrPermissionDenied at once, not after UnknownTopicWait", err)
		}
		if n := fc.Fired(f); n != 1 {
			t.Errorf("metadata asked %d times; a refusal is not retried", n)
		}
	})
}

// TestPartitionRefusalWithOtherRecords: a partition refused while another
// returns records does not go unnoticed: the next Poll returns the
// refusal.
func TestPartitionRefusalWithOtherRecords(t *testing.T) {
	fc := newFake(t, 1, "t", 2)
	p := newProducer(t, fc, ManualPartitioning())
	if err := p.ProduceSync(ctxT(t), &Record{Topic: "t", Partition: 1, Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	fc.AddFault(&fakecluster.Fault{Method: "Fetch", Topic: "t", Partition: 0, Code: connect.CodePermissionDenied})
	c := newConsumer(t, fc)
	c.Assign(map[string]map[int32]Offset{"t": {0: AtOffset(0), 1: AtOffset(0)}})
	recs, err := c.Poll(ctxT(t))
	if err != nil || len(recs) != 1 || recs[0].Partition != 1 {
		t.Fatalf("first Poll: %d records, %v; want partition 1's record", len(recs), err)
	}
	if _, err := c.Poll(ctxT(t)); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("second Poll: %v; want partition 0's refusal", err)
	}
}

// refusingCoordinator refuses every heartbeat as a coordinator enforcing
// ACLs does for a principal without read on the group.
type refusingCoordinator struct {
	coordinatorv1connect.UnimplementedCoordinatorServiceHandler
}

const groupRefusal = "permission denied: User:alice may not read group g"

func (refusingCoordinator) ConsumerGroupHeartbeat(context.Context, *connect.Request[coordinatorv1.ConsumerGroupHeartbeatRequest]) (*connect.Response[coordinatorv1.ConsumerGroupHeartbeatResponse], error) {
	return nil, connect.NewError(connect.CodePermissionDenied, errors.New(groupRefusal))
}

// TestGroupConsumerRefused: a heartbeat the coordinator refuses makes Poll
// return the refusal at once, with the coordinator's line.
func TestGroupConsumerRefused(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(refusingCoordinator{}))
	fc.SetCoordinator(mux)
	gc, err := NewGroupConsumer(fc.GatewayURL(), "g", []string{"t"},
		GroupConsumerOptions(RetryBackoff(5*time.Millisecond), MaxRetryBackoff(20*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close(context.Background())
	_, err = gc.Poll(ctxT(t))
	var e *Error
	if !errors.Is(err, ErrPermissionDenied) || !errors.As(err, &e) || e.Message != groupRefusal {
		t.Fatalf("Poll: %v; want ErrPermissionDenied carrying %q", err, groupRefusal)
	}
}
