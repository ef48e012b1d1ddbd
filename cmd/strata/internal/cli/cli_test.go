package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/client"
	"github.com/strata-mq/strata/lib/fakecluster"
)

type result struct {
	code           int
	stdout, stderr string
}

// run runs the CLI against a gateway with the given stdin.
func run(t *testing.T, gateway, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	env := func(k string) string {
		if k == "STRATA_GATEWAY" {
			return gateway
		}
		return ""
	}
	code := Main(ctx, args, strings.NewReader(stdin), &out, &errb, env)
	return result{code, out.String(), errb.String()}
}

func fake(t *testing.T) *fakecluster.Cluster {
	fc := fakecluster.New(3)
	t.Cleanup(fc.Close)
	return fc
}

// wantOneLine checks that stderr is exactly one line.
func wantOneLine(t *testing.T, r result, want string) {
	t.Helper()
	if r.code == 0 {
		t.Errorf("exit code 0, want non-zero")
	}
	if r.stderr != want+"\n" {
		t.Errorf("stderr = %q, want %q", r.stderr, want+"\n")
	}
}

func TestHelpOnEveryCommand(t *testing.T) {
	for _, path := range [][]string{
		{"topic", "create"}, {"topic", "list"}, {"topic", "describe"}, {"topic", "alter"}, {"topic", "delete"},
		{"produce"}, {"consume"}, {"group", "list"}, {"group", "describe"}, {"group", "reset"}, {"cluster", "status"},
		{"user", "create"}, {"user", "list"}, {"user", "delete"}, {"acl", "create"}, {"acl", "list"}, {"acl", "delete"},
		{"quota", "set"}, {"quota", "list"}, {"whoami"}, {"txn", "list"}, {"txn", "describe"},
	} {
		for _, h := range []string{"-h", "--help"} {
			r := run(t, "http://127.0.0.1:1", "", append(path, h)...)
			if r.code != 0 || !strings.Contains(r.stdout, "Usage: strata "+strings.Join(path, " ")) ||
				!strings.Contains(r.stdout, "Example:") || !strings.Contains(r.stdout, "--gateway") {
				t.Errorf("%v %s: code %d, stdout %q", path, h, r.code, r.stdout)
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"topic", "--help"}, {"help"}} {
		if r := run(t, "", "", args...); r.code != 0 || !strings.Contains(r.stdout, "Commands:") {
			t.Errorf("%v: %+v", args, r)
		}
	}
}

func TestUsageErrorsAreOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frob"}, `strata: unknown command "frob" (see 'strata --help')`},
		{[]string{"topic", "frob"}, `strata: unknown command "frob" (see 'strata topic --help')`},
		{[]string{"topic", "create"}, `strata: missing NAME (see 'strata topic create --help')`},
		{[]string{"topic", "create", "a", "b"}, `strata: unexpected argument "b" (see 'strata topic create --help')`},
		{[]string{"topic", "create", "a", "-p"}, `strata: flag -p needs a value (see 'strata topic create --help')`},
		{[]string{"topic", "create", "a", "-p", "x"}, `strata: invalid value "x" for -p: not a whole number (see 'strata topic create --help')`},
		{[]string{"topic", "create", "a", "-c", "novalue"}, `strata: -c wants KEY=VALUE, not "novalue"`},
		{[]string{"topic", "create", "a", "-x"}, `strata: unknown flag -x (see 'strata topic create --help')`},
		{[]string{"topic", "create", "a", "--bogus=1"}, `strata: unknown flag --bogus (see 'strata topic create --help')`},
		{[]string{"consume", "t", "--count"}, `strata: flag --count needs a value (see 'strata consume --help')`},
		{[]string{"topic", "alter", "a"}, `strata: nothing to change: give -c KEY=VALUE or -d KEY (see 'strata topic alter --help')`},
		{[]string{"produce", "t", "--acks", "some"}, `strata: --acks must be all, leader or none, not "some"`},
		{[]string{"produce", "t", "-f", "%k%v"}, `strata: -f: format "%k%v" needs a separator between %k and %v`},
		{[]string{"produce", "t", "-k", "x", "-f", `%k\t%v`}, `strata: give the key with -k or with %k in -f, not both`},
		{[]string{"consume", "t", "-o", "soon"}, `strata: -o must be start, end, an offset, -N (N before the end) or @UNIX_MS, not "soon"`},
		{[]string{"consume", "t", "-f", "%z"}, `strata: -f: unknown field %z in format "%z" (allowed: %t %p %o %k %v %h %T)`},
		{[]string{"group", "reset", "g"}, `strata: --topic and --to are required (see 'strata group reset --help')`},
		{[]string{"--output", "yaml", "topic", "list"}, `strata: --output must be text or json, not "yaml"`},
	} {
		r := run(t, "http://127.0.0.1:1", "", tc.args...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, r.code)
		}
		wantOneLine(t, r, tc.want)
	}
}

func TestUnreachableGatewayIsOneLine(t *testing.T) {
	url := fakecluster.ClosedGatewayURL()
	for _, args := range [][]string{{"topic", "list"}, {"cluster", "status"}, {"produce", "t"}, {"consume", "t", "-e"}, {"group", "list"}} {
		r := run(t, url, "x\n", args...)
		wantOneLine(t, r, "strata: cannot reach the gateway at "+url+": connection refused")
	}
}

func TestUnknownTopicIsOneLine(t *testing.T) {
	fc := fake(t)
	want := `strata: topic "nope" does not exist`
	for _, args := range [][]string{
		{"topic", "describe", "nope"}, {"topic", "delete", "nope"}, {"topic", "alter", "nope", "-c", "retention.ms=1"},
		{"produce", "nope"}, {"consume", "nope", "-e"},
	} {
		wantOneLine(t, run(t, fc.GatewayURL(), "x\n", args...), want)
	}
}

func TestGlobalFlagsAnywhere(t *testing.T) {
	fc := fake(t)
	for _, args := range [][]string{
		{"--gateway", fc.GatewayURL(), "topic", "create", "a"},
		{"topic", "--gateway", fc.GatewayURL(), "create", "b"},
		{"topic", "create", "c", "--gateway", fc.GatewayURL()},
		{"topic", "create", "--gateway=" + fc.GatewayURL(), "d", "-p", "2"},
	} {
		if r := run(t, "http://127.0.0.1:1", "", args...); r.code != 0 {
			t.Errorf("%v: %+v", args, r)
		}
	}
	r := run(t, fc.GatewayURL(), "", "topic", "list", "--output", "json")
	var got []topicListJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 4 || got[3].Partitions != 2 {
		t.Fatalf("list: %+v %v", r, err)
	}
	// STRATA_GATEWAY without a scheme.
	if r := run(t, strings.TrimPrefix(fc.GatewayURL(), "http://"), "", "topic", "list"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestTopicCommands(t *testing.T) {
	fc := fake(t)
	gw := fc.GatewayURL()
	r := run(t, gw, "", "topic", "create", "orders", "-p", "3", "-r", "2", "-c", "retention.ms=1000", "--config", "cleanup.policy=compact")
	if r.code != 0 || r.stdout != "created topic \"orders\" with 3 partitions, replication factor 2\n" {
		t.Fatalf("%+v", r)
	}
	wantOneLine(t, run(t, gw, "", "topic", "create", "orders"), `strata: topic "orders" already exists`)
	wantOneLine(t, run(t, gw, "", "topic", "create", "big", "-r", "5"), `strata: replication factor 5 is larger than the 3 live nodes`)

	if r := run(t, gw, "a\nb\nc\n", "produce", "orders", "-p", "1"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	r = run(t, gw, "", "topic", "describe", "orders", "--output", "json")
	var d map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("%+v %v", r, err)
	}
	parts := d["partitions"].([]any)
	p1 := parts[1].(map[string]any)
	for _, k := range []string{"partition", "leader", "leader_epoch", "replicas", "isr", "offline_replicas", "log_start_offset", "log_end_offset"} {
		if _, ok := p1[k]; !ok {
			t.Errorf("partition JSON lacks %q: %v", k, p1)
		}
	}
	if p1["log_end_offset"].(float64) != 3 || p1["log_start_offset"].(float64) != 0 || len(p1["isr"].([]any)) != 2 {
		t.Errorf("partition 1 = %v", p1)
	}
	if d["configs"].(map[string]any)["retention.ms"] != "1000" {
		t.Errorf("configs = %v", d["configs"])
	}
	r = run(t, gw, "", "topic", "describe", "orders")
	if r.code != 0 || !strings.Contains(r.stdout, "PARTITION") || !strings.Contains(r.stdout, "retention.ms=1000") {
		t.Fatalf("%+v", r)
	}
	r = run(t, gw, "", "topic", "alter", "orders", "-c", "retention.ms=5", "-d", "cleanup.policy", "--output", "json")
	if r.stdout != `{"configs":{"retention.ms":"5"},"name":"orders"}`+"\n" {
		t.Fatalf("%+v", r)
	}
	wantOneLine(t, run(t, gw, "", "topic", "alter", "orders", "-c", "bogus.key=1"), `strata: unknown config key "bogus.key"`)
	r = run(t, gw, "", "topic", "delete", "orders")
	if r.code != 0 || r.stdout != "deleted topic \"orders\"\n" {
		t.Fatalf("%+v", r)
	}
}

func TestProduceConsumeEndToEnd(t *testing.T) {
	fc := fake(t)
	gw := fc.GatewayURL()
	if r := run(t, gw, "", "topic", "create", "t", "-p", "3"); r.code != 0 {
		t.Fatal(r)
	}
	in := "k1\tv1\nk2\tv2\nk3\tv3\nk1\tv4\n"
	r := run(t, gw, in, "produce", "t", "-f", `%k\t%v\n`, "-H", "src=test", "--output", "json")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("%+v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 {
		t.Fatalf("reports: %q", r.stdout)
	}
	for i, l := range lines {
		var rep map[string]any
		if err := json.Unmarshal([]byte(l), &rep); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("k%d", []int{1, 2, 3, 1}[i])
		if len(rep) != 3 || rep["key"] != key || int32(rep["partition"].(float64)) != client.PartitionForKey([]byte(key), 3) {
			t.Errorf("report %d = %s", i, l)
		}
	}
	// Text reports, the default format, a fixed key.
	r = run(t, gw, "plain", "produce", "t", "-k", "k2")
	want := fmt.Sprintf("partition %d offset 1 key k2\n", client.PartitionForKey([]byte("k2"), 3))
	if r.code != 0 || r.stdout != want {
		t.Fatalf("%+v, want %q", r, want)
	}

	r = run(t, gw, "", "consume", "t", "-e", "-f", "json")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	got := map[string]recordJSON{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &raw); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range raw {
			keys = append(keys, k)
		}
		if len(keys) != 7 {
			t.Fatalf("record JSON keys %v", keys)
		}
		var rec recordJSON
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		got[rec.Value.(string)] = rec
	}
	if len(got) != 5 || got["v1"].Key != "k1" || got["v4"].Headers["src"] != "test" || got["plain"].Key != "k2" || got["plain"].Offset != 1 {
		t.Fatalf("consumed %+v", got)
	}

	// -n stops after COUNT; a format string; one partition.
	p := client.PartitionForKey([]byte("k1"), 3)
	r = run(t, gw, "", "consume", "t", "-p", fmt.Sprint(p), "-n", "1", "-f", `%p:%o %k=%v %h\n`)
	if r.code != 0 || r.stdout != fmt.Sprintf("%d:0 k1=v1 src=test\n", p) {
		t.Fatalf("%+v", r)
	}
	// -o OFFSET and -o -N on that partition, text default (value per line).
	if r = run(t, gw, "", "consume", "t", "-p", fmt.Sprint(p), "-o", "1", "-e"); r.stdout != "v4\n" {
		t.Fatalf("%+v", r)
	}
	if r = run(t, gw, "", "consume", "t", "-p", fmt.Sprint(p), "-o", "-1", "-e"); r.stdout != "v4\n" {
		t.Fatalf("%+v", r)
	}
	// -o end with -e: nothing, exit 0.
	if r = run(t, gw, "", "consume", "t", "-o", "end", "-e"); r.code != 0 || r.stdout != "" {
		t.Fatalf("%+v", r)
	}
	// --isolation: both levels read every record (no transactional batch
	// is ever written); any other level is refused in one line.
	for _, level := range []string{"committed", "uncommitted"} {
		r = run(t, gw, "", "consume", "t", "-p", fmt.Sprint(p), "-e", "--isolation", level)
		if r.code != 0 || r.stdout != "v1\nv4\n" {
			t.Fatalf("--isolation %s: %+v", level, r)
		}
	}
	wantOneLine(t, run(t, gw, "", "consume", "t", "--isolation", "read_committed"),
		`strata: --isolation must be committed or uncommitted, not "read_committed"`)
}

func TestProduceThroughLeaderChange(t *testing.T) {
	fc := fake(t)
	if err := fc.CreateTopic("t", 1, 3); err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	for i := range 500 {
		fmt.Fprintf(&in, "v%d\n", i)
	}
	done := make(chan result)
	go func() { done <- run(t, fc.GatewayURL(), in.String(), "produce", "t") }()
	for i := range 3 {
		time.Sleep(5 * time.Millisecond)
		fc.MoveLeader("t", 0, int32(i%3+1))
	}
	r := <-done
	if r.code != 0 || strings.Count(r.stdout, "\n") != 500 {
		t.Fatalf("code %d, %d reports, stderr %q", r.code, strings.Count(r.stdout, "\n"), r.stderr)
	}
	recs, err := fc.Records("t", 0)
	if err != nil || len(recs) != 500 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	for i, rec := range recs {
		if string(rec.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("offset %d = %q", i, rec.Value)
		}
	}
}

func TestProduceFailureExitsNonZero(t *testing.T) {
	fc := fake(t)
	if err := fc.CreateTopic("t", 1, 1); err != nil {
		t.Fatal(err)
	}
	// A record that does not match the format fails alone.
	r := run(t, fc.GatewayURL(), "k\tv\nnokey\nk2\tv2\n", "produce", "t", "-f", `%k\t%v\n`)
	if r.code != 1 || strings.Count(r.stdout, "\n") != 2 {
		t.Fatalf("%+v", r)
	}
	if !strings.HasPrefix(r.stderr, "strata: record 2 failed: record does not match the format") || strings.Count(r.stderr, "\n") != 2 {
		t.Fatalf("stderr %q", r.stderr)
	}
}

func TestGroupCommandsWithoutCoordinator(t *testing.T) {
	fc := fake(t)
	if err := fc.CreateTopic("t", 1, 1); err != nil {
		t.Fatal(err)
	}
	want := "strata: " + msgNoCoordinator
	for _, args := range [][]string{
		{"group", "list"}, {"group", "describe", "g"}, {"group", "reset", "g", "--topic", "t", "--to", "earliest"},
		{"consume", "t", "-g", "g"}, {"txn", "list"}, {"txn", "describe", "etl-0"},
	} {
		r := run(t, fc.GatewayURL(), "", args...)
		if r.code != 1 {
			t.Errorf("%v: exit %d", args, r.code)
		}
		wantOneLine(t, r, want)
	}
}

// TestTxnListRefusesAnUnknownState: --state names Kafka's states as the
// commands print them; anything else is a usage error, before any call.
func TestTxnListRefusesAnUnknownState(t *testing.T) {
	r := run(t, "http://127.0.0.1:1", "", "txn", "list", "--state", "ongoing,running")
	if r.code != 2 {
		t.Errorf("exit %d, want 2 (usage)", r.code)
	}
	wantOneLine(t, r, `strata: --state "running" is not a transaction state: empty, ongoing, prepare-commit, prepare-abort, complete-commit or complete-abort`)
}

func TestClusterStatus(t *testing.T) {
	fc := fake(t)
	if err := fc.CreateTopic("t", 3, 3); err != nil {
		t.Fatal(err)
	}
	r := run(t, fc.GatewayURL(), "", "cluster", "status", "--output", "json")
	var j clusterJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || !j.Healthy || len(j.Nodes) != 3 || j.ActiveController != "controller-1" {
		t.Fatalf("%+v %v", r, err)
	}
	r = run(t, fc.GatewayURL(), "", "cluster", "status")
	if r.code != 0 || !strings.Contains(r.stdout, "healthy: yes") || !strings.Contains(r.stdout, "active controller-1") {
		t.Fatalf("%+v", r)
	}
	fc.SetNodeDead(2, true)
	r = run(t, fc.GatewayURL(), "", "cluster", "status", "--exit-when-healthy", "--timeout", "300ms", "--interval", "50ms")
	wantOneLine(t, r, "strata: cluster not healthy after 300ms: node 2 is dead; 1 partitions offline; 3 partitions under-replicated")
	go func() { time.Sleep(200 * time.Millisecond); fc.SetNodeDead(2, false) }()
	r = run(t, fc.GatewayURL(), "", "cluster", "status", "--exit-when-healthy", "--interval", "50ms")
	if r.code != 0 || !strings.Contains(r.stdout, "healthy: yes") {
		t.Fatalf("%+v", r)
	}
}

func TestInputFormat(t *testing.T) {
	type kv struct{ k, v string }
	for _, tc := range []struct {
		format, in string
		want       []kv
		wantErr    string
	}{
		{`%v\n`, "a\nb\n", []kv{{"", "a"}, {"", "b"}}, ""},
		{`%v\n`, "a\nb", []kv{{"", "a"}, {"", "b"}}, ""},
		{`%v\n`, "a\n\nb\n", []kv{{"", "a"}, {"", ""}, {"", "b"}}, ""},
		{`%v`, "a\nb\n", []kv{{"", "a"}, {"", "b"}}, ""},
		{`%k\t%v\n`, "k1\tv1\nk2\tv\t2\n", []kv{{"k1", "v1"}, {"k2", "v\t2"}}, ""},
		{`%k=%v;`, "a=1;b=2;", []kv{{"a", "1"}, {"b", "2"}}, ""},
		{`[%k] %v\n`, "[x] y\n", []kv{{"x", "y"}}, ""},
		{`%k::%v\n`, "a::b\n", []kv{{"a", "b"}}, ""},
		{`%k\t%v\n`, "nokey\n", nil, "record does not match the format"},
	} {
		f, err := newInputFormat(tc.format)
		if err != nil {
			t.Fatalf("%q: %v", tc.format, err)
		}
		r := bufio.NewReader(strings.NewReader(tc.in))
		var got []kv
		var gotErr error
		for {
			k, v, err := f.read(r)
			if err != nil {
				if err.Error() != "EOF" {
					gotErr = err
				}
				break
			}
			got = append(got, kv{string(k), string(v)})
		}
		if tc.wantErr != "" {
			if gotErr == nil || !strings.Contains(gotErr.Error(), tc.wantErr) {
				t.Errorf("%q on %q: err %v, want %q", tc.format, tc.in, gotErr, tc.wantErr)
			}
			continue
		}
		if gotErr != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q on %q: got %q, %v; want %q", tc.format, tc.in, got, gotErr, tc.want)
		}
	}
	for _, bad := range []string{`%k`, `%v%k`, `%v\q`, `%x`, `%v %v`, `%k\t%v%`} {
		if _, err := newInputFormat(bad); err == nil {
			t.Errorf("format %q accepted", bad)
		}
	}
}

func TestOutputFormat(t *testing.T) {
	rec := &client.Record{Topic: "t", Partition: 2, Offset: 9, Key: []byte("k"), Value: []byte("v"),
		Timestamp: time.UnixMilli(1700000000123), Headers: []client.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}}
	for format, want := range map[string]string{
		`%v\n`:                "v\n",
		`%t/%p@%o %k=%v %T\n`: "t/2@9 k=v 1700000000123\n",
		`%h|100%%\t\\`:        "a=1,b=2|100%\t\\",
		`literal only\r\n`:    "literal only\r\n",
	} {
		f, err := newOutputFormat(format)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := f.write(&b, rec); err != nil || b.String() != want {
			t.Errorf("%q: %q, want %q", format, b.String(), want)
		}
	}
}

func TestRecordJSONShape(t *testing.T) {
	rec := &client.Record{Topic: "t", Partition: 1, Offset: 5, Timestamp: time.UnixMilli(42),
		Key: nil, Value: []byte{0xff, 0x00}, Headers: []client.Header{{Key: "h", Value: []byte("x")}}}
	var b bytes.Buffer
	if err := writeJSON(&b, toJSON(rec)); err != nil {
		t.Fatal(err)
	}
	want := `{"topic":"t","partition":1,"offset":5,"timestamp":42,"key":null,"value":{"base64":"/wA="},"headers":{"h":"x"}}` + "\n"
	if b.String() != want {
		t.Fatalf("%s\nwant %s", b.String(), want)
	}
	b.Reset()
	_ = writeJSON(&b, deliveryJSON{Partition: 3, Offset: 17, Key: bytesJSON([]byte("k1"))})
	if b.String() != `{"partition":3,"offset":17,"key":"k1"}`+"\n" {
		t.Fatal(b.String())
	}
}

func TestParseStart(t *testing.T) {
	for in, want := range map[string]string{
		"start": "start", "end": "end", "17": "17", "@1700000000000": "@1700000000000", "-5": "end-5", "0": "0",
	} {
		got, err := parseStart(in)
		if err != nil || got.String() != want {
			t.Errorf("%q: %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "@x", "1.5"} {
		if _, err := parseStart(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRegisterAddsCommand(t *testing.T) {
	registryMu.Lock()
	saved := extra
	registryMu.Unlock()
	t.Cleanup(func() { // the registry is global; leave it as found for -count > 1
		registryMu.Lock()
		extra = saved
		registryMu.Unlock()
	})
	Register(&Command{Name: "zz-test", Summary: "test hook", Main: func(_ context.Context, args []string, stdout, _ io.Writer) int {
		fmt.Fprintln(stdout, strings.Join(args, ","))
		return 7
	}})
	r := run(t, "", "", "zz-test", "a", "--b")
	if r.code != 7 || r.stdout != "a,--b\n" {
		t.Fatalf("%+v", r)
	}
}
