package serve

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

type testFlagConfig struct {
	NodeID  int
	DataDir string
	Wait    time.Duration
	Verbose bool
	DSN     string
	Token   string
}

func (c *testFlagConfig) register(f *Flags) {
	f.IntVar(&c.NodeID, "node-id", 7, "this node's id")
	f.StringVar(&c.DataDir, "data-dir", "./data", "where partition logs live")
	f.DurationVar(&c.Wait, "max-wait", 500*time.Millisecond, "longest fetch wait")
	f.BoolVar(&c.Verbose, "verbose", false, "say more")
	f.StringVar(&c.DSN, "offsets-dsn", "", "Postgres DSN for committed offsets")
	f.SecretVar(&c.Token, "auth", "", "shared cluster secret")
}

func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := kv[k]
		return v, ok
	}
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{
		"node-id":      "STRATA_NODE_ID",
		"listen":       "STRATA_LISTEN",
		"admin-listen": "STRATA_ADMIN_LISTEN",
		"s3.bucket":    "STRATA_S3_BUCKET",
	} {
		if got := EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFlagPrecedence(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantID  int
		wantDir string
		wantV   bool
	}{
		{name: "defaults", wantID: 7, wantDir: "./data"},
		{name: "env beats default", env: map[string]string{"STRATA_NODE_ID": "3", "STRATA_VERBOSE": "1"}, wantID: 3, wantDir: "./data", wantV: true},
		{name: "flag beats env", args: []string{"--node-id", "5"}, env: map[string]string{"STRATA_NODE_ID": "3"}, wantID: 5, wantDir: "./data"},
		{name: "flag equals form and single dash", args: []string{"-node-id=9", "--data-dir=/x"}, env: map[string]string{"STRATA_DATA_DIR": "/y"}, wantID: 9, wantDir: "/x"},
		{name: "empty env value is a value", env: map[string]string{"STRATA_DATA_DIR": ""}, wantID: 7, wantDir: ""},
		{name: "bool flag beats env", args: []string{"--verbose=false"}, env: map[string]string{"STRATA_VERBOSE": "true"}, wantID: 7, wantDir: "./data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c testFlagConfig
			f := NewFlags("strata-test")
			c.register(f)
			if err := f.Parse(tt.args, env(tt.env)); err != nil {
				t.Fatal(err)
			}
			if c.NodeID != tt.wantID || c.DataDir != tt.wantDir || c.Verbose != tt.wantV {
				t.Errorf("got node-id=%d data-dir=%q verbose=%v, want %d %q %v", c.NodeID, c.DataDir, c.Verbose, tt.wantID, tt.wantDir, tt.wantV)
			}
		})
	}
}

func TestFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--node-id", "x"}, want: `--node-id "x": invalid value: parse error`},
		{args: []string{"--bogus"}, want: `unknown flag --bogus (see --help)`},
		{args: []string{"--data-dir"}, want: `--data-dir: needs a value`},
		{args: []string{"extra"}, want: `unexpected argument "extra"`},
		{env: map[string]string{"STRATA_MAX_WAIT": "soon"}, want: `STRATA_MAX_WAIT="soon" (for --max-wait): invalid value: parse error`},
		{env: map[string]string{"STRATA_AUTH": "x", "STRATA_NODE_ID": "y"}, want: `STRATA_NODE_ID="y"`},
	}
	for _, tt := range tests {
		var c testFlagConfig
		f := NewFlags("strata-test")
		c.register(f)
		err := f.Parse(tt.args, env(tt.env))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q, %v) = %v, want error containing %q", tt.args, tt.env, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("error is more than one line: %q", err)
		}
	}
}

func TestHelp(t *testing.T) {
	var c testFlagConfig
	f := NewFlags("strata-test")
	c.register(f)
	for _, arg := range []string{"-h", "--help", "-help"} {
		if err := f.Parse([]string{arg}, nil); !errors.Is(err, ErrHelp) {
			t.Fatalf("Parse(%s) = %v, want ErrHelp", arg, err)
		}
	}
	var b bytes.Buffer
	f.PrintUsage(&b, "Test service.")
	out := b.String()
	for _, want := range []string{
		"Usage: strata-test [flags]",
		"Test service.",
		"--node-id int\n      this node's id\n      env STRATA_NODE_ID; default 7\n",
		"--data-dir string\n      where partition logs live\n      env STRATA_DATA_DIR; default \"./data\"\n",
		"--max-wait duration",
		"env STRATA_MAX_WAIT; default 500ms",
		"--offsets-dsn string\n      Postgres DSN for committed offsets\n      env STRATA_OFFSETS_DSN; default empty\n",
		"--auth string\n      shared cluster secret\n      env STRATA_AUTH\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	// Registration order, not alphabetical: the service's grouping reads better.
	if strings.Index(out, "--node-id") > strings.Index(out, "--data-dir") {
		t.Errorf("flags not in registration order:\n%s", out)
	}
}

func TestAttrsRedactSecrets(t *testing.T) {
	var c testFlagConfig
	f := NewFlags("strata-test")
	c.register(f)
	args := []string{"--offsets-dsn", "postgres://strata:hunter2@db:5432/offsets?sslmode=disable", "--auth", "s3cr3t"}
	if err := f.Parse(args, nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range f.Attrs() {
		got[a.Key] = a.Value.String()
	}
	if got["offsets-dsn"] != "postgres://strata:xxxxx@db:5432/offsets?sslmode=disable" {
		t.Errorf("offsets-dsn logged as %q", got["offsets-dsn"])
	}
	if got["auth"] != "[redacted]" {
		t.Errorf("auth logged as %q", got["auth"])
	}
	if got["node-id"] != "7" || got["max-wait"] != "500ms" {
		t.Errorf("values: %v", got)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@h/db":                   "postgres://u:xxxxx@h/db",
		"postgres://u@h/db":                      "postgres://u@h/db",
		"host=db user=u password=pw dbname=x":    "host=db user=u password=xxxxx dbname=x",
		"host=db password='p w' dbname=x":        "host=db password=xxxxx dbname=x",
		"https://s3.local/b?X-Amz-Token=abc&x=1": "https://s3.local/b?X-Amz-Token=xxxxx&x=1",
		"127.0.0.1:9092":                         "127.0.0.1:9092",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
