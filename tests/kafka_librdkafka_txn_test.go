//go:build kafka

package tests

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-mq/strata/tests/harness"
)

// TestKafkaLibrdkafkaTransactions runs librdkafka's transactional producer
// (testdata/txnproducer.py) against a real strata dev: init_transactions,
// a transaction to two partitions committed, the next aborted and a third
// committed; a read_committed consumer reads exactly the committed values
// and a read_uncommitted one all of them. send_offsets_to_transaction with
// a group member's metadata commits the group's offset only when its
// transaction commits.
func TestKafkaLibrdkafkaTransactions(t *testing.T) {
	if out, err := exec.Command(debianPython, "-c", "import confluent_kafka").CombinedOutput(); err != nil {
		t.Fatalf("this test runs librdkafka through Debian's python3-confluent-kafka, which %s cannot import (apt-get install python3-confluent-kafka): %v: %s", debianPython, err, out)
	}
	d, cli := kafkaDev(t)
	ctx := harness.Deadline(t, 4*time.Minute)
	if _, err := cli("", "topic", "create", "rdk-txn", "-p", "2", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("", "topic", "create", "rdk-txn-in", "-p", "1", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	// The group's member reads one record of the input topic before it
	// sends offsets, as a consume-transform-produce loop would.
	pr := kafkaClient(t, d, kgo.DefaultProduceTopic("rdk-txn-in"))
	produceNumbered(ctx, t, pr, 0, 10)

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, debianPython, filepath.Join("testdata", "txnproducer.py"),
		d.File.KafkaBootstrap, "rdk-txn", "rdk-txn-in", "rdk-txn-group")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("txnproducer.py: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var got struct {
		ReadCommitted     []string `json:"read_committed"`
		ReadUncommitted   []string `json:"read_uncommitted"`
		OffsetAfterAbort  int64    `json:"offset_after_abort"`
		OffsetAfterCommit int64    `json:"offset_after_commit"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("txnproducer.py printed %q: %v\nstderr:\n%s", stdout.String(), err, stderr.String())
	}
	if want := []string{"c0", "c1", "c2", "c3"}; !slices.Equal(got.ReadCommitted, want) {
		t.Errorf("read_committed read %v, want %v", got.ReadCommitted, want)
	}
	if want := []string{"a0", "a1", "c0", "c1", "c2", "c3"}; !slices.Equal(got.ReadUncommitted, want) {
		t.Errorf("read_uncommitted read %v, want %v", got.ReadUncommitted, want)
	}
	// librdkafka's OFFSET_INVALID (-1001): the group has no offset.
	if got.OffsetAfterAbort != -1001 {
		t.Errorf("after the aborted transaction the group's offset is %d, want none (-1001)", got.OffsetAfterAbort)
	}
	if got.OffsetAfterCommit != 5 {
		t.Errorf("after the committed transaction the group's offset is %d, want 5", got.OffsetAfterCommit)
	}
	if t.Failed() {
		t.Logf("txnproducer.py's stderr:\n%s", stderr.String())
	}
}
