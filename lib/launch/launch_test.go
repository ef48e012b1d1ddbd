package launch

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestArgv(t *testing.T) {
	common := Process{Bin: "/bin/x", Listen: "127.0.0.1:1", AdminListen: "127.0.0.1:2", LogFormat: "text", DrainTimeout: 2 * time.Second}
	for _, tc := range []struct {
		name string
		got  []string
		want string
	}{
		{"controller", Controller{Process: common, ID: 2, DataDir: "/d/c2",
			Peers:      []string{"http://127.0.0.1:10", "http://127.0.0.1:11"},
			EtcdClient: "unix:///d/c2/etcd.sock", EtcdClientPort: 12, NodeSessionTimeout: 3 * time.Second, SessionTimeout: 2 * time.Second}.Argv(),
			"/bin/x --listen 127.0.0.1:1 --admin-listen 127.0.0.1:2 --log-format text --drain-timeout 2s --id 2 --data-dir /d/c2 " +
				"--peers 1=http://127.0.0.1:10,2=http://127.0.0.1:11 --etcd-client unix:///d/c2/etcd.sock --etcd-client-port 12 --node-session-timeout 3s --controller-session-timeout 2s"},
		{"storage", Storage{Process: Process{Bin: "/bin/s", CORSAllowedOrigins: "http://localhost:*", Extra: []string{"--rack", "a"}},
			NodeID: 0, Advertise: "http://p:1", DataDir: "/d/s0", Controllers: []string{"http://c1", "http://c2"},
			Tiering: "http://t", TierInterval: 500 * time.Millisecond, ReplicaLagTime: 2 * time.Second}.Argv(),
			"/bin/s --node-id 0 --advertise http://p:1 --data-dir /d/s0 --controller http://c1,http://c2 --tiering http://t " +
				"--tier-interval 500ms --replica-lag-time 2s --cors-allowed-origins http://localhost:* --rack a"},
		{"storage with fault injection", Storage{Process: Process{Bin: "/bin/s", AdminListen: "127.0.0.1:2"}, NodeID: 3,
			FaultInjection: true}.Argv(),
			"/bin/s --admin-listen 127.0.0.1:2 --node-id 3 --fault-injection"},
		{"gateway", Gateway{Process: Process{Bin: "/bin/g"}, Controllers: []string{"http://c"}}.Argv(),
			"/bin/g --controller http://c"},
		{"gateway for another network", Gateway{Process: Process{Bin: "/bin/g"}, Controllers: []string{"http://c"},
			Coordinators: []string{"http://co1", "http://co2"}, ClientListener: "external"}.Argv(),
			"/bin/g --controller http://c --coordinator http://co1,http://co2 --client-listener external"},
		{"coordinator", Coordinator{Process: Process{Bin: "/bin/co"}, InstanceID: "co-1", AdvertiseURL: "http://co", DataDir: "/d/co",
			Gateway: "http://g", SessionTimeout: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
			OwnershipLease: 2 * time.Second, LagInterval: time.Second}.Argv(),
			"/bin/co --instance-id co-1 --advertise-url http://co --data-dir /d/co --gateway http://g --session-timeout 3s " +
				"--heartbeat-interval 200ms --ownership-lease 2s --lag-interval 1s"},
		{"coordinator with controllers", Coordinator{Process: Process{Bin: "/bin/co"}, Gateway: "https://g",
			Controllers: []string{"https://c1", "https://c2"}}.Argv(),
			"/bin/co --gateway https://g --controller https://c1,https://c2"},
		{"tiering", Tiering{Process: Process{Bin: "/bin/t"}, EmbeddedS3Listen: "127.0.0.1:4", EmbeddedS3Dir: "/d/s3",
			SpoolDir: "/d/spool", Controllers: []string{"http://c"}}.Argv(),
			"/bin/t --embedded-s3-listen 127.0.0.1:4 --embedded-s3-dir /d/s3 --spool-dir /d/spool --controller http://c"},
	} {
		if got := strings.Join(tc.got, " "); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// TestArgvLeavesZeroFieldsOut: an unset field is no flag at all, so the
// binary's default applies (an empty "--data-dir" would override it).
func TestArgvLeavesZeroFieldsOut(t *testing.T) {
	got := Coordinator{Process: Process{Bin: "/bin/co"}}.Argv()
	if !slices.Equal(got, []string{"/bin/co"}) {
		t.Errorf("argv %q, want only the binary", got)
	}
	// Extra is not aliased: appending to one argv does not change another.
	p := Process{Bin: "/bin/g", Extra: make([]string, 1, 4)}
	a, b := Gateway{Process: p}.Argv(), Gateway{Process: p}.Argv()
	a[0] = "changed"
	if b[0] != "/bin/g" {
		t.Errorf("two argvs share storage: %q", b)
	}
}

func TestReady(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if !ready.Load() {
			http.Error(w, "etcd:  no leader\n\nmetadata: ok", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	ctx := context.Background()

	if ok, answer := Ready(ctx, srv.Client(), srv.URL); ok || answer != "503 etcd: no leader / metadata: ok" {
		t.Errorf("not ready: got %v %q", ok, answer)
	}
	ready.Store(true)
	if ok, answer := Ready(ctx, srv.Client(), srv.URL+"/"); !ok || answer != "200" {
		t.Errorf("ready: got %v %q", ok, answer)
	}

	// A port nothing listens on: take one and close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	if ok, answer := Ready(ctx, srv.Client(), closed); ok || answer != "connection refused" {
		t.Errorf("closed port: got %v %q", ok, answer)
	}
}

func TestWaitReady(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := WaitReady(ctx, srv.Client(), srv.URL, nil); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("asked %d times, want 3 (ready on the third)", n)
	}
}

func TestWaitReadyEndsWhenTheProcessIsGone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "starting", http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	exited := errors.New("exited with status 2")
	var asked atomic.Int32
	gone := func() error {
		if asked.Add(1) > 2 {
			return exited
		}
		return nil
	}
	err := WaitReady(context.Background(), srv.Client(), srv.URL, gone)
	var nr *NotReadyError
	if !errors.As(err, &nr) || !errors.Is(err, exited) {
		t.Fatalf("err %v, want a NotReadyError wrapping %v", err, exited)
	}
	if nr.Last != "503 starting" || nr.URL != srv.URL+"/readyz" {
		t.Errorf("NotReadyError %+v", nr)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = WaitReady(ctx, srv.Client(), srv.URL, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("canceled ctx: err %v", err)
	}
}

// TestArgvSecurity: the security flags come after the common ones, and
// only those set.
func TestArgvSecurity(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []string
		want string
	}{
		{"secure storage", Storage{Process: Process{Bin: "/bin/s", Listen: "127.0.0.1:1", Security: Security{
			TLSCert: "/d/tls/storage-2.pem", TLSKey: "/d/tls/storage-2-key.pem", TLSClientCA: "/d/tls/ca.pem",
			RequireAuth: true, SuperUsers: []string{"User:admin", "User:ops"}}}, NodeID: 2}.Argv(),
			"/bin/s --listen 127.0.0.1:1 --tls-cert /d/tls/storage-2.pem --tls-key /d/tls/storage-2-key.pem " +
				"--tls-client-ca /d/tls/ca.pem --require-auth --super-users User:admin,User:ops --node-id 2"},
		{"tls without authentication", Gateway{Process: Process{Bin: "/bin/g", Security: Security{
			TLSCert: "/c.pem", TLSKey: "/k.pem"}}}.Argv(),
			"/bin/g --tls-cert /c.pem --tls-key /k.pem"},
	} {
		if got := strings.Join(tc.got, " "); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
