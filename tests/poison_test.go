package tests

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch/batchtest"
	"github.com/strata-mq/strata/tests/harness"
)

// TestPoisonBatches, with real processes (controller, storage node,
// gateway) and the strata CLI:
//
//   - a batch whose CRC is right but whose record count is wrong is
//     refused by the leader with INVALID_ARGUMENT INVALID_RECORD, and
//     consume reads on as if it had never been sent;
//   - such a batch written straight into the partition log while the node
//     is down (a log from before validation) makes `consume -e` print the
//     records before it and exit non-zero with one line naming the
//     partition and the offsets and how to read on; `-p 0 -o NEXT` and
//     `--skip-corrupt` both read everything after it.
func TestPoisonBatches(t *testing.T) {
	t.Parallel()
	strata := harness.Binary(t, "github.com/strata-mq/strata/cmd/strata")
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 1})
	gs := harness.StartGroupServices(t, c, harness.GroupConfig{})
	ctx := harness.Deadline(t, 120*time.Second)
	type result struct {
		ok             bool
		stdout, stderr string
	}
	cli := func(stdin string, args ...string) result {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, strata, append([]string{"--gateway", gs.Gateway.URL}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		t.Logf("strata %s: %v; stderr %q", strings.Join(args, " "), err, errb.String())
		return result{err == nil, out.String(), errb.String()}
	}
	must := func(r result) result {
		t.Helper()
		if !r.ok {
			t.Fatalf("strata failed: %q", r.stderr)
		}
		return r
	}
	must(cli("", "topic", "create", "old", "-p", "1", "-r", "1"))
	must(cli("a\nb\nc\n", "produce", "old"))

	poison := batchtest.Poisons(t)[0].Batch // record count above the records: 4 offsets
	leader, epoch := c.Leader(ctx, "old", 0)
	_, err := produce(ctx, leader.StorageClient(), "old", 0, epoch, commonv1.Acks_ACKS_ALL, 5*time.Second, poison)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.DetailOf(err).GetReason() != commonv1.Reason_REASON_INVALID_RECORD {
		t.Fatalf("produce of a poison batch: %v, want INVALID_ARGUMENT INVALID_RECORD", err)
	}
	if r := must(cli("", "consume", "old", "-e", "-f", `%o:%v\n`)); r.stdout != "0:a\n1:b\n2:c\n" {
		t.Fatalf("consume after a refused poison batch: %q", r.stdout)
	}

	// An older log: the batch goes into the partition log directly.
	leader.Kill()
	l, err := partlog.Open(filepath.Join(leader.DataDir, "old-0"), partlog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := l.AppendAsLeader(ctx, bytes.Clone(poison), l.LatestEpoch()); err != nil || info.FirstOffset != 3 {
		t.Fatalf("append to the stopped node's log: %+v %v", info, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	leader.Restart()
	must(cli("d\ne\n", "produce", "old"))

	r := cli("", "consume", "old", "-e", "-f", `%o:%v\n`)
	if r.ok || r.stdout != "0:a\n1:b\n2:c\n" {
		t.Fatalf("consume over the bad batch: ok %v, stdout %q; want the records before it and a failure", r.ok, r.stdout)
	}
	for _, want := range []string{"partition 0 offset 3", "offsets 3 to 6", "-p 0 -o 7", "--skip-corrupt"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("error %q does not say %q", r.stderr, want)
		}
	}
	if strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("error is not one line: %q", r.stderr)
	}
	if r := must(cli("", "consume", "old", "-e", "-f", `%o:%v\n`, "-p", "0", "-o", "7")); r.stdout != "7:d\n8:e\n" {
		t.Fatalf("consume -p 0 -o 7: %q", r.stdout)
	}
	r = must(cli("", "consume", "old", "-e", "-f", `%o:%v\n`, "--skip-corrupt"))
	if r.stdout != "0:a\n1:b\n2:c\n7:d\n8:e\n" || !strings.Contains(r.stderr, "skipped offsets 3 to 6 of topic old partition 0") {
		t.Fatalf("consume --skip-corrupt: stdout %q, stderr %q", r.stdout, r.stderr)
	}
}
