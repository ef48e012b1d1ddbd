package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/audit"
)

// The audit lines go to --audit-log, created 0600, with the service's
// name and logger=audit, and not to the process log; without the flag
// they go to the process log. The shutdown hook writes the pending
// summary of a flood.
func TestAuditLog(t *testing.T) {
	for _, toFile := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "audit.log")
		var args []string
		if toFile {
			args = []string{"--audit-log", path}
		}
		quietOTel(t)
		ctx, cancel := context.WithCancel(context.Background())
		var stderr syncBuffer
		code := Command{
			Name: "strata-test", Config: &testConfig{},
			Args: append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "0"}, args...),
			Setup: func(ctx context.Context, p *Process) (http.Handler, error) {
				// Over the burst, so the hook has a summary to write.
				for range 25 {
					p.Guard().Audit().Record(ctx, audit.Event{Kind: audit.Denied, Principal: "User:bob", Outcome: audit.OutcomeDenied})
				}
				cancel()
				return nil, nil
			},
			Stderr: &stderr,
		}.Run(ctx)
		if code != ExitOK {
			t.Fatalf("toFile=%v: exit %d:\n%s", toFile, code, stderr.String())
		}
		out := stderr.String()
		if toFile {
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("audit log mode %v, want 0600", st.Mode().Perm())
			}
			if strings.Contains(out, `"logger":"audit"`) {
				t.Errorf("audit lines in the process log with --audit-log:\n%s", out)
			}
			b, _ := os.ReadFile(path)
			out = string(b)
		}
		var denied, suppressed int
		for _, l := range strings.Split(out, "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) != nil || m["logger"] != "audit" {
				continue
			}
			if m["service"] != "strata-test" {
				t.Errorf("toFile=%v: line %v lacks service=strata-test", toFile, m)
			}
			switch m["event"] {
			case "denied":
				denied++
			case "suppressed":
				suppressed += int(m["suppressed"].(float64))
			}
		}
		if denied != 20 || suppressed != 5 {
			t.Errorf("toFile=%v: %d denied lines and %d suppressed, want the burst of 20 and 5 summarized at shutdown:\n%s", toFile, denied, suppressed, out)
		}
	}
}
