package devcluster

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func netListen(port int) (net.Listener, error) { return net.Listen("tcp", hostPort(port)) }

func TestBadFlagsOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--storage-nodes", "0"}, "strata dev: bad flags: --storage-nodes 0: must be 1..9\n"},
		{[]string{"--storage-nodes", "10"}, "strata dev: bad flags: --storage-nodes 10: must be 1..9\n"},
		{[]string{"--controllers", "2"}, "strata dev: bad flags: --controllers 2: must be 1, 3 or 5\n"},
		{[]string{"--base-port", "80"}, "strata dev: bad flags: --base-port 80: must be 1024..65320 (the cluster uses ports up to base-port+215)\n"},
		{[]string{"--base-port", "65321"}, "strata dev: bad flags: --base-port 65321: must be 1024..65320 (the cluster uses ports up to base-port+215)\n"},
		{[]string{"--controllers", "4", "--storage-nodes", "12"}, "strata dev: bad flags: --storage-nodes 12: must be 1..9; --controllers 4: must be 1, 3 or 5\n"},
		{[]string{"--gateways", "0"}, "strata dev: bad flags: --gateways 0: must be 1..9\n"},
		{[]string{"--gateways", "10"}, "strata dev: bad flags: --gateways 10: must be 1..9\n"},
		{[]string{"--dir", ""}, "strata dev: bad flags: --dir \"\": must not be empty\n"},
		{[]string{"--ready-timeout", "0s"}, "strata dev: bad flags: --ready-timeout 0s: must be positive\n"},
		{[]string{"--otlp", "127.0.0.1:4318"}, "strata dev: bad flags: --otlp 127.0.0.1:4318: must be an http:// or https:// URL of an OTLP receiver, such as http://127.0.0.1:4318\n"},
		{[]string{"--postgres", "strata_demo"}, "strata dev: bad flags: --postgres strata_demo: must be a postgres:// URL or libpq key=value pairs (host=127.0.0.1 dbname=strata_demo)\n"},
		{[]string{"--postgres", "postgres://u:secret@/db"}, "strata dev: bad flags: --postgres postgres://u:xxxxx@/db: must be a postgres:// URL with a host, such as postgres://postgres@127.0.0.1:5432/strata_demo?sslmode=disable\n"},
		{[]string{"--storage-nodes", "three"}, "strata dev: invalid value \"three\" for flag -storage-nodes: parse error\n"},
		{[]string{"--nodes", "3"}, "strata dev: flag provided but not defined: -nodes\n"},
		{[]string{"extra"}, "strata dev: unexpected argument \"extra\" (strata dev takes flags only; see --help)\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), tc.args, &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("exit code %d, want %d", code, exitUsage)
			}
			if stderr.String() != tc.want {
				t.Errorf("stderr = %q, want %q", stderr.String(), tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, &stdout, &stderr); code != 0 {
		t.Errorf("exit code %d", code)
	}
	for _, want := range []string{"Usage: strata dev", "--dir string", "--storage-nodes int", "--controllers int", "--base-port int", "--clean", "(default 9092)", "--secure", "admin.env", "--postgres string", "STRATA_DSN"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, stdout.String())
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr = %q", stderr.String())
	}
}

func TestMissingBinaryOneLine(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"--dir", t.TempDir()}, &stdout, &stderr)
	want := "strata dev: strata-controller, strata-storage, strata-gateway, strata-coordinator, strata-tiering not found next to strata or on PATH; run 'make build'\n"
	if code != exitError || stderr.String() != want {
		t.Errorf("exit %d, stderr %q; want exit 1, %q", code, stderr.String(), want)
	}
}

func TestPrepareDir(t *testing.T) {
	t.Run("created and reused", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "b")
		if err := prepareDir(dir, false); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "storage-1", "keep"), "data")
		writeFile(t, filepath.Join(dir, clusterFileName), "{}")
		if err := prepareDir(dir, false); err != nil {
			t.Fatal(err)
		}
		if !exists(filepath.Join(dir, "storage-1", "keep")) {
			t.Error("data of the earlier run deleted without --clean")
		}
		if exists(filepath.Join(dir, clusterFileName)) {
			t.Error("stale cluster.json kept")
		}
	})
	t.Run("clean", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "storage-1", "keep"), "data")
		writeFile(t, filepath.Join(dir, clusterFileName), "{}")
		if err := prepareDir(dir, true); err != nil {
			t.Fatal(err)
		}
		if exists(filepath.Join(dir, "storage-1")) || !exists(filepath.Join(dir, "logs")) {
			t.Error("--clean kept the data or did not recreate the directory")
		}
	})
	t.Run("clean refuses a foreign directory", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "thesis.tex"), "precious")
		err := prepareDir(dir, true)
		if err == nil || !strings.Contains(err.Error(), "not a dev cluster's directory") {
			t.Errorf("err = %v", err)
		}
		if !exists(filepath.Join(dir, "thesis.tex")) {
			t.Error("deleted a foreign directory")
		}
	})
}

// A --dir so long that a controller's etcd socket under it would not fit a
// Unix socket path is refused up front, in one line, rather than as a
// controller failing to start.
func TestDirTooLongForEtcdSocket(t *testing.T) {
	var stdout, stderr bytes.Buffer
	dir := "/tmp/" + strings.Repeat("d", 90)
	code := Main(context.Background(), []string{"--dir", dir}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "too long") || strings.Count(stderr.String(), "\n") != 1 {
		t.Fatalf("exit %d, stderr %q; want one line saying --dir is too long", code, stderr.String())
	}
}
