package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/tests/harness"
)

func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuilds()
	os.Exit(code)
}

// plainAndSecure runs body twice, as subtests "plain" (the cluster of make
// run) and "secure" (harness ClusterConfig.Secure: TLS, mutual TLS,
// authentication and ACLs on every process), for the real-process tests
// that must also pass with security on (issue 22).
func plainAndSecure(t *testing.T, body func(t *testing.T, secure bool)) {
	t.Run("plain", func(t *testing.T) { body(t, false) })
	t.Run("secure", func(t *testing.T) { body(t, true) })
}

// describeErr renders an error with its code and reason, for logs.
func describeErr(err error) string {
	if d := apierr.DetailOf(err); d != nil {
		return fmt.Sprintf("%v/%v: %s", connect.CodeOf(err), d.GetReason(), d.GetMessage())
	}
	return err.Error()
}

// textBatch builds one batch of records with the given key and values.
// With pid >= 0 the batch is idempotent: producer pid, epoch 0, base
// sequence seq.
func textBatch(t testing.TB, key string, values []string, pid int64, seq int32) []byte {
	t.Helper()
	now := time.Now().UnixMilli()
	recs := make([]recordbatch.Record, len(values))
	for i, v := range values {
		recs[i] = recordbatch.Record{Value: []byte(v), Timestamp: now}
		if key != "" {
			recs[i].Key = []byte(key)
		}
	}
	opts := recordbatch.BuildOptions{}
	if pid >= 0 {
		opts = recordbatch.BuildOptions{Idempotent: true, ProducerID: pid, BaseSequence: seq}
	}
	b, err := recordbatch.Build(opts, recs)
	if err != nil {
		t.Fatalf("build batch: %v", err)
	}
	return b
}

// produce sends one Produce request, bounded by rpcTimeout so a paused
// node cannot hang the caller.
func produce(ctx context.Context, cl storagev1connect.StorageServiceClient, topic string, partition int32, epoch int32, acks commonv1.Acks, timeout time.Duration, batch []byte) (*storagev1.ProduceResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	resp, err := cl.Produce(ctx, connect.NewRequest(&storagev1.ProduceRequest{
		Topic: topic, Partition: partition, Acks: acks, LeaderEpoch: epoch,
		TimeoutMs: int32(timeout / time.Millisecond), Records: batch,
	}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// produceToLeader sends batch to the partition's current leader with
// acks=all, following leader changes and retrying the same bytes on
// retriable errors until it is acknowledged or ctx ends. It returns the
// acknowledged base offset.
func produceToLeader(ctx context.Context, t testing.TB, c *harness.Cluster, topic string, partition int32, batch []byte) (int64, error) {
	resp, err := produceToLeaderResp(ctx, c, topic, partition, batch)
	if err != nil {
		return -1, err
	}
	return resp.GetBaseOffset(), nil
}

// produceToLeaderResp is produceToLeader returning the whole response.
func produceToLeaderResp(ctx context.Context, c *harness.Cluster, topic string, partition int32, batch []byte) (*storagev1.ProduceResponse, error) {
	var last error
	for {
		p, err := c.Partition(ctx, topic, partition)
		if err == nil && p.GetLeaderId() >= 0 {
			n := c.Storage(int(p.GetLeaderId()))
			resp, perr := produce(ctx, n.StorageClient(), topic, partition, p.GetLeaderEpoch(), commonv1.Acks_ACKS_ALL, 5*time.Second, batch)
			if perr == nil {
				return resp, nil
			}
			err = perr
			if !retriable(perr) {
				return nil, perr
			}
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// retriable reports whether a produce error is one a producer answers by
// refreshing metadata and sending the same batch again: leadership moved,
// the leader is not reachable, the ISR is (for now) too small, or the node
// the controller names as leader has not yet opened the partition (just
// after the topic is created, as in Kafka's UNKNOWN_TOPIC_OR_PARTITION).
func retriable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return apierr.DetailOf(err).GetReason() == commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled, connect.CodeUnknown:
		return true
	case connect.CodeFailedPrecondition, connect.CodeAborted:
		d := apierr.DetailOf(err)
		switch d.GetReason() {
		case commonv1.Reason_REASON_NOT_LEADER, commonv1.Reason_REASON_FENCED_LEADER_EPOCH:
			return true
		}
	}
	return false
}

// fetchBatches reads a partition from its current leader, from offset 0 up
// to the high watermark, in fetches of at most maxBytes (0: the server's
// default), and calls visit with each CRC-checked batch and the offset the
// fetch asked for. It fails the test on any error or on a fetch below the
// high watermark that returns no batch.
func fetchBatches(ctx context.Context, t testing.TB, c *harness.Cluster, topic string, partition int32, maxBytes int32, visit func(h recordbatch.Header, batch []byte, from int64)) {
	t.Helper()
	leader, epoch := c.Leader(ctx, topic, partition)
	cl := leader.StorageClient()
	next := int64(0)
	for {
		resp, err := cl.Fetch(ctx, connect.NewRequest(&storagev1.FetchRequest{
			Partitions: []*storagev1.FetchPartition{{Topic: topic, Partition: partition, FetchOffset: next, CurrentLeaderEpoch: epoch, MaxBytes: maxBytes}},
		}))
		if err != nil {
			t.Fatalf("fetch %s-%d at %d from %s: %v", topic, partition, next, leader.Name(), err)
		}
		r := resp.Msg.GetPartitions()[0]
		if r.GetError() != nil {
			t.Fatalf("fetch %s-%d at %d from %s: %v %v", topic, partition, next, leader.Name(), r.GetError().GetReason(), r.GetError().GetMessage())
		}
		if next >= r.GetHighWatermark() {
			return
		}
		it := recordbatch.NewIter(r.GetRecords(), true)
		from, got := next, false
		for {
			h, b, ok := it.Next()
			if !ok {
				break
			}
			visit(h, b, from)
			next, got = h.NextOffset(), true
		}
		if err := it.Err(); err != nil {
			t.Fatalf("fetched bytes of %s-%d: %v", topic, partition, err)
		}
		if !got {
			t.Fatalf("fetch %s-%d at %d below the high watermark %d returned no batch", topic, partition, next, r.GetHighWatermark())
		}
	}
}

// readPartition reads a partition from its current leader, from offset 0
// up to the high watermark, and returns every record with its offset.
func readPartition(ctx context.Context, t testing.TB, c *harness.Cluster, topic string, partition int32) []recordbatch.Record {
	t.Helper()
	var out []recordbatch.Record
	fetchBatches(ctx, t, c, topic, partition, 0, func(h recordbatch.Header, b []byte, from int64) {
		batch, err := recordbatch.Decode(b)
		if err != nil {
			t.Fatalf("decode batch at %d of %s-%d: %v", h.BaseOffset, topic, partition, err)
		}
		for _, rec := range batch.Records {
			if rec.Offset >= from {
				out = append(out, rec)
			}
		}
	})
	return out
}

// describeLog returns one node's view of its replica of a partition.
func describeLog(ctx context.Context, n *harness.Node, topic string, partition int32) (*storagev1.DescribeLogPartitionResult, error) {
	return describeLogWith(ctx, n.StorageClient(), topic, partition)
}

// describeLogWith asks the storage node behind sc for its replica of a
// partition, within 5 seconds; a partition error is returned as an error.
func describeLogWith(ctx context.Context, sc storagev1connect.StorageServiceClient, topic string, partition int32) (*storagev1.DescribeLogPartitionResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := sc.DescribeLog(ctx, connect.NewRequest(&storagev1.DescribeLogRequest{
		Partitions: []*commonv1.TopicPartition{{Topic: topic, Partition: partition}},
	}))
	if err != nil {
		return nil, err
	}
	r := resp.Msg.GetPartitions()[0]
	if r.GetError() != nil {
		return nil, fmt.Errorf("%v: %s", r.GetError().GetReason(), r.GetError().GetMessage())
	}
	return r, nil
}

// waitConverged waits until every replica of the partition reports the same
// log end offset and a high watermark equal to it (DescribeLog on each
// node), which holds once producers stop and followers have fetched
// everything and learned the final high watermark. It returns that offset.
func waitConverged(ctx context.Context, t testing.TB, c *harness.Cluster, topic string, partition int32) int64 {
	t.Helper()
	p := c.WaitPartition(ctx, topic, partition, "a leader and full ISR", harness.FullISR)
	var last string
	for {
		var ends []int64
		ok := true
		last = ""
		for _, id := range p.GetReplicas() {
			r, err := describeLog(ctx, c.Storage(int(id)), topic, partition)
			if err != nil {
				ok = false
				last += fmt.Sprintf(" node %d: %v;", id, err)
				continue
			}
			last += fmt.Sprintf(" node %d: epoch %d leo %d hw %d;", id, r.GetLeaderEpoch(), r.GetLogEndOffset(), r.GetHighWatermark())
			if r.GetHighWatermark() != r.GetLogEndOffset() {
				ok = false
			}
			ends = append(ends, r.GetLogEndOffset())
		}
		for _, e := range ends {
			if e != ends[0] {
				ok = false
			}
		}
		if ok && len(ends) > 0 {
			return ends[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s-%d: replicas did not converge: %v;%s", topic, partition, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// replicaBytes opens one replica's partition directory of a stopped node
// with partlog (recovery included) and returns its log start offset, end
// offset and every stored batch byte in offset order.
func replicaBytes(t testing.TB, n *harness.Node, topic string, partition int32) (start, end int64, data []byte) {
	t.Helper()
	dir := filepath.Join(n.DataDir, fmt.Sprintf("%s-%d", topic, partition))
	l, err := partlog.Open(dir, partlog.Config{RetentionAge: -1, CheckpointInterval: -1})
	if err != nil {
		t.Fatalf("open %s replica %s: %v", n.Name(), dir, err)
	}
	defer l.Close()
	start, end = l.LogStartOffset(), l.LogEndOffset()
	for off := start; off < end; {
		res, err := l.Read(off, 1<<20, end)
		if err != nil {
			t.Fatalf("read %s replica at %d: %v", n.Name(), off, err)
		}
		if len(res.Batches) == 0 {
			t.Fatalf("read %s replica at %d (end %d): no batch", n.Name(), off, end)
		}
		data = append(data, res.Batches...)
		off = res.NextOffset
	}
	return start, end, data
}

// checkReplicasIdentical kills every storage node and compares, byte for
// byte, the on-disk log of every replica of each partition of topic (as the
// controller places them): same log start, same end, same stored batches,
// leader epochs and offsets included. Call it last, after waitConverged.
func checkReplicasIdentical(ctx context.Context, t testing.TB, c *harness.Cluster, topic string) {
	t.Helper()
	d, err := c.Describe(ctx, topic)
	if err != nil {
		t.Fatalf("describe %s: %v", topic, err)
	}
	for _, n := range c.StorageNodes() {
		n.Kill()
	}
	for _, p := range d.GetPartitions() {
		var ref []byte
		var refName string
		var refStart, refEnd int64
		for i, id := range p.GetReplicas() {
			n := c.Storage(int(id))
			start, end, data := replicaBytes(t, n, topic, p.GetPartition())
			if i == 0 {
				ref, refName, refStart, refEnd = data, n.Name(), start, end
				continue
			}
			if start != refStart || end != refEnd || !bytes.Equal(data, ref) {
				t.Errorf("%s-%d: %s holds offsets [%d,%d) in %d bytes, %s holds [%d,%d) in %d bytes; first difference at byte %d",
					topic, p.GetPartition(), n.Name(), start, end, len(data), refName, refStart, refEnd, len(ref), firstDiff(data, ref))
			}
		}
		t.Logf("%s-%d: %d replicas compared: offsets [%d,%d), %d bytes", topic, p.GetPartition(), len(p.GetReplicas()), refStart, refEnd, len(ref))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
