package tests

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/strata-mq/strata/tests/harness"
)

// k6Dir holds the k6 scripts and their fixtures.
var k6Dir = filepath.Join("..", "loadtest", "k6")

// k6Headers are the two ways the scripts post: plain JSON as curl does,
// and the Connect protocol's unary JSON (lib/strata.js).
var k6Headers = map[string]map[string]string{
	"json":    {"Content-Type": "application/json"},
	"connect": {"Content-Type": "application/json", "Connect-Protocol-Version": "1", "Connect-Timeout-Ms": "10000"},
}

// k6Checks are the check names of lib/strata.js that this test asserts; it
// fails when a script no longer has one, so the two change together.
var k6Checks = []string{
	"setup: topic exists",
	"produce: status is 200",
	"produce: one result per record",
	"produce: every record has an offset",
	"fetch: status is 200",
	"fetch: records are in offset order from the requested offset",
	"fetch: nextOffset is past the last record",
}

func k6Fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k6Dir, "fixtures", name))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatalf("fixture %s is not valid JSON", name)
	}
	return b
}

// k6Post sends what the scripts' http.post sends.
func k6Post(ctx context.Context, t *testing.T, base, method string, body []byte, protocol string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/strata.gateway.v1.GatewayService/"+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range k6Headers[protocol] {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req) // HTTP/1.1, as k6 sends it
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// TestK6ScriptsStatic checks the scripts without running k6: every check
// this file mirrors is still in them, every fixture they open exists, and
// every threshold on a scenario names a scenario of the same script.
func TestK6ScriptsStatic(t *testing.T) {
	t.Parallel()
	lib, err := os.ReadFile(filepath.Join(k6Dir, "lib", "strata.js"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range k6Checks {
		if !bytes.Contains(lib, []byte("'"+c+"'")) {
			t.Errorf("lib/strata.js has no check %q; update k6Checks and this test with the script", c)
		}
	}
	for _, m := range regexp.MustCompile(`fixture\('([^']+)'\)`).FindAllSubmatch(lib, -1) {
		k6Fixture(t, string(m[1]))
	}
	scripts, _ := filepath.Glob(filepath.Join(k6Dir, "*.js"))
	if len(scripts) < 3 {
		t.Fatalf("k6 scripts: %v", scripts)
	}
	for _, s := range scripts {
		src, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`\{scenario:([a-z_]+)\}`).FindAllSubmatch(src, -1) {
			if !bytes.Contains(src, []byte("\n    "+string(m[1])+": {")) {
				t.Errorf("%s: a threshold names scenario %s, which the script does not define", filepath.Base(s), m[1])
			}
		}
		if !bytes.Contains(src, []byte("thresholds:")) {
			t.Errorf("%s has no thresholds", filepath.Base(s))
		}
	}
}

// TestK6Requests sends a real cluster (strata dev) the exact requests the
// k6 scripts send, bodies read from the same fixture files, and asserts
// what the scripts' checks assert: the setup creates the topic (and
// accepts that it exists), ProduceJSON over plain JSON and over the
// Connect protocol acknowledges every record with an offset, and FetchJSON
// from the earliest offset of every partition follows nextOffset through
// every produced record in offset order.
func TestK6Requests(t *testing.T) {
	t.Parallel()
	dev := harness.StartDev(t, "--storage-nodes", "3")
	base := dev.Gateways[0]
	ctx := harness.Deadline(t, 2*time.Minute)

	create := k6Fixture(t, "create-topic.json")
	var topic struct {
		Name       string `json:"name"`
		Partitions int32  `json:"partitions"`
	}
	if err := json.Unmarshal(create, &topic); err != nil {
		t.Fatal(err)
	}
	// setup: topic exists — created, then already there.
	if code, body := k6Post(ctx, t, base, "CreateTopic", create, "json"); code != 200 {
		t.Fatalf("CreateTopic: %d %s", code, body)
	}
	if code, body := k6Post(ctx, t, base, "CreateTopic", create, "json"); code != 409 || !regexp.MustCompile(`already_exists`).Match(body) {
		t.Fatalf("CreateTopic again: %d %s; the setup check accepts 409 already_exists", code, body)
	}

	produce := k6Fixture(t, "produce.json")
	var prodReq struct {
		Topic   string            `json:"topic"`
		Records []json.RawMessage `json:"records"`
	}
	if err := json.Unmarshal(produce, &prodReq); err != nil {
		t.Fatal(err)
	}
	if prodReq.Topic != topic.Name {
		t.Fatalf("produce.json names topic %q, create-topic.json %q: the scripts use one topic", prodReq.Topic, topic.Name)
	}
	const rounds = 4
	produced := 0
	for round := range rounds {
		for _, protocol := range []string{"json", "connect"} {
			code, body := k6Post(ctx, t, base, "ProduceJSON", produce, protocol)
			if code != 200 { // produce: status is 200
				t.Fatalf("ProduceJSON (%s) round %d: %d %s", protocol, round, code, body)
			}
			var res struct {
				Results []struct {
					Partition int32           `json:"partition"`
					Offset    string          `json:"offset"`
					Error     json.RawMessage `json:"error"`
				} `json:"results"`
			}
			if err := json.Unmarshal(body, &res); err != nil {
				t.Fatalf("ProduceJSON answer %s: %v", body, err)
			}
			if len(res.Results) != len(prodReq.Records) { // produce: one result per record
				t.Fatalf("ProduceJSON (%s): %d results for %d records", protocol, len(res.Results), len(prodReq.Records))
			}
			for _, r := range res.Results { // produce: every record has an offset
				if r.Offset == "" {
					r.Offset = "0" // Connect's JSON leaves zero values out, as the script allows
				}
				if len(r.Error) > 0 || !regexp.MustCompile(`^\d+$`).MatchString(r.Offset) {
					t.Fatalf("ProduceJSON (%s): result %+v has no offset", protocol, r)
				}
			}
			produced += len(res.Results)
		}
	}

	fetchTmpl := k6Fixture(t, "fetch.json")
	consumed := 0
	for p := range topic.Partitions {
		offset := int64(-2)
		for {
			var req map[string]any
			json.Unmarshal(fetchTmpl, &req)
			req["partition"], req["offset"] = p, strconv.FormatInt(offset, 10) // as fetch() in lib/strata.js
			body, _ := json.Marshal(req)
			code, out := k6Post(ctx, t, base, "FetchJSON", body, "json")
			if code != 200 { // fetch: status is 200
				t.Fatalf("FetchJSON partition %d offset %d: %d %s", p, offset, code, out)
			}
			var res struct {
				Records []struct {
					Offset      string `json:"offset"`
					TimestampMs string `json:"timestampMs"`
					Value       string `json:"value"`
				} `json:"records"`
				NextOffset string `json:"nextOffset"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("FetchJSON answer %s: %v", out, err)
			}
			next, _ := strconv.ParseInt(cmp.Or(res.NextOffset, "0"), 10, 64)
			var prev int64 = -1
			for _, r := range res.Records { // fetch: records are in offset order from the requested offset
				o, err := strconv.ParseInt(cmp.Or(r.Offset, "0"), 10, 64)
				if err != nil || o < offset || o <= prev {
					t.Fatalf("partition %d: record offset %q after %d, asked from %d", p, r.Offset, prev, offset)
				}
				if _, err := strconv.ParseInt(r.TimestampMs, 10, 64); err != nil {
					t.Fatalf("partition %d: timestampMs %q (consume.js computes end-to-end latency from it)", p, r.TimestampMs)
				}
				prev = o
			}
			if n := len(res.Records); n > 0 && next != prev+1 { // fetch: nextOffset is past the last record
				t.Fatalf("partition %d: nextOffset %d after last record %d", p, next, prev)
			}
			consumed += len(res.Records)
			if len(res.Records) == 0 {
				break
			}
			offset = next
		}
	}
	if consumed != produced {
		t.Fatalf("the consumers' fetches read %d records, the producers' requests were acknowledged for %d", consumed, produced)
	}
	if want := rounds * 2 * len(prodReq.Records); produced != want {
		t.Fatalf("%d records acknowledged, want %d", produced, want)
	}
	t.Logf("k6 requests: %d records produced (plain JSON and Connect) and read back", produced)
}
