package history

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	lineInvoke = `{"index":1,"time":"2026-12-01T10:00:00Z","process":"p","type":"invoke","f":"send","send":{"topic":"t","key":"k","value":"v","partition":-1,"offset":-1}}`
	lineOk     = `{"index":2,"time":"2026-12-01T10:00:01Z","process":"p","type":"ok","invoke":1,"f":"send","send":{"topic":"t","key":"k","value":"v","partition":0,"offset":5}}`
	lineStart  = `{"index":3,"time":"2026-12-01T10:00:02Z","process":"nemesis","type":"ok","f":"fault","fault":{"kind":"kill","phase":"start"}}`
)

func TestReadRejects(t *testing.T) {
	cases := []struct {
		name  string
		lines []string
		want  string // in the error
		good  int    // events returned before the error
	}{
		{"garbage", []string{lineInvoke, "{not json", lineOk}, "line 2", 1},
		{"index not increasing", []string{lineInvoke, strings.Replace(lineOk, `"index":2`, `"index":1`, 1)}, "index 1 after 1", 1},
		{"no time", []string{strings.Replace(lineInvoke, `"time":"2026-12-01T10:00:00Z",`, "", 1)}, "no time", 0},
		{"unknown type", []string{strings.Replace(lineInvoke, `"invoke"`, `"maybe"`, 1)}, "unknown type", 0},
		{"unknown f", []string{strings.Replace(lineInvoke, `"f":"send"`, `"f":"delete"`, 1)}, "exactly its own payload", 0},
		{"payload of another f", []string{strings.Replace(lineInvoke, `"f":"send"`, `"f":"poll"`, 1)}, "exactly its own payload", 0},
		{"completion of nothing", []string{lineOk}, "no open invoke", 0},
		{"completed twice", []string{lineInvoke, lineOk, strings.Replace(lineOk, `"index":2`, `"index":3`, 1)}, "no open invoke", 2},
		{"completion by another process", []string{lineInvoke, strings.Replace(lineOk, `"process":"p"`, `"process":"q"`, 1)}, "completes", 1},
		{"fail without invoke", []string{`{"index":1,"time":"2026-12-01T10:00:00Z","process":"p","type":"fail","f":"send","send":{}}`}, "completes no invoke", 0},
		{"fault invoked", []string{strings.Replace(lineStart, `"type":"ok"`, `"type":"invoke"`, 1)}, "note", 0},
		{"unknown phase", []string{strings.Replace(lineStart, `"start"}`, `"maybe"}`, 1)}, "phase", 0},
		{"stop of nothing", []string{`{"index":4,"time":"2026-12-01T10:00:03Z","process":"nemesis","type":"ok","f":"fault","fault":{"kind":"kill","phase":"stop","start":3}}`}, "no \"kill\" fault", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := Read(strings.NewReader(strings.Join(tc.lines, "\n") + "\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if errors.Is(err, ErrTruncated) {
				t.Fatalf("a whole bad line reported as a torn tail: %v", err)
			}
			if len(evs) != tc.good {
				t.Fatalf("%d events returned, want %d", len(evs), tc.good)
			}
		})
	}
}

func TestReadTornTail(t *testing.T) {
	in := lineInvoke + "\n" + lineOk + "\n" + lineStart[:40]
	evs, err := Read(strings.NewReader(in))
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("err = %v, want ErrTruncated", err)
	}
	if len(evs) != 2 || evs[1].Send.Offset != 5 {
		t.Fatalf("events before the torn line: %+v", evs)
	}
}

func TestReadLenient(t *testing.T) {
	// A last line without its newline that parses is whole; blank lines
	// and fields a later writer adds are skipped.
	in := "\n" + strings.Replace(lineInvoke, `"type"`, `"future_field":[1,2],"type"`, 1) + "\n\n" + lineOk
	evs, err := Read(strings.NewReader(in))
	if err != nil || len(evs) != 2 {
		t.Fatalf("Read = %d events, %v", len(evs), err)
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(path, []byte(lineInvoke+"\n"+lineOk+"\n"+lineStart+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	evs, err := ReadFile(path)
	if err != nil || len(evs) != 3 || evs[2].Fault.Kind != FaultKill {
		t.Fatalf("ReadFile = %+v, %v", evs, err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.HasPrefix(err.Error(), "history: ") {
		t.Fatalf("missing file: %v", err)
	}
}

// FuzzRead feeds Read garbage: it must return an error or events, never
// panic, and whatever it accepts must be well formed.
func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	everyKind(NewRecorder(&buf, WithClock(stepClock())))
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:buf.Len()/2])
	f.Add([]byte(lineInvoke + "\n" + lineOk + "\n"))
	f.Add([]byte(lineStart))
	f.Add([]byte("\x00\xff{}\n[]\nnull\n"))
	f.Add([]byte(`{"index":1,"time":"2026-12-01T10:00:00Z","type":"ok","f":"poll","poll":{"records":[{"offset":"x"}]}}`))
	f.Add([]byte(`{"index":-5,"time":"0000-01-01T00:00:00Z","type":"ok","invoke":-1,"f":"fault","fault":{"phase":"stop","start":-1}}`))
	f.Add([]byte(strings.Repeat("{", 10000)))
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, _ := Read(bytes.NewReader(data))
		for i, ev := range evs {
			if ev.Index <= 0 || (i > 0 && ev.Index <= evs[i-1].Index) || !ev.Op.payloadOK() {
				t.Fatalf("accepted a malformed event: %+v", ev)
			}
		}
	})
}
