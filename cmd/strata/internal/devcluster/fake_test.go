package devcluster

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The real-process tests run this test binary itself as every service:
// symlinks named strata-controller, strata-storage and strata-gateway point
// at it, and with fakeEnv set TestMain runs fakeService instead of the
// tests. That needs no toolchain at test time and no binaries of the real
// services.
const (
	fakeEnv         = "DEVCLUSTER_FAKE_SERVICE"   // "1": run as a fake service
	fakeArgvDirEnv  = "DEVCLUSTER_FAKE_ARGV_DIR"  // the fake writes <pid>.json with its argv here, and <pid>.dsn with its STRATA_DSN
	fakeFailEnv     = "DEVCLUSTER_FAKE_FAIL"      // process name ("controller-1") that exits 2 at start
	fakeNotReadyEnv = "DEVCLUSTER_FAKE_NOT_READY" // process name whose /readyz stays 503
)

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) == "1" {
		os.Exit(fakeService(os.Args))
	}
	os.Exit(m.Run())
}

// fakeService stands in for a Strata service: it serves anything on
// --listen, /healthz and /readyz on --admin-listen, records its argv and
// exits 0 on SIGTERM, like lib/serve does.
func fakeService(argv []string) int {
	flags := map[string]string{}
	for i := 1; i < len(argv); i++ {
		name := strings.TrimPrefix(argv[i], "--")
		if i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "--") {
			flags[name] = argv[i+1]
			i++
		} else {
			flags[name] = "true" // a boolean flag: --require-auth
		}
	}
	service := strings.TrimPrefix(filepath.Base(argv[0]), "strata-")
	id := flags["id"] + flags["node-id"]
	if id == "" {
		id = "1"
	}
	name := service + "-" + id
	fmt.Fprintf(os.Stderr, "fake %s starting, pid %d\n", name, os.Getpid())
	// Catch SIGTERM before /readyz can answer, as lib/serve does: a test
	// that signals the fake as soon as it is ready must see a graceful exit,
	// not the default disposition's "signal: terminated".
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	if os.Getenv(fakeFailEnv) == name {
		fmt.Fprintf(os.Stderr, "%s: bad config: --fake \"x\": made to fail\n", argv[0])
		return 2
	}
	if dir := os.Getenv(fakeArgvDirEnv); dir != "" {
		b, _ := json.Marshal(argv)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.json", os.Getpid())), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.dsn", os.Getpid())), []byte(os.Getenv("STRATA_DSN")), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	api, err := net.Listen("tcp", flags["listen"])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	adm, err := net.Listen("tcp", flags["admin-listen"])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if flags["tls-cert"] != "" {
		// A secure cluster's process: both listeners speak TLS with the
		// certificate strata dev issued it, as lib/serve's do.
		pair, err := tls.LoadX509KeyPair(flags["tls-cert"], flags["tls-key"])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}
		api, adm = tls.NewListener(api, cfg), tls.NewListener(adm, cfg)
	}
	go http.Serve(api, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, name) }))
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if os.Getenv(fakeNotReadyEnv) == name {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready\nfake: never")
			return
		}
		fmt.Fprintln(w, "ok")
	})
	go http.Serve(adm, mux)
	<-sig
	fmt.Fprintf(os.Stderr, "fake %s stopped\n", name)
	return 0
}

// fakeBinDir makes a directory holding a strata-<service> symlink to this
// test binary for every service strata dev starts, and sets the
// environment so that the children run as fakes.
func fakeBinDir(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, s := range services {
		if err := os.Symlink(exe, filepath.Join(dir, binaryName(s))); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(fakeEnv, "1")
	t.Setenv("PATH", dir)
	return dir
}
