package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// TestSecurityDevSecure walks `strata dev --secure` as a user would, with
// the real binaries: DIR/admin.env is private (mode 0600) and names the
// https gateway, the dev CA and the admin's certificate; with its
// variables the CLI is User:admin, creates a topic and a user; the user's
// token authenticates, and without an ACL the user's produce is refused
// with one line until the admin grants write, after which it succeeds;
// without credentials the CLI is refused with one line.
func TestSecurityDevSecure(t *testing.T) {
	t.Parallel()
	d := harness.StartDev(t, "--secure", "--storage-nodes", "1")
	ctx := harness.Deadline(t, 3*time.Minute)

	envFile := filepath.Join(d.Dir, "admin.env")
	st, err := os.Stat(envFile)
	if err != nil {
		t.Fatal(err)
	}
	if mode := st.Mode().Perm(); mode != 0o600 {
		t.Errorf("admin.env has mode %v, want 0600", mode)
	}
	admin := readAdminEnv(t, envFile)
	tlsDir := filepath.Join(d.Dir, "tls")
	want := map[string]string{
		"STRATA_GATEWAY":  fmt.Sprintf("https://127.0.0.1:%d", d.BasePort),
		"STRATA_TLS_CA":   filepath.Join(tlsDir, "ca.pem"),
		"STRATA_TLS_CERT": filepath.Join(tlsDir, "admin.pem"),
		"STRATA_TLS_KEY":  filepath.Join(tlsDir, "admin-key.pem"),
	}
	for k, v := range want {
		if admin[k] != v {
			t.Errorf("admin.env: %s=%q, want %q", k, admin[k], v)
		}
	}
	if len(admin) != len(want) {
		t.Errorf("admin.env exports %v, want exactly %v", admin, want)
	}
	if d.Gateways[0] != want["STRATA_GATEWAY"] {
		t.Errorf("cluster.json's gateway is %s, want %s", d.Gateways[0], want["STRATA_GATEWAY"])
	}

	var adminEnv []string
	for k, v := range admin {
		adminEnv = append(adminEnv, k+"="+v)
	}
	cli := func(env []string, stdin string, args ...string) cliResult {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		return runCLIEnv(cctx, t, d.Strata, env, stdin, args...)
	}
	must := func(r cliResult, what string) string {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("%s: exit %d, stderr %q", what, r.code, r.stderr)
		}
		return r.stdout
	}

	if out := must(cli(adminEnv, "", "whoami"), "whoami as the admin"); out != "User:admin\n" {
		t.Errorf("whoami with admin.env: %q, want User:admin", out)
	}
	must(cli(adminEnv, "", "topic", "create", "orders", "-p", "1", "-r", "1"), "topic create")
	out := must(cli(adminEnv, "", "user", "create", "bob"), "user create bob")
	if !regexp.MustCompile(`^STRATA_TOKEN=strata_[A-Za-z0-9_-]{43}\n$`).MatchString(out) {
		t.Fatalf("user create bob printed %d bytes, not the one line STRATA_TOKEN=strata_<43 characters>", len(out))
	}
	// bob: the gateway, the CA and his token; no certificate.
	bob := []string{"STRATA_GATEWAY=" + admin["STRATA_GATEWAY"], "STRATA_TLS_CA=" + admin["STRATA_TLS_CA"], strings.TrimSpace(out)}

	// bob's token reaches the gateway within a second (the metadata stream).
	testwait.Until(t, 30*time.Second, "the gateway to authenticate bob's token", func() error {
		r := cli(bob, "", "whoami")
		if r.code != 0 || r.stdout != "User:bob\n" {
			return fmt.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		return nil
	})
	wantCLIRefused(t, "bob producing without an ACL", cli(bob, "hello\n", "produce", "orders"),
		"permission denied", "User:bob", "topic orders")
	wantCLIRefused(t, "topic list without credentials",
		cli([]string{"STRATA_GATEWAY=" + admin["STRATA_GATEWAY"], "STRATA_TLS_CA=" + admin["STRATA_TLS_CA"]}, "", "topic", "list"),
		"unauthenticated")

	must(cli(adminEnv, "", "acl", "create", "--principal", "User:bob", "--allow", "write", "--topic", "orders"), "acl create")
	// Each of those wrote its line to the audit log of the process that
	// decided it, in DIR/logs (the ready block names them).
	wantDevAudit(t, d.Dir, "gateway-1", map[string]string{"event": "denied", "principal": "User:bob", "resource": "topic orders"})
	wantDevAudit(t, d.Dir, "gateway-1", map[string]string{"event": "authentication_failure", "outcome": "failure"})
	wantDevAudit(t, d.Dir, "controller-1", map[string]string{"event": "user_change", "principal": "User:admin", "resource": "user bob"})
	wantDevAudit(t, d.Dir, "controller-1", map[string]string{"event": "acl_change", "principal": "User:admin", "resource": "acl User:bob allow write topic orders"})
	// The grant reaches the gateway and the storage node within a second;
	// until it does, each try is refused whole (nothing written).
	testwait.Until(t, 30*time.Second, "bob's produce to succeed after the grant", func() error {
		r := cli(bob, "hello\n", "produce", "orders")
		switch {
		case r.code == 0:
			return nil
		case strings.Contains(r.stderr, "permission denied"):
			return fmt.Errorf("still refused: %s", strings.TrimSpace(r.stderr))
		}
		t.Fatalf("bob's produce after the grant: exit %d, stderr %q", r.code, r.stderr)
		return nil
	})
	if out := must(cli(adminEnv, "", "consume", "orders", "-e"), "consume as the admin"); out != "hello\n" {
		t.Errorf("orders holds %q, want bob's one record hello", out)
	}
}

// readAdminEnv reads the export lines of an admin.env: `export K=V`, V
// bare or in single quotes (strata dev quotes values that need it).
func readAdminEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for line := range strings.Lines(string(raw)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kv, ok := strings.CutPrefix(line, "export ")
		k, v, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 {
			t.Fatalf("admin.env: line %q is not export K=V", line)
		}
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = strings.ReplaceAll(v[1:len(v)-1], `'\''`, `'`)
		}
		out[k] = v
	}
	return out
}

// wantDevAudit checks that process's audit log in a `strata dev --secure`
// cluster in dir has a line with the fields of want.
func wantDevAudit(t *testing.T, dir, process string, want map[string]string) {
	t.Helper()
	path := filepath.Join(dir, "logs", process+".audit.log")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("audit log: %v", err)
		return
	}
	for _, raw := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var l auditLine
		if json.Unmarshal([]byte(raw), &l) != nil {
			t.Errorf("%s: line %q is not JSON", path, raw)
			continue
		}
		match := l.str("logger") == "audit"
		for k, v := range want {
			match = match && l.str(k) == v
		}
		if match {
			return
		}
	}
	t.Errorf("%s has no line with %v:\n%s", path, want, b)
}
