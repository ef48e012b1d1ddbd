package serve

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCheckListenAddr(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9092": "",
		":9092":          "",
		"[::1]:0":        "",
		"localhost:80":   "",
		"x":              "missing port",
		"":               "empty; want host:port",
		"h:port":         `bad port "port"`,
		"h:70000":        `bad port "70000"`,
		"::1:80":         "too many colons",
	} {
		err := CheckListenAddr(addr)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("CheckListenAddr(%q) = %q, want %q", addr, got, want)
		}
	}
}

func TestProblems(t *testing.T) {
	var p Problems
	if p.Err() != nil {
		t.Fatal("empty Problems is an error")
	}
	p.Flag("listen", "x", "missing port")
	p.Flag("node-id", 0, "must be positive")
	var inner Problems
	inner.Addf("--a and --b contradict")
	p.Add(inner.Err())
	p.Add(errors.New("two\nlines"))
	p.Add(nil)
	err := p.Err()
	want := `bad config: --listen "x": missing port; --node-id 0: must be positive; --a and --b contradict; two lines`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 4 {
		t.Errorf("ConfigError problems: %#v", ce)
	}
}

func TestBaseValidate(t *testing.T) {
	b := Base{Listen: "x", AdminListen: "y:1", LogFormat: "xml", DrainTimeout: -1}
	var p Problems
	b.validate(&p)
	got := p.Err().Error()
	for _, want := range []string{`--listen "x": missing port`, `--log-format "xml": must be json or text`, `--drain-timeout -1ns: must be positive`} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	for _, disabled := range []string{"", "0"} {
		b := Base{Listen: ":1", AdminListen: disabled, LogFormat: "json", DrainTimeout: 1}
		var p Problems
		b.validate(&p)
		if err := p.Err(); err != nil || b.AdminEnabled() {
			t.Errorf("admin %q: %v, enabled=%v", disabled, err, b.AdminEnabled())
		}
	}
	same := Base{Listen: ":1", AdminListen: ":1", LogFormat: "json", DrainTimeout: 1}
	p = Problems{}
	same.validate(&p)
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "same address as --listen") {
		t.Errorf("same ports: %v", err)
	}
}

func TestShutdownTimeout(t *testing.T) {
	if got := (&Base{}).ShutdownTimeout(); got != DefaultDrainTimeout {
		t.Errorf("unset: %v, want %v", got, DefaultDrainTimeout)
	}
	if got := (&Base{DrainTimeout: 2 * time.Second}).ShutdownTimeout(); got != 2*time.Second {
		t.Errorf("--drain-timeout 2s: %v", got)
	}
}
