package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/serve"
)

// TestReadinessFlipsAfterFirstSnapshot runs the whole binary's setup under
// serve.Command.Run, as main does, and watches /readyz on the admin port.
func TestReadinessFlipsAfterFirstSnapshot(t *testing.T) {
	cl := newFakeCluster(t, 1)
	cl.setLeader(tp{"t", 0}, 1, 1)
	fc := newFakeController()
	ctrl := fc.start(t)

	cfg := &Config{}
	admin := make(chan net.Addr, 1)
	setup := Setup(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- serve.Command{
			Name:   "strata-gateway",
			Config: cfg,
			Setup: func(ctx context.Context, p *serve.Process) (http.Handler, error) {
				admin <- p.AdminAddr()
				return setup(ctx, p)
			},
			Args: []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--controller", ctrl},
		}.Run(ctx)
	}()
	defer func() {
		cancel()
		if code := <-done; code != serve.ExitOK {
			t.Errorf("exit code %d; want 0", code)
		}
	}()
	readyz := "http://" + (<-admin).String() + "/readyz"
	get := func() (int, string) {
		resp, err := http.Get(readyz)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, "the watch", func() bool { return fc.watchCount() > 0 })
	waitFor(t, "serving", func() bool { _, body := get(); return !strings.Contains(body, "process: starting") })
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "metadata: waiting for the first metadata snapshot") {
		t.Fatalf("/readyz before the snapshot: %d %q; want 503 naming the metadata check", code, body)
	}
	fc.scripts <- sendThenHold(make(chan struct{}), cl.snapshot(1, map[string]int32{"t": 1}))
	waitFor(t, "ready", func() bool { code, _ := get(); return code == http.StatusOK })
}
