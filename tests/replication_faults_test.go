package tests

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/lib/tlsconfig"
	"github.com/strata-mq/strata/tests/harness"
)

// keyProducer is one producer goroutine of TestAcksAllSurvivesLeaderKill:
// an idempotent producer writing one key to one partition, one batch of
// batchRecords records in flight at a time.
type keyProducer struct {
	key       string
	partition int32
	pid       int64

	acked  int            // records acknowledged: sequences 0..acked-1
	sent   int            // records ever sent: acked, or acked+batchRecords if the last batch was never acknowledged
	acks   []keyAck       // one per acknowledged batch
	errs   map[string]int // retried errors by kind, for the log
	failed error          // a non-retriable error, which fails the test

	// Read by the test while run goes on.
	batches atomic.Int64 // batches acknowledged so far
	ended   atomic.Bool  // run has returned; failed is set before
}

// keyAck is one acknowledged batch.
type keyAck struct {
	seq    int   // first sequence number in the batch
	offset int64 // acknowledged base offset
}

const batchRecords = 4

// run produces until stop closes, then returns. Each batch holds records
// "key/seq" for the next batchRecords sequences, is idempotent (producer
// pid, epoch 0, base sequence = first seq), and is sent again, same bytes,
// after every retriable error and leader change until it is acknowledged;
// only then is the next batch built. Once stop is closed the current batch
// gets no further attempt.
func (kp *keyProducer) run(ctx context.Context, t *testing.T, c *harness.Cluster, topic string, stop <-chan struct{}) {
	defer kp.ended.Store(true)
	kp.errs = map[string]int{}
	for {
		select {
		case <-stop:
			return
		default:
		}
		values := make([]string, batchRecords)
		for i := range values {
			values[i] = fmt.Sprintf("%s/%d", kp.key, kp.acked+i)
		}
		batch := textBatch(t, kp.key, values, kp.pid, int32(kp.acked))
		kp.sent = kp.acked + batchRecords
		for {
			p, err := c.Partition(ctx, topic, kp.partition)
			if err == nil && p.GetLeaderId() >= 0 {
				leader := c.Storage(int(p.GetLeaderId()))
				var resp *produceAck
				resp, err = produceAcked(ctx, leader, topic, kp.partition, p.GetLeaderEpoch(), batch)
				if err == nil {
					kp.acks = append(kp.acks, keyAck{seq: kp.acked, offset: resp.offset})
					kp.acked += batchRecords
					kp.batches.Add(1)
					break
				}
				if !retriable(err) {
					kp.failed = fmt.Errorf("produce %s seq %d to %s: %s", kp.key, kp.acked, leader.Name(), describeErr(err))
					return
				}
			}
			kind := "metadata"
			if err != nil {
				kind = connect.CodeOf(err).String()
				if d := apierr.DetailOf(err); d != nil {
					kind += "/" + d.GetReason().String()
				}
			}
			kp.errs[kind]++
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

type produceAck struct{ offset int64 }

func produceAcked(ctx context.Context, n *harness.Node, topic string, partition, epoch int32, batch []byte) (*produceAck, error) {
	resp, err := produce(ctx, n.StorageClient(), topic, partition, epoch, commonv1.Acks_ACKS_ALL, 5*time.Second, batch)
	if err != nil {
		return nil, err
	}
	return &produceAck{offset: resp.GetBaseOffset()}, nil
}

// waitProgress waits until every producer has had at least n more
// batches acknowledged than when it was called, and fails the test if one
// of them stops (a non-retriable error) or the timeout passes first.
func waitProgress(t *testing.T, producers []*keyProducer, n int64, timeout time.Duration, what string) {
	t.Helper()
	from := make([]int64, len(producers))
	for i, kp := range producers {
		from[i] = kp.batches.Load()
	}
	testwait.Until(t, timeout, fmt.Sprintf("every producer to have %d more batches acknowledged %s", n, what), func() error {
		var behind []string
		for i, kp := range producers {
			if kp.ended.Load() {
				t.Fatalf("producer %s stopped: %v", kp.key, kp.failed)
			}
			if got := kp.batches.Load() - from[i]; got < n {
				behind = append(behind, fmt.Sprintf("%s %d", kp.key, got))
			}
		}
		if len(behind) > 0 {
			return fmt.Errorf("batches acknowledged since: %s", strings.Join(behind, ", "))
		}
		return nil
	})
}

// TestAcksAllSurvivesLeaderKill proves that no acks=all write is lost or
// reordered when a partition leader is SIGKILLed under load and later
// restarted. One controller, three storage nodes, a topic of 3 partitions
// with RF 3 and min.insync.replicas 2. Six idempotent producers (producer
// ids from AllocateProducerIds) each own one key on one partition (two
// keys per partition) and write records whose value is "key/seq", seq
// counting 0, 1, 2, ... per key, in batches of 4 with one batch in flight;
// a batch is retried, same bytes, through leader changes until it is
// acknowledged. Once every producer has 3 batches acknowledged the leader
// of partition 0 is killed; once each has 3 more it is restarted; the
// producers stop once it is back in every ISR and each has 3 more again.
// After the producers stop and every partition has a
// full ISR and converged replicas, the test reads each partition from its
// leader from offset 0 to the high watermark and asserts, per key:
//
//   - the sequence numbers present are exactly 0, 1, ..., m-1, in log order:
//     no gap, no duplicate, no reordering (idempotence removes the
//     duplicates a retry could otherwise leave), every record on the
//     key's partition;
//   - m is either the number of acknowledged records or, when the producer
//     stopped with a batch sent but unacknowledged, that plus the batch
//     (the unacknowledged batch may or may not have been committed);
//   - every acknowledged batch sits at the base offset its acknowledgement
//     gave;
//
// and finally that the three replicas of every partition hold
// byte-identical logs on disk (read with partlog after the nodes are
// killed). It runs on a plain cluster and on a secure one (the test's
// calls are the admin's; producer ids are asked for as the gateway, since
// the controller hands them to services only).
func TestAcksAllSurvivesLeaderKill(t *testing.T) {
	t.Parallel()
	plainAndSecure(t, testAcksAllSurvivesLeaderKill)
}

func testAcksAllSurvivesLeaderKill(t *testing.T, secure bool) {
	// Race: the kill and the failover it forces are where the storage
	// nodes' and controllers' unusual interleavings are.
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 3, Secure: secure, Race: true})
	ctx := harness.Deadline(t, 150*time.Second)
	const topic = "orders"
	const partitions = 3
	c.CreateTopic(ctx, topic, partitions, 3, map[string]string{"min.insync.replicas": "2"})
	c.WaitFullISR(ctx, topic, partitions)
	rc := checkReplication(t, c, topic, partitions)

	ctl := c.Ctl()
	if secure {
		ctl = controllerv1connect.NewControllerServiceClient(c.HTTPClientAs(c.ServiceCert(tlsconfig.RoleGateway, "1")), c.Controller(1).URL)
	}
	ids, err := ctl.AllocateProducerIds(ctx, connect.NewRequest(&controllerv1.AllocateProducerIdsRequest{Requester: t.Name(), Count: 6}))
	if err != nil {
		t.Fatalf("allocate producer ids: %v", err)
	}
	var producers []*keyProducer
	for i := range 6 {
		producers = append(producers, &keyProducer{
			key: fmt.Sprintf("key-%d", i), partition: int32(i % partitions), pid: ids.Msg.GetFirstProducerId() + int64(i),
		})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, kp := range producers {
		wg.Go(func() { kp.run(ctx, t, c, topic, stop) })
	}
	// Each phase lasts until every producer has made progress in it, not
	// for a fixed time: on a loaded machine a fixed time may hold none.
	waitProgress(t, producers, 3, 60*time.Second, "before the kill")
	victim, epoch := c.Leader(ctx, topic, 0)
	victim.Kill()
	moved := c.WaitPartition(harness.Deadline(t, 30*time.Second), topic, 0, "a new leader",
		func(p *commonv1.PartitionMetadata) bool { return p.GetLeaderId() >= 0 && p.GetLeaderEpoch() > epoch })
	t.Logf("partition 0 after killing its leader %s: %s", victim.Name(), harness.FormatPartition(moved))
	waitProgress(t, producers, 3, 60*time.Second, "with the leader killed")
	victim.Restart()
	c.WaitFullISR(harness.Deadline(t, 60*time.Second), topic, partitions)
	waitProgress(t, producers, 3, 60*time.Second, "after the restarted node rejoined every ISR")
	close(stop)
	wg.Wait()

	for _, kp := range producers {
		if kp.failed != nil {
			t.Errorf("producer %s: %v", kp.key, kp.failed)
		}
		t.Logf("producer %s on partition %d: %d records acknowledged in %d batches, %d sent; retried errors %v",
			kp.key, kp.partition, kp.acked, len(kp.acks), kp.sent, kp.errs)
		if kp.acked == 0 {
			t.Errorf("producer %s had nothing acknowledged", kp.key)
		}
		for _, a := range kp.acks {
			for i := range batchRecords {
				rc.ack(kp.partition, a.offset+int64(i), fmt.Sprintf("%s/%d", kp.key, a.seq+i))
			}
		}
	}

	for p := range int32(partitions) {
		waitConverged(harness.Deadline(t, 30*time.Second), t, c, topic, p)
	}
	logs := make([][]recordbatch.Record, partitions)
	for p := range int32(partitions) {
		logs[p] = readPartition(ctx, t, c, topic, p)
	}
	for _, kp := range producers {
		checkKey(t, kp, logs)
	}
	rc.finish(ctx)
	checkReplicasIdentical(ctx, t, c, topic)
}

// checkKey checks one producer's records in the final logs; see
// TestAcksAllSurvivesLeaderKill.
func checkKey(t *testing.T, kp *keyProducer, logs [][]recordbatch.Record) {
	t.Helper()
	var seqs []int
	byOffset := map[int64]int{}
	for p, recs := range logs {
		for _, r := range recs {
			if string(r.Key) != kp.key {
				continue
			}
			if int32(p) != kp.partition {
				t.Errorf("key %s: record at offset %d on partition %d, want only partition %d", kp.key, r.Offset, p, kp.partition)
				continue
			}
			k, s, ok := strings.Cut(string(r.Value), "/")
			seq, err := strconv.Atoi(s)
			if !ok || k != kp.key || err != nil {
				t.Errorf("key %s: malformed value %q at offset %d", kp.key, r.Value, r.Offset)
				continue
			}
			seqs = append(seqs, seq)
			byOffset[r.Offset] = seq
		}
	}
	for i, s := range seqs {
		if s != i {
			t.Errorf("key %s: log holds sequences %s; want exactly 0..%d in order (first wrong at position %d)",
				kp.key, summarize(seqs), len(seqs)-1, i)
			break
		}
	}
	if m := len(seqs); m != kp.acked && m != kp.sent {
		t.Errorf("key %s: log holds %d records; %d were acknowledged and %d sent", kp.key, m, kp.acked, kp.sent)
	}
	for _, a := range kp.acks {
		if got, ok := byOffset[a.offset]; !ok || got != a.seq {
			t.Errorf("key %s: batch from sequence %d acknowledged at offset %d, which holds sequence %d (present %v)",
				kp.key, a.seq, a.offset, got, ok)
		}
	}
}

// summarize renders a sequence list compactly: runs as a-b.
func summarize(seqs []int) string {
	var b strings.Builder
	for i := 0; i < len(seqs); {
		j := i
		for j+1 < len(seqs) && seqs[j+1] == seqs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(",")
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", seqs[i], seqs[j])
		} else {
			fmt.Fprintf(&b, "%d", seqs[i])
		}
		i = j + 1
	}
	return b.String()
}

// TestPausedLeaderIsFenced proves that a leader paused past its lease is
// fenced once it resumes and that its divergent tail is cut off. One
// partition, RF 3, min.insync.replicas 2. Steps and assertions:
//
//  1. Records are written with acks=all through leader L at epoch E.
//  2. Both followers are paused (SIGSTOP, waited on until they are still);
//     L then acknowledges tail records with acks=1. L is paused and the
//     followers resumed. A follower's replicate long poll may have been
//     parked at L when the follower was paused, and L answers it as soon as
//     the first tail record lands, so the followers may hold a prefix of the
//     tail. What was replicated is therefore not assumed: it is read from
//     the replicas.
//  3. The controller must elect a new leader N at an epoch above E when L's
//     lease expires (within 30 s). N's log end once it leads (DescribeLog on
//     N) splits the tail: records below it reached N before L was paused;
//     the rest is L's divergent tail. acks=all writes through N succeed, and
//     the first lands at exactly that log end (N appends nothing of L's once
//     it leads).
//  4. Producers send acks=all requests to L at epoch E, then L is resumed
//     (SIGCONT) while they are in flight and they keep sending for a few
//     seconds. Any of those L acknowledges must be in the final log at the
//     acknowledged offset (in practice L refuses them all).
//  5. After L is back in the ISR and the replicas converge: every acks=all
//     record of steps 1 and 3 is at its acknowledged offset; the tail
//     records N held are at their offsets; L's divergent tail is gone (L
//     truncated it, as acks=1 allows); and the three replicas' logs are
//     byte-identical on disk.
func TestPausedLeaderIsFenced(t *testing.T) {
	t.Parallel()
	// A lag time far above how long the followers stay paused, so the old
	// leader never shrinks its ISR to itself (which would leave the
	// partition offline once it is paused). No step here waits for an ISR
	// shrink.
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 3, ReplicaLagTime: 30 * time.Second, Race: true})
	ctx := harness.Deadline(t, 150*time.Second)
	const topic = "zombie"
	c.CreateTopic(ctx, topic, 1, 3, map[string]string{"min.insync.replicas": "2"})
	p := c.WaitPartition(ctx, topic, 0, "a leader and full ISR", harness.FullISR)
	rc := checkReplication(t, c, topic, 1)
	old, oldEpoch := c.Storage(int(p.GetLeaderId())), p.GetLeaderEpoch()
	var followers []*harness.Node
	for _, id := range p.GetReplicas() {
		if id != p.GetLeaderId() {
			followers = append(followers, c.Storage(int(id)))
		}
	}

	// 1. Committed records.
	baseValues := seqValues("base", 10)
	baseOffs := rc.produceValues(ctx, t, 0, baseValues...)

	// 2. A tail the old leader acknowledges with acks=1 while both
	// followers are paused, then pause it and resume them.
	for _, f := range followers {
		f.Stop()
	}
	tailValues := seqValues("tail", 5)
	var tailOffs []int64
	for _, v := range tailValues {
		resp, err := produce(ctx, old.StorageClient(), topic, 0, oldEpoch, commonv1.Acks_ACKS_LEADER, 2*time.Second,
			textBatch(t, "", []string{v}, -1, 0))
		if err != nil {
			t.Fatalf("acks=1 produce to %s: %v", old.Name(), describeErr(err))
		}
		tailOffs = append(tailOffs, resp.GetBaseOffset())
	}
	before, err := describeLog(ctx, old, topic, 0)
	if err != nil {
		t.Fatalf("describe log on %s: %v", old.Name(), err)
	}
	t.Logf("%s before its pause: log end %d, high watermark %d; followers' log ends as it last heard them: %s",
		old.Name(), before.GetLogEndOffset(), before.GetHighWatermark(), formatReplicaStates(before.GetReplicas()))
	old.Stop()
	for _, f := range followers {
		f.Continue()
	}

	// 3. A new leader. Its log end as it takes over decides which tail
	// records were replicated; then it takes acks=all writes.
	start := time.Now()
	np := c.WaitPartition(harness.Deadline(t, 30*time.Second), topic, 0, "a new leader after pausing the old one",
		func(p *commonv1.PartitionMetadata) bool {
			return p.GetLeaderId() >= 0 && p.GetLeaderId() != int32(old.ID) && p.GetLeaderEpoch() > oldEpoch
		})
	t.Logf("new leader %d after %v: %s", np.GetLeaderId(), time.Since(start).Round(time.Millisecond), harness.FormatPartition(np))
	newLeader := c.Storage(int(np.GetLeaderId()))
	var takeover *storagev1.DescribeLogPartitionResult
	testwait.Until(t, 20*time.Second, fmt.Sprintf("%s to report itself leader at epoch %d", newLeader.Name(), np.GetLeaderEpoch()), func() error {
		r, err := describeLog(ctx, newLeader, topic, 0)
		if err != nil {
			return err
		}
		if !r.GetLeader() || r.GetLeaderEpoch() != np.GetLeaderEpoch() {
			return fmt.Errorf("leader %v at epoch %d, log end %d", r.GetLeader(), r.GetLeaderEpoch(), r.GetLogEndOffset())
		}
		takeover = r
		return nil
	})
	takeoverEnd := takeover.GetLogEndOffset()
	for _, f := range followers {
		if r, err := describeLog(ctx, f, topic, 0); err == nil {
			t.Logf("%s after the takeover: leader %v epoch %d log end %d", f.Name(), r.GetLeader(), r.GetLeaderEpoch(), r.GetLogEndOffset())
		}
	}
	if takeoverEnd < int64(len(baseValues)) || takeoverEnd > before.GetLogEndOffset() {
		t.Fatalf("new leader %s took over at log end %d: below the %d acknowledged acks=all records or above the old leader's log end %d",
			newLeader.Name(), takeoverEnd, len(baseValues), before.GetLogEndOffset())
	}
	var divergent []string
	for i, off := range tailOffs {
		if off >= takeoverEnd {
			divergent = append(divergent, tailValues[i])
		}
	}
	t.Logf("new leader %s took over at log end %d: %d of the %d acks=1 tail records (offsets %v) reached it before the old leader was paused; %d are the old leader's divergent tail",
		newLeader.Name(), takeoverEnd, len(tailValues)-len(divergent), len(tailValues), tailOffs, len(divergent))
	if len(divergent) == 0 {
		t.Logf("no acks=1 tail record is divergent in this run: the followers' parked long polls carried the whole tail; " +
			"truncation is then shown by the old leader's appends after it resumed (if any) and the identical replicas")
	}
	newValues := seqValues("new", 5)
	newOffs := rc.produceValues(ctx, t, 0, newValues...)

	// 4. Zombie writes to the old leader at its old epoch, across SIGCONT.
	type zombieAck struct {
		value  string
		offset int64
	}
	var (
		mu         sync.Mutex
		zombieAcks []zombieAck
		outcomes   = map[string]int{}
		sent       atomic.Int32
	)
	zctx, zcancel := context.WithTimeout(ctx, 6*time.Second)
	defer zcancel()
	var wg sync.WaitGroup
	const zombies = 4
	for g := range zombies {
		wg.Go(func() {
			for i := 0; zctx.Err() == nil; i++ {
				v := fmt.Sprintf("zombie-%d-%d", g, i)
				sent.Add(1)
				resp, err := produce(zctx, old.StorageClient(), topic, 0, oldEpoch, commonv1.Acks_ACKS_ALL, 2*time.Second,
					textBatch(t, "", []string{v}, -1, 0))
				mu.Lock()
				if err == nil {
					zombieAcks = append(zombieAcks, zombieAck{v, resp.GetBaseOffset()})
					outcomes["acknowledged"]++
				} else {
					kind := connect.CodeOf(err).String()
					if d := apierr.DetailOf(err); d != nil {
						kind += "/" + d.GetReason().String()
					}
					outcomes[kind]++
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // pace the requests; this is a stream, not a flood
			}
		})
	}
	// The paused leader answers nothing, so each producer's first request
	// waits there; resume it once all of them are sent.
	testwait.Until(t, 10*time.Second, "every zombie producer to send a request to the paused leader", func() error {
		if n := sent.Load(); n < zombies {
			return fmt.Errorf("%d of %d sent", n, zombies)
		}
		return nil
	})
	old.Continue()
	wg.Wait()
	t.Logf("zombie produce outcomes at epoch %d: %v", oldEpoch, outcomes)

	// 5. Convergence and the final log.
	c.WaitPartition(harness.Deadline(t, 30*time.Second), topic, 0, "the old leader back in the ISR", harness.FullISR)
	end := waitConverged(harness.Deadline(t, 30*time.Second), t, c, topic, 0)
	records := readPartition(ctx, t, c, topic, 0)
	requireValuesAt(t, records, baseValues, baseOffs)
	requireValuesAt(t, records, newValues, newOffs)
	for _, z := range zombieAcks {
		requireValuesAt(t, records, []string{z.value}, []int64{z.offset})
		rc.ack(0, z.offset, z.value)
	}
	at := map[int64]string{}
	for _, r := range records {
		at[r.Offset] = string(r.Value)
		if slices.Contains(divergent, string(r.Value)) {
			t.Errorf("record %q, written with acks=1 to the old leader above the new leader's log end %d at its takeover, survived at offset %d",
				r.Value, takeoverEnd, r.Offset)
		}
	}
	for i, off := range tailOffs {
		if off < takeoverEnd {
			requireValuesAt(t, records, tailValues[i:i+1], tailOffs[i:i+1])
		}
	}
	if got := at[takeoverEnd]; got != newValues[0] {
		t.Errorf("offset %d, the new leader's log end when it took over, holds %q; want %q, the first record written through it",
			takeoverEnd, got, newValues[0])
	}
	if want := takeoverEnd + int64(len(newValues)+len(zombieAcks)); end < want {
		t.Errorf("final log ends at %d, below the %d records the new leader held or acknowledged", end, want)
	}
	t.Logf("old leader's tail was at offsets %v; final log: %d records, end offset %d", tailOffs, len(records), end)
	rc.finish(ctx)
	checkReplicasIdentical(ctx, t, c, topic)
}

// formatReplicaStates renders a leader's view of its followers for logs.
func formatReplicaStates(rs []*storagev1.ReplicaState) string {
	var b strings.Builder
	for _, r := range rs {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "node %d at %d", r.GetNodeId(), r.GetLogEndOffset())
	}
	return b.String()
}
