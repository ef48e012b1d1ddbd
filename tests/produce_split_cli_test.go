package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// TestMaxMessageBytesOnARealNode runs the producer's max.message.bytes
// checks, each on a topic of its own, on one shared single-node cluster
// and gateway: neither breaks the cluster.
func TestMaxMessageBytesOnARealNode(t *testing.T) {
	t.Parallel()
	strata := harness.Binary(t, "github.com/strata-mq/strata/cmd/strata")
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 1})
	gw := harness.StartGateway(t, c)
	t.Run("CLI produce to a small max.message.bytes", func(t *testing.T) { testCLIProduceToSmallMaxMessageBytes(t, strata, gw) })
	t.Run("producer splits on a real node", func(t *testing.T) { testProducerSplitsOnARealNode(t, strata, c, gw) })
}

// testCLIProduceToSmallMaxMessageBytes is issue 36's new user: a topic
// created with max.message.bytes=4096 and `strata produce` of 12000 small
// records. Every record must be written, once and in order; before the
// producer kept its batches within the topic's limit (and split a batch
// refused as too large), thousands failed with "batch too large".
func testCLIProduceToSmallMaxMessageBytes(t *testing.T, strata string, gw *harness.Node) {
	ctx := harness.Deadline(t, 120*time.Second)
	cli := func(stdin string, args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, strata, append([]string{"--gateway", gw.URL}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("strata %s: %v\nstderr: %.2000s", strings.Join(args, " "), err, errb.String())
		}
		return out.String()
	}
	cli("", "topic", "create", "small", "-p", "1", "-r", "1", "-c", "max.message.bytes=4096")
	const n = 12000
	var in, want strings.Builder
	for i := range n {
		fmt.Fprintf(&in, "record-%05d\n", i)
		fmt.Fprintf(&want, "%d:record-%05d\n", i, i)
	}
	cli(in.String(), "produce", "small")
	if got := cli("", "consume", "small", "-e", "-f", `%o:%v\n`); got != want.String() {
		lines := strings.Count(got, "\n")
		t.Fatalf("consumed %d records, want %d, offsets 0.. in produce order; first lines:\n%.300s", lines, n, got)
	}
}

// testProducerSplitsOnARealNode: a producer that cached a topic's
// metadata before its max.message.bytes was lowered learns the limit from
// the storage node's refusal. The refused batch is split and the halves go
// on the partition's next producer epoch, which the real node takes at
// sequence 0: every record lands once, in order.
func testProducerSplitsOnARealNode(t *testing.T, strata string, c *harness.Cluster, gw *harness.Node) {
	ctx := harness.Deadline(t, 120*time.Second)
	cli := func(args ...string) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, strata, append([]string{"--gateway", gw.URL}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("strata %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	cli("topic", "create", "late", "-p", "1", "-r", "1")
	p, err := client.NewProducer(gw.URL, client.Linger(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	first := make(chan error, 1)
	p.Produce(ctx, &client.Record{Topic: "late", Value: []byte("first")}, func(_ *client.Record, err error) { first <- err })
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	cli("topic", "alter", "late", "-c", "max.message.bytes=1000")
	// The node refuses a batch over 1000 + 64 KiB once it has the config:
	// probe with a batch of another producer (its record is kept apart).
	probe := textBatch(t, "", []string{strings.Repeat("p", 70<<10)}, -1, 0)
	testwait.Until(t, 30*time.Second, "the storage node refusing a 70 KiB batch", func() error {
		leader, epoch := c.Leader(ctx, "late", 0)
		_, err := produce(ctx, leader.StorageClient(), "late", 0, epoch, commonv1.Acks_ACKS_ALL, 5*time.Second, probe)
		if err == nil {
			return errors.New("accepted")
		}
		if d := apierr.DetailOf(err); d.GetReason() != commonv1.Reason_REASON_RECORD_TOO_LARGE {
			return err
		}
		return nil
	})
	const n = 200
	want := []string{"first"}
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		v := fmt.Sprintf("%04d-%s", i, strings.Repeat("v", 996))
		want = append(want, v)
		p.Produce(ctx, &client.Record{Topic: "late", Value: []byte(v)}, func(_ *client.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	var got []string
	for _, r := range readPartition(ctx, t, c, "late", 0) {
		if len(r.Value) != 70<<10 {
			got = append(got, string(r.Value))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the log holds %d of the producer's records, want %d, once each in order", len(got), len(want))
	}
	// The refused batch's halves went on the partition's next epoch.
	var epochs []int16
	fetchBatches(ctx, t, c, "late", 0, 0, func(h recordbatch.Header, _ []byte, _ int64) {
		if h.ProducerID >= 0 {
			epochs = append(epochs, h.ProducerEpoch)
		}
	})
	if len(epochs) < 3 || epochs[len(epochs)-1] <= epochs[0] {
		t.Fatalf("the producer's batches have epochs %v: no refused batch was split onto a new epoch", epochs)
	}
}
