package server

import (
	"context"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/testwait"
)

// batchAt is one record with the given value and timestamp.
func batchAt(t *testing.T, value string, ts int64) []byte {
	t.Helper()
	b, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Value: []byte(value), Timestamp: ts}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tieredSingle is one storage node with tiering, a restartable tiering
// process, and a one-partition topic with one replica that the node leads.
type tieredSingle struct {
	t      *testing.T
	c      *testCluster
	tier   *tieringProcess
	n      *Node
	leader storagev1connect.StorageServiceClient
	topic  string
}

// newTieredSingle starts the node and the tiering process and creates the
// topic with remote.storage.enable=true, min.insync.replicas=1, 16 KiB
// segments and configs.
func newTieredSingle(t *testing.T, topic string, configs map[string]string) *tieredSingle {
	t.Helper()
	dir := t.TempDir()
	c := newCluster(t, 0, 5*time.Second)
	c.dirs[1] = dir
	tier := newTieringProcess(t, c.client)
	startTieredNode(c, 1, tier.url)
	all := map[string]string{"min.insync.replicas": "1", "segment.bytes": "16384", "remote.storage.enable": "true"}
	for k, v := range configs {
		all[k] = v
	}
	c.ctrl.SetTopic(&commonv1.TopicMetadata{
		Name: topic, TopicId: fmt.Sprintf("%08x-0000-4000-8000-000000000000", crc32.ChecksumIEEE([]byte(topic))), // tiering wants a UUID
		Partitions: []*commonv1.PartitionMetadata{{Partition: 0, LeaderId: 1, LeaderEpoch: 1, PartitionEpoch: 1,
			Replicas: []int32{1}, Isr: []int32{1}}},
		Configs: all,
	})
	n := c.node(1).node
	c.eventually("replica hosted", func() bool { r := n.replica(topic, 0); return r != nil && r.View().State.LeaderEpoch == 1 })
	return &tieredSingle{t: t, c: c, tier: tier, n: n, leader: c.storage(1), topic: topic}
}

// put produces one record with acks=all. The first produce of a new
// tiered log waits (NOT_LEADER) until the node has heard from the tier.
func (s *tieredSingle) put(value string, ts int64) {
	s.t.Helper()
	testwait.Until(s.t, 15*time.Second, fmt.Sprintf("produce %.20s to be acknowledged", value), func() error {
		_, err := produce(s.leader, s.topic, commonv1.Acks_ACKS_ALL, -1, batchAt(s.t, value, ts), 5*time.Second)
		if err != nil && reason(err) != commonv1.Reason_REASON_NOT_LEADER {
			s.t.Fatalf("produce %.20s: %v", value, err)
		}
		return err
	})
}

// TestTieredTopicRetentionKeepsUntieredSegments: a segment of a tiered
// topic is deleted locally only once the tier holds it. With the tier
// holding [0, T) and the local log starting at T (local retention 0), the
// tiering service is stopped and the local log grows past total retention
// (by bytes; by time, with old timestamps behind the tier's newer data).
// Ordinary retention must not delete the untiered segments: the local log
// still starts at or below T, so when tiering comes back it uploads them
// and the partition reads from 0 to its end without a gap.
func TestTieredTopicRetentionKeepsUntieredSegments(t *testing.T) {
	const segBytes = 16384
	val := strings.Repeat("v", 900) // 16 records per segment
	now := func() int64 { return time.Now().UnixMilli() }
	old := func() int64 { return time.Now().Add(-2 * time.Hour).UnixMilli() }
	for _, tc := range []struct {
		name    string
		configs map[string]string
		// late is the timestamp of the i-th record produced while
		// tiering is down.
		late func(i int) int64
	}{
		{"retention.bytes", map[string]string{"retention.bytes": strconv.Itoa(3 * segBytes), "local.retention.bytes": "0", "retention.ms": "-1"},
			func(int) int64 { return now() }},
		{"retention.ms", map[string]string{"retention.ms": "3600000", "local.retention.ms": "0"},
			func(i int) int64 {
				if i < 60 {
					return old() // expired, behind the tier's newer records
				}
				return now()
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTieredSingle(t, "kept", tc.configs)
			c, n, tier, topic := s.c, s.n, s.tier, s.topic
			var want []string
			put := func(v string, ts int64) {
				t.Helper()
				s.put(v, ts)
				want = append(want, v)
			}
			// 16 records fill a segment: the early ones fill four, the
			// first late one starts the fifth, so the tier ends where
			// the late records begin.
			for i := range 64 {
				put(fmt.Sprintf("early-%d-%s", i, val), now())
			}
			put(fmt.Sprintf("late-0-%s", val), tc.late(0))
			r := n.replica(topic, 0)
			var tieredEnd int64
			c.eventually("sealed segments tiered and deleted locally", func() bool {
				segs := r.Log().Segments()
				st, ok := n.tieredState(topic, 0)
				tieredEnd = st.end
				return ok && len(segs) == 1 && st.end == segs[0].BaseOffset && r.Log().LogStartOffset() == st.end
			})

			tier.kill()
			for i := 1; i < 100; i++ {
				put(fmt.Sprintf("late-%d-%s", i, val), tc.late(i))
			}
			n.retentionRound(context.Background())
			if start := r.Log().LogStartOffset(); start > tieredEnd {
				t.Fatalf("retention deleted untiered segments: the local log starts at %d, the tier ends at %d", start, tieredEnd)
			}

			tier.start()
			hw := r.Log().HighWatermark()
			c.eventually("every sealed segment tiered", func() bool {
				segs := r.Log().Segments()
				st, ok := n.tieredState(topic, 0)
				return ok && len(segs) > 0 && st.end == segs[len(segs)-1].BaseOffset && r.Log().LogStartOffset() <= st.end
			})
			if got := values(t, readAll(t, c, 1, topic, hw)); !slices.Equal(got, want) {
				t.Fatalf("read %d records from 0, want the %d produced", len(got), len(want))
			}
		})
	}
}

func TestLocalRetention(t *testing.T) {
	for _, tc := range []struct {
		cfg       map[string]string
		ms, bytes int64
	}{
		{map[string]string{}, 7 * 24 * 3600 * 1000, -1},
		{map[string]string{"local.retention.ms": "-2", "retention.ms": "5000", "retention.bytes": "100"}, 5000, 100},
		{map[string]string{"local.retention.ms": "0", "local.retention.bytes": "10", "retention.bytes": "100"}, 0, 10},
		{map[string]string{"local.retention.ms": "-1", "retention.ms": "-1"}, -1, -1},
		{map[string]string{"local.retention.ms": "-1", "retention.ms": "5000"}, 5000, -1},
		{map[string]string{"local.retention.ms": "9000", "retention.ms": "5000", "local.retention.bytes": "500", "retention.bytes": "100"}, 5000, 100},
		// A compacted topic has no total retention: its local data goes
		// only once tiered and past an explicit local retention.
		{map[string]string{"cleanup.policy": "compact", "retention.ms": "5000", "retention.bytes": "100"}, -1, -1},
		{map[string]string{"cleanup.policy": "compact", "retention.ms": "5000", "local.retention.ms": "9000", "local.retention.bytes": "500"}, 9000, 500},
		{map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "5000", "local.retention.ms": "9000"}, 5000, -1},
	} {
		if ms, bytes := localRetention(tc.cfg); ms != tc.ms || bytes != tc.bytes {
			t.Errorf("localRetention(%v) = %d, %d; want %d, %d", tc.cfg, ms, bytes, tc.ms, tc.bytes)
		}
	}
}

// TestFetchBelowLocalStartWhenTheTierCannotServe: a fetch below the local
// log start of a tiered topic that the tier cannot serve is never an
// OUT_OF_RANGE a consumer would move to the log start on and fetch again
// forever. With the tiering service down it is UNAVAILABLE (retriable); at
// an offset neither the tier nor local disk holds (a gap left by deleting
// local data before it was tiered) it is OUT_OF_RANGE whose range holds the
// offset, which the client reports as a gap.
func TestFetchBelowLocalStartWhenTheTierCannotServe(t *testing.T) {
	s := newTieredSingle(t, "gap", map[string]string{"local.retention.ms": "0"})
	c, n, tier, topic, leader := s.c, s.n, s.tier, s.topic, s.leader
	val := strings.Repeat("v", 900)
	for i := range 65 {
		s.put(fmt.Sprintf("%d-%s", i, val), time.Now().UnixMilli())
	}
	r := n.replica(topic, 0)
	c.eventually("offsets below 64 tiered and deleted locally", func() bool {
		st, ok := n.tieredState(topic, 0)
		return ok && st.end == 64 && r.Log().LogStartOffset() == 64
	})

	tier.kill()
	res := fetch(t, leader, topic, 10, 0)
	if code := res.GetError().GetCode(); code != commonv1.Code_CODE_UNAVAILABLE {
		t.Fatalf("fetch below the local start with the tier down: %v, want UNAVAILABLE", res.GetError())
	}

	// A gap: local data from 64 deleted without being tiered.
	for i := 65; i < 112; i++ {
		s.put(fmt.Sprintf("%d-%s", i, val), time.Now().UnixMilli())
	}
	if err := r.Log().DeleteRecordsBefore(96); err != nil {
		t.Fatal(err)
	}
	tier.start()
	if res := fetch(t, leader, topic, 10, 0); res.GetError() != nil || len(res.GetRecords()) == 0 {
		t.Fatalf("fetch from the tier: %v", res.GetError())
	}
	res = fetch(t, leader, topic, 70, 0)
	h := res.GetError().GetOffsetRange()
	if res.GetError().GetReason() != commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE || h == nil || h.GetLogStartOffset() > 70 || h.GetHighWatermark() < 70 {
		t.Fatalf("fetch in the gap: %v, want OUT_OF_RANGE with a range holding 70", res.GetError())
	}
	if !strings.Contains(res.GetError().GetMessage(), "missing") {
		t.Fatalf("gap message %q does not say the offset is missing", res.GetError().GetMessage())
	}
}

// TestSegmentsBelowTheTieredLogStartAreDone: once the tier's total
// retention has expired segments (the tier reports its log start past
// them, possibly with no object left), a replica's local copies of them
// are expired too: they are deleted whatever local retention says, the
// partition's log start is the tier's, and they are never uploaded again
// (Kafka moves the log start on remote deletion and deletes local
// segments below it). Local retention here keeps everything, and the tier
// is stopped so only the state given applies.
func TestSegmentsBelowTheTieredLogStartAreDone(t *testing.T) {
	s := newTieredSingle(t, "expired", map[string]string{"retention.ms": "-1", "local.retention.ms": "-1"})
	c, n, tier, topic := s.c, s.n, s.tier, s.topic
	val := strings.Repeat("v", 900)
	for i := range 65 {
		s.put(fmt.Sprintf("%d-%s", i, val), time.Now().UnixMilli())
	}
	r := n.replica(topic, 0)
	c.eventually("offsets below 64 tiered", func() bool {
		st, ok := n.tieredState(topic, 0)
		return ok && st.end == 64
	})
	tier.kill()
	if start := r.Log().LogStartOffset(); start != 0 {
		t.Fatalf("local log starts at %d before the tier expired anything, want 0", start)
	}

	// The tier expired every segment: it is empty and starts at 64.
	empty := tieredInfo{logStart: 64, end: 64}
	if err := n.deleteTieredLocal(r, empty); err != nil {
		t.Fatal(err)
	}
	if start := r.Log().LogStartOffset(); start != 64 {
		t.Fatalf("local log starts at %d after the tier expired [0, 64), want 64", start)
	}
	n.tier.mu.Lock()
	n.tier.state[tpKey{topic, 0}] = empty
	n.tier.mu.Unlock()
	if got := n.effectiveLogStart(r, r.Log().LogStartOffset()); got != 64 {
		t.Fatalf("log start %d, want the tier's 64", got)
	}
}

// TestDeleteRecordsOnATieredTopic: DeleteRecords at an offset the tier
// holds (the local log starts above it) raises the tier's delete-records
// offset first: a fetch below it is OUT_OF_RANGE with the log start at the
// offset, a fetch at it is served from the tier starting with the batch
// that holds it, ListOffsets earliest answers it, and the node's tier state
// reports it. DeleteRecords past the tier's end
// (into local data) moves the log start there, and nothing below is
// served from the tier.
func TestDeleteRecordsOnATieredTopic(t *testing.T) {
	s := newTieredSingle(t, "purged-tier", map[string]string{"local.retention.ms": "0"})
	c, n, topic, leader := s.c, s.n, s.topic, s.leader
	val := strings.Repeat("v", 900)
	for i := range 65 {
		s.put(fmt.Sprintf("%d-%s", i, val), time.Now().UnixMilli())
	}
	r := n.replica(topic, 0)
	c.eventually("offsets below 64 tiered and deleted locally", func() bool {
		st, ok := n.tieredState(topic, 0)
		return ok && st.end == 64 && r.Log().LogStartOffset() == 64
	})
	del := func(offset int64) *storagev1.DeleteRecordsPartitionResult {
		t.Helper()
		resp, err := leader.DeleteRecords(context.Background(), connect.NewRequest(&storagev1.DeleteRecordsRequest{TimeoutMs: 10000,
			Partitions: []*storagev1.DeleteRecordsPartition{{Topic: topic, Partition: 0, Offset: offset, CurrentLeaderEpoch: -1}}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetPartitions()[0]
	}
	earliest := func() int64 {
		t.Helper()
		resp, err := leader.ListOffsets(context.Background(), connect.NewRequest(&storagev1.ListOffsetsRequest{
			Partitions: []*storagev1.ListOffsetsPartition{{Topic: topic, Partition: 0, Spec: storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST, CurrentLeaderEpoch: -1}}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetPartitions()[0].GetOffset()
	}

	if res := del(30); res.GetError() != nil || res.GetLowWatermark() < 30 {
		t.Fatalf("delete below 30: %v, low watermark %d", res.GetError(), res.GetLowWatermark())
	}
	res := fetch(t, leader, topic, 10, 0)
	if h := res.GetError().GetOffsetRange(); res.GetError().GetReason() != commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE || h.GetLogStartOffset() != 30 {
		t.Fatalf("fetch at 10 after deleting below 30: %v, want OUT_OF_RANGE from 30", res.GetError())
	}
	res = fetch(t, leader, topic, 30, 0)
	if vs := values(t, res.GetRecords()); res.GetError() != nil || len(vs) == 0 || !strings.HasPrefix(vs[0], "30-") {
		t.Fatalf("fetch at 30 from the tier: %v, %d records", res.GetError(), len(vs))
	}
	if got := earliest(); got != 30 {
		t.Fatalf("earliest offset %d after deleting below 30, want 30", got)
	}
	if st, ok := n.tieredState(topic, 0); !ok || st.deleted != 30 || st.logStart != 30 {
		t.Fatalf("tier state %+v after deleting below 30", st)
	}

	// Past the tier's end, into local data.
	for i := 65; i < 80; i++ {
		s.put(fmt.Sprintf("%d-%s", i, val), time.Now().UnixMilli())
	}
	if res := del(70); res.GetError() != nil || res.GetLowWatermark() < 70 {
		t.Fatalf("delete below 70: %v, low watermark %d", res.GetError(), res.GetLowWatermark())
	}
	if got := earliest(); got != 70 {
		t.Fatalf("earliest offset %d after deleting below 70, want 70", got)
	}
	res = fetch(t, leader, topic, 40, 0)
	if h := res.GetError().GetOffsetRange(); res.GetError().GetReason() != commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE || h.GetLogStartOffset() != 70 {
		t.Fatalf("fetch at 40 after deleting below 70: %v, want OUT_OF_RANGE from 70", res.GetError())
	}
}

// TestTierRoundAnswerDoesNotLowerState: a tier round's answer read before
// this node's DeleteRecords (or an upload) finished can be stored after
// it; for the same topic it must not move the log start, the delete
// offset or the tiered end back, while an answer for a recreated topic of
// the same name replaces the old state whole.
func TestTierRoundAnswerDoesNotLowerState(t *testing.T) {
	known := tieredInfo{logStart: 70, end: 64, size: 100, deleted: 70, topicID: "a"}
	stale := tieredInfo{logStart: 30, end: 48, size: 90, deleted: 30, topicID: "a"}
	if got := stale.raisedBy(known); got.logStart != 70 || got.deleted != 70 || got.end != 64 || got.size != 90 {
		t.Fatalf("a stale answer for the same topic gave %+v, want log start 70, deleted 70, end 64", got)
	}
	newer := tieredInfo{logStart: 80, end: 96, deleted: 75, topicID: "a"}
	if got := newer.raisedBy(known); got != newer {
		t.Fatalf("a newer answer gave %+v, want it unchanged %+v", got, newer)
	}
	recreated := tieredInfo{logStart: -1, end: -1, topicID: "b"}
	if got := recreated.raisedBy(known); got != recreated {
		t.Fatalf("an answer for a recreated topic gave %+v, want it unchanged %+v", got, recreated)
	}
	if got := stale.raisedBy(tieredInfo{}); got != stale {
		t.Fatalf("a first answer gave %+v, want it unchanged", got)
	}
}
