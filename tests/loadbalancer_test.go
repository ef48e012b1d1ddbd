package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/tests/harness"
)

// lbAck is where a record was acknowledged, by the value it carries.
type lbAck struct {
	partition int32
	offset    int64
}

// TestGatewaysBehindLoadBalancer runs `strata dev --gateways 2` behind a
// real HAProxy and points every client at the load balancer only: the CLI
// creates the topic, the Go client produces (idempotent, acks=all, its
// metadata refreshed through the balancer every 100ms) and a JSON client
// produces over HTTP/1.1, as curl and k6 do. Mid-produce gateway 1 is
// killed, later restarted, and then gateway 2 is killed, so whichever
// gateway a client's connection was pinned to dies under it. Every
// acknowledged record must be read back at the partition and offset it was
// acknowledged at, the clients must carry on through the other gateway,
// and the metadata the balancer hands out must name the storage nodes
// themselves (clients reach them directly, not through the balancer).
func TestGatewaysBehindLoadBalancer(t *testing.T) {
	t.Parallel()
	dev := harness.StartDev(t, "--gateways", "2", "--storage-nodes", "3")
	if len(dev.Gateways) != 2 {
		t.Fatalf("cluster.json lists gateways %q, want 2", dev.Gateways)
	}
	lb := harness.StartHAProxy(t, dev.LBBackends(t))
	ctx := harness.Deadline(t, 3*time.Minute)

	cli := func(stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, dev.Strata, append([]string{"--gateway", lb.URL}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return out.String(), fmt.Errorf("strata %s: %v: %s", strings.Join(args, " "), err, errb.String())
		}
		return out.String(), nil
	}
	// The balancer marks a gateway up after its first /readyz checks.
	lb.WaitServerUp(ctx, t, "gateway-1")
	lb.WaitServerUp(ctx, t, "gateway-2")
	waitLB(ctx, t, lb.URL)
	if _, err := cli("", "topic", "create", "lb", "-p", "6", "-r", "3"); err != nil {
		t.Fatal(err)
	}

	// Routing through the balancer names the storage nodes, not the
	// balancer: produce and fetch go to partition leaders directly.
	storageURLs := map[string]bool{}
	for _, p := range dev.File.Processes {
		if p.Service == "storage" {
			storageURLs[p.URL] = true
		}
	}
	gw := gatewayv1connect.NewGatewayServiceClient(harness.H2CClient(), lb.URL)
	md, err := gw.Metadata(ctx, connect.NewRequest(&gatewayv1.MetadataRequest{Topics: []string{"lb"}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Msg.GetNodes()) != 3 {
		t.Fatalf("metadata through the balancer lists %d nodes, want 3", len(md.Msg.GetNodes()))
	}
	for _, n := range md.Msg.GetNodes() {
		if !storageURLs[n.GetAddress()] {
			t.Errorf("node %d advertised at %q, which is not a storage node's own address (%v)", n.GetNodeId(), n.GetAddress(), storageURLs)
		}
	}

	var (
		mu          sync.Mutex
		acked       = map[string]lbAck{}
		jsonRetries int
		count       = map[string]int{} // per producer
	)
	ack := func(who, value string, a lbAck) {
		mu.Lock()
		defer mu.Unlock()
		acked[value] = a
		count[who]++
	}
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return count["go"], count["json"]
	}

	prod, err := client.NewProducer(lb.URL, client.Idempotent(true), client.WithAcks(client.AcksAll),
		client.MetadataMaxAge(100*time.Millisecond), client.Linger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	const perProducer = 600
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { // the Go client, 10 records per synchronous call
		defer wg.Done()
		for i := 0; i < perProducer; i += 10 {
			var rs []*client.Record
			for j := i; j < i+10; j++ {
				rs = append(rs, &client.Record{Topic: "lb", Key: []byte(fmt.Sprintf("k%d", j%12)), Value: []byte(fmt.Sprintf("go-%04d", j))})
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := prod.ProduceSync(cctx, rs...)
			cancel()
			if err != nil {
				errs <- fmt.Errorf("go producer at %d: %w", i, err)
				return
			}
			for _, r := range rs {
				ack("go", string(r.Value), lbAck{r.Partition, r.Offset})
			}
		}
	}()
	go func() { // HTTP/1.1 JSON through the balancer, as curl and k6 send it
		defer wg.Done()
		h1 := &http.Client{Timeout: 10 * time.Second}
		for i := 0; i < perProducer; i += 10 {
			var recs []map[string]string
			for j := i; j < i+10; j++ {
				recs = append(recs, map[string]string{"key": fmt.Sprintf("j%d", j%12), "value": fmt.Sprintf("json-%04d", j)})
			}
			body, _ := json.Marshal(map[string]any{"topic": "lb", "acks": "ACKS_ALL", "records": recs})
			for attempt := 1; ; attempt++ {
				res, err := produceJSON(ctx, h1, lb.URL, body)
				if err == nil {
					for k, r := range res {
						ack("json", recs[k]["value"], r)
					}
					break
				}
				// A request cut by a dying gateway is retried, as the
				// scripts' users do: delivery through the proxy is
				// at-least-once, so a retry may duplicate, never lose.
				mu.Lock()
				jsonRetries++
				mu.Unlock()
				if attempt == 50 || ctx.Err() != nil {
					errs <- fmt.Errorf("json producer at %d: %w", i, err)
					return
				}
				select {
				case <-time.After(100 * time.Millisecond):
				case <-stop:
					return
				}
			}
		}
	}()

	waitCount := func(goWant, jsonWant int) {
		t.Helper()
		for {
			g, j := counts()
			if g >= goWant && j >= jsonWant {
				return
			}
			select {
			case err := <-errs:
				close(stop)
				t.Fatal(err)
			case <-ctx.Done():
				t.Fatalf("timed out with %d go and %d json records acknowledged", g, j)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	waitCount(150, 150)
	dev.Kill(t, "gateway", 1)
	waitCount(300, 300)
	again := harness.Start(t, "gateway-1-again", dev.Process(t, "gateway", 1).Argv)
	harness.WaitReadyz(ctx, t, "http://"+dev.Process(t, "gateway", 1).AdminAddress, again)
	lb.WaitServerUp(ctx, t, "gateway-1")
	dev.Kill(t, "gateway", 2)
	waitCount(perProducer, perProducer)
	wg.Wait()
	close(stop)
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	t.Logf("JSON requests retried after a gateway died under them: %d", jsonRetries)

	// The CLI carries on through the one gateway left.
	var in strings.Builder
	for i := range 50 {
		fmt.Fprintf(&in, "c%d\tcli-%04d\n", i%5, i)
	}
	out, err := cli(in.String(), "produce", "lb", "-f", `%k\t%v\n`, "--acks", "all", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 50 {
		t.Fatalf("%d CLI delivery reports, want 50", len(lines))
	}
	for i, l := range lines {
		var a struct {
			Partition int32 `json:"partition"`
			Offset    int64 `json:"offset"`
		}
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("delivery report %q: %v", l, err)
		}
		ack("cli", fmt.Sprintf("cli-%04d", i), lbAck{a.Partition, a.Offset})
	}

	// Read everything back through the balancer with the CLI.
	out, err = cli("", "consume", "lb", "-o", "start", "-e", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]lbAck{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r struct {
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
			Value     string `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("consumed line %q: %v", sc.Text(), err)
		}
		if prev, dup := seen[r.Value]; dup && r.Value[:2] == "go" {
			t.Errorf("idempotent record %s read twice: %v and %d/%d", r.Value, prev, r.Partition, r.Offset)
		}
		if _, dup := seen[r.Value]; !dup {
			seen[r.Value] = lbAck{r.Partition, r.Offset}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) != 2*perProducer+50 {
		t.Fatalf("%d records acknowledged, want %d", len(acked), 2*perProducer+50)
	}
	lost := 0
	for v, a := range acked {
		r, ok := seen[v]
		switch {
		case !ok:
			lost++
			if lost <= 10 {
				t.Errorf("acknowledged record %s (partition %d offset %d) was not read back", v, a.partition, a.offset)
			}
		case strings.HasPrefix(v, "go-") || strings.HasPrefix(v, "cli-"):
			if r != a {
				t.Errorf("record %s acknowledged at %d/%d, read at %d/%d", v, a.partition, a.offset, r.partition, r.offset)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d acknowledged records lost", lost)
	}

	// A consumer group finds its coordinator through the balancer.
	out, err = cli("", "consume", "lb", "-g", "lb-group", "-o", "start", "-n", "20", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.TrimSpace(out), "\n") + 1; n != 20 {
		t.Errorf("group consume through the balancer read %d records, want 20", n)
	}
}

// produceJSON posts one ProduceJSON request over HTTP/1.1 and returns a
// result per record, or an error when the call or any record failed.
func produceJSON(ctx context.Context, h *http.Client, base string, body []byte) ([]lbAck, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/strata.gateway.v1.GatewayService/ProduceJSON", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, raw)
	}
	var out struct {
		Results []struct {
			Partition int32           `json:"partition"`
			Offset    json.Number     `json:"offset"`
			Error     json.RawMessage `json:"error"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%v: %s", err, raw)
	}
	var acks []lbAck
	for _, r := range out.Results {
		if len(r.Error) > 0 {
			return nil, fmt.Errorf("record failed: %s", r.Error)
		}
		off, err := r.Offset.Int64()
		if err != nil {
			return nil, fmt.Errorf("offset %q: %v", r.Offset, err)
		}
		acks = append(acks, lbAck{r.Partition, off})
	}
	return acks, nil
}

// waitLB waits until a Metadata call through the balancer succeeds.
func waitLB(ctx context.Context, t *testing.T, base string) {
	t.Helper()
	gw := gatewayv1connect.NewGatewayServiceClient(harness.H2CClient(), base)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := gw.Metadata(cctx, connect.NewRequest(&gatewayv1.MetadataRequest{}))
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("load balancer at %s never answered Metadata: %v", base, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
