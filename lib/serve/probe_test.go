package serve

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRunProbe checks --probe, the health check of shell-less images: it
// answers with the exit code of one GET, without validating the rest of
// the config and without calling Setup.
func TestRunProbe(t *testing.T) {
	ready := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if ready {
			w.Write([]byte("ok\n"))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("not ready\nprocess: starting\n"))
	}))
	defer srv.Close()
	run := func(url string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Command{
			Name: "strata-test", Config: &testConfig{},
			Setup: func(context.Context, *Process) (http.Handler, error) { t.Error("Setup called"); return nil, nil },
			// --node-id 0 fails validation: a probe must not care.
			Args:   []string{"--node-id", "0", "--probe", url},
			Stdout: &stdout, Stderr: &stderr, LookupEnv: env(nil),
		}.Run(context.Background())
		return code, stdout.String(), stderr.String()
	}
	if code, out, errs := run(srv.URL + "/readyz"); code != ExitOK || out != "ok\n" || errs != "" {
		t.Errorf("ready: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	ready = false
	if code, _, errs := run(srv.URL + "/readyz"); code != ExitFailed || !strings.Contains(errs, "503") || strings.Count(errs, "\n") != 1 {
		t.Errorf("not ready: exit %d, stderr %q; want 1 and one line naming 503", code, errs)
	}
	srv.Close()
	if code, _, errs := run(srv.URL + "/readyz"); code != ExitFailed || strings.Count(errs, "\n") != 1 {
		t.Errorf("unreachable: exit %d, stderr %q; want 1 and one line", code, errs)
	}
}
