package topicconfig

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// The contract keys (docs/contracts.md) must stay known under these names.
func TestContractKeysAreKnown(t *testing.T) {
	for _, k := range []string{
		"retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "min.insync.replicas",
		"cleanup.policy", "remote.storage.enable", "local.retention.ms", "local.retention.bytes",
		"unclean.leader.election.enable", "compression.type", "max.message.bytes",
		"flush.messages", "flush.ms",
		"delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms",
		"min.cleanable.dirty.ratio", "segment.jitter.ms",
	} {
		if !Known(k) {
			t.Errorf("%s is not known", k)
		}
	}
}

// Every topic config key of Kafka 4.x is accepted (TopicConfig and
// LogConfig's CONFIG definitions), and the keys 4.0 removed are refused.
func TestKafkaKeys(t *testing.T) {
	kafka := []string{
		"cleanup.policy", "compression.type", "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
		"delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
		"follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
		"local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
		"message.timestamp.after.max.ms", "message.timestamp.before.max.ms", "message.timestamp.type",
		"min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
		"remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable",
		"retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
		"unclean.leader.election.enable",
	}
	for _, k := range kafka {
		if !Known(k) {
			t.Errorf("Kafka's %s is not known", k)
		}
		if err := Validate(map[string]string{k: Default(k)}); err != nil {
			t.Errorf("the default of %s is refused: %v", k, err)
		}
	}
	if got := len(Keys()); got != len(kafka) {
		t.Errorf("%d keys, want Kafka's %d", got, len(kafka))
	}
	for _, k := range []string{"message.format.version", "message.timestamp.difference.max.ms", "message.downconversion.enable"} {
		if err := Validate(map[string]string{k: "1"}); err == nil || !strings.Contains(err.Error(), "unknown topic config key") {
			t.Errorf("%s (removed in Kafka 4.0): %v, want refused as unknown", k, err)
		}
	}
	for _, k := range []string{"preallocate", "index.interval.bytes", "segment.index.bytes", "compression.zstd.level"} {
		if want := k != "index.interval.bytes"; NoEffect(k) != want {
			t.Errorf("NoEffect(%s) = %v, want %v", k, NoEffect(k), want)
		}
	}
	if NoEffect(RetentionMs) || NoEffect(MessageTimestampType) || NoEffect("no.such.key") {
		t.Error("NoEffect is true for a key that has an effect")
	}
}

// docs/contracts.md lists every key, and docs/kafka.md every key that
// has no effect here.
func TestKeysAreDocumented(t *testing.T) {
	contracts, err := os.ReadFile("../../docs/contracts.md")
	if err != nil {
		t.Fatal(err)
	}
	kafka, err := os.ReadFile("../../docs/kafka.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		if !strings.Contains(string(contracts), "| `"+k+"` |") {
			t.Errorf("docs/contracts.md does not list %s in its table", k)
		}
		if NoEffect(k) && !strings.Contains(string(kafka), "`"+k+"`") {
			t.Errorf("docs/kafka.md does not say that %s has no effect", k)
		}
	}
}

// The cleaner's keys carry Kafka's defaults (LogConfig).
func TestCleanerDefaults(t *testing.T) {
	for k, want := range map[string]string{
		DeleteRetentionMs:      "86400000",
		MinCompactionLagMs:     "0",
		MaxCompactionLagMs:     "9223372036854775807",
		MinCleanableDirtyRatio: "0.5",
		SegmentJitterMs:        "0",
	} {
		if got := Default(k); got != want {
			t.Errorf("Default(%s) = %q, want %q", k, got, want)
		}
	}
	e := Effective(nil, 3)
	if Int64(e, DeleteRetentionMs, 0) != DefaultDeleteRetentionMs || Int64(e, MaxCompactionLagMs, 0) != math.MaxInt64 ||
		Float64(e, MinCleanableDirtyRatio, 0) != DefaultMinCleanableDirtyRatio {
		t.Fatalf("effective cleaner configs: %v", e)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		in   map[string]string
		want string // "" for valid, else a substring of the error
	}{
		{nil, ""},
		{map[string]string{"retention.ms": "-1", "cleanup.policy": "compact,delete"}, ""},
		{map[string]string{"local.retention.bytes": "-2", "flush.messages": "1", "max.message.bytes": "0"}, ""},
		{map[string]string{"retention.ms": "-2"}, `topic config retention.ms="-2": must be >= -1`},
		{map[string]string{"segment.bytes": "1023"}, "must be >= 1024"},
		{map[string]string{"retention.ms": " 1000 "}, ""},
		{map[string]string{"segment.ms": "x"}, "not an integer"},
		{map[string]string{"compression.type": "brotli"}, "must be one of producer, uncompressed, gzip, snappy, lz4, zstd"},
		{map[string]string{"remote.storage.enable": "yes"}, "must be one of true, false"},
		{map[string]string{"no.such.key": "1"}, `unknown topic config key "no.such.key"`},
		// The first bad key in key order is named.
		{map[string]string{"segment.ms": "0", "min.insync.replicas": "0"}, "min.insync.replicas"},
		{map[string]string{DeleteRetentionMs: "0", MinCompactionLagMs: "0", MaxCompactionLagMs: "1", SegmentJitterMs: "0"}, ""},
		{map[string]string{DeleteRetentionMs: "-1"}, "must be >= 0"},
		{map[string]string{MinCompactionLagMs: "-1"}, "must be >= 0"},
		{map[string]string{MaxCompactionLagMs: "0"}, "must be >= 1"},
		{map[string]string{SegmentJitterMs: "-1"}, "must be >= 0"},
		{map[string]string{MaxCompactionLagMs: "9223372036854775808"}, "not an integer"},
		{map[string]string{MinCleanableDirtyRatio: "0"}, ""},
		{map[string]string{MinCleanableDirtyRatio: "1"}, ""},
		{map[string]string{MinCleanableDirtyRatio: "0.25"}, ""},
		{map[string]string{MinCleanableDirtyRatio: "1.01"}, "must be between 0 and 1"},
		{map[string]string{MinCleanableDirtyRatio: "-0.1"}, "must be between 0 and 1"},
		{map[string]string{MinCleanableDirtyRatio: "NaN"}, "not a number"},
		{map[string]string{MinCleanableDirtyRatio: "half"}, "not a number"},
		// cleanup.policy is a list, as Kafka's LIST type parses it.
		{map[string]string{CleanupPolicy: "compact, delete"}, ""},
		{map[string]string{CleanupPolicy: ""}, ""},
		{map[string]string{CleanupPolicy: "compact,none"}, "must be a comma-separated list of delete, compact"},
		// INT keys hold 32 bits.
		{map[string]string{MaxMessageBytes: "2147483647"}, ""},
		{map[string]string{MaxMessageBytes: "2147483648"}, "not a 32-bit integer"},
		{map[string]string{SegmentBytes: "4294967296"}, "not a 32-bit integer"},
		{map[string]string{IndexIntervalBytes: "-1"}, "must be >= 0"},
		{map[string]string{SegmentIndexBytes: "3"}, "must be >= 4"},
		// Timestamps.
		{map[string]string{MessageTimestampType: "LogAppendTime", MessageTimestampBeforeMaxMs: "0", MessageTimestampAfterMaxMs: "9223372036854775807"}, ""},
		{map[string]string{MessageTimestampType: "logappendtime"}, "must be one of CreateTime, LogAppendTime"},
		{map[string]string{MessageTimestampAfterMaxMs: "-1"}, "must be >= 0"},
		// Codec levels (KIP-390).
		{map[string]string{CompressionGzipLevel: "-1", CompressionLz4Level: "17", CompressionZstdLevel: "-131072"}, ""},
		{map[string]string{CompressionGzipLevel: "0"}, "must be -1 or between 1 and 9"},
		{map[string]string{CompressionLz4Level: "18"}, "must be between 1 and 17"},
		{map[string]string{CompressionZstdLevel: "23"}, "must be between -131072 and 22"},
		// Throttled replica lists.
		{map[string]string{LeaderReplicationThrottledReplicas: "*", FollowerReplicationThrottledReplicas: "0:1, 1:2"}, ""},
		{map[string]string{LeaderReplicationThrottledReplicas: "0-1"}, "must be * or a list of partitionId:brokerId entries"},
		{map[string]string{Preallocate: "yes"}, "must be one of true, false"},
	}
	for _, c := range cases {
		err := Validate(c.in)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Validate(%v) = %v, want nil", c.in, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Validate(%v) = %v, want %q", c.in, err, c.want)
		}
	}
}

func TestEffective(t *testing.T) {
	e := Effective(map[string]string{"retention.ms": "1000"}, 3)
	if e[RetentionMs] != "1000" || e[MinInsyncReplicas] != "2" || e[CleanupPolicy] != "delete" || len(e) != len(Keys()) {
		t.Fatalf("Effective = %v", e)
	}
	if Int64(e, RetentionBytes, 0) != -1 || Default(RetentionMs) != "604800000" {
		t.Fatalf("defaults: retention.bytes=%s retention.ms=%s", e[RetentionBytes], Default(RetentionMs))
	}
	if got := Effective(nil, 1)[MinInsyncReplicas]; got != "1" {
		t.Fatalf("min.insync.replicas for RF 1 = %s, want 1", got)
	}
	if got := Effective(nil, 0)[MinInsyncReplicas]; got != "2" {
		t.Fatalf("min.insync.replicas for RF 0 = %s, want 2", got)
	}
	if got := Effective(map[string]string{"min.insync.replicas": "3"}, 1)[MinInsyncReplicas]; got != "3" {
		t.Fatalf("override lost: %s", got)
	}
}

func TestInt64(t *testing.T) {
	cfg := map[string]string{"a": "12", "b": "x", "c": "", "max": "9223372036854775807",
		"over": "9223372036854775808", "under": "-9223372036854775809", "huge": "99999999999999999999999"}
	for k, want := range map[string]int64{"a": 12, "b": 7, "c": 7, "missing": 7,
		"max": math.MaxInt64, "over": math.MaxInt64, "under": math.MinInt64, "huge": math.MaxInt64} {
		if got := Int64(cfg, k, 7); got != want {
			t.Errorf("Int64(%s) = %d, want %d", k, got, want)
		}
	}
}

func TestFloat64(t *testing.T) {
	cfg := map[string]string{"a": "0.25", "b": "x", "nan": "NaN", "one": "1"}
	for k, want := range map[string]float64{"a": 0.25, "b": 0.5, "nan": 0.5, "one": 1, "missing": 0.5} {
		if got := Float64(cfg, k, 0.5); got != want {
			t.Errorf("Float64(%s) = %g, want %g", k, got, want)
		}
	}
}

// Millisecond counts saturate instead of wrapping: 18446744073710 ms is
// a value Kafka accepts that once wrapped to under a millisecond.
func TestMillisSaturates(t *testing.T) {
	const most = math.MaxInt64 / int64(time.Millisecond) // 9223372036854
	cases := []struct {
		ms   int64
		want time.Duration
	}{
		{-1, -time.Millisecond},
		{0, 0},
		{1000, time.Second},
		{most, time.Duration(most) * time.Millisecond},
		{most + 1, math.MaxInt64},
		{18446744073710, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64},
		{-most - 1, math.MinInt64},
		{math.MinInt64, math.MinInt64},
	}
	for _, c := range cases {
		if got := Millis(c.ms); got != c.want {
			t.Errorf("Millis(%d) = %d, want %d", c.ms, got, c.want)
		}
	}
	cfg := map[string]string{RetentionMs: "18446744073710"}
	if got := Duration(cfg, RetentionMs, 0); got != math.MaxInt64 {
		t.Errorf("Duration(retention.ms=18446744073710) = %v, want the largest Duration", got)
	}
	if got := Duration(nil, RetentionMs, DefaultRetentionMs); got != 7*24*time.Hour {
		t.Errorf("Duration default = %v", got)
	}
}

func TestCleanupPolicy(t *testing.T) {
	cases := []struct {
		in           string
		compact, del bool
	}{
		{"delete", false, true},
		{"compact", true, false},
		{"compact,delete", true, true},
		{"delete,compact", true, true},
		{" compact , delete ", true, true},
		{"", false, false},
	}
	for _, c := range cases {
		if compact, del := ParseCleanupPolicy(c.in); compact != c.compact || del != c.del {
			t.Errorf("ParseCleanupPolicy(%q) = %v, %v; want %v, %v", c.in, compact, del, c.compact, c.del)
		}
	}
	if compact, del := Cleanup(nil); compact || !del {
		t.Errorf("Cleanup(unset) = %v, %v; want delete only", compact, del)
	}
	if compact, del := Cleanup(map[string]string{CleanupPolicy: "compact"}); !compact || del {
		t.Errorf("Cleanup(compact) = %v, %v", compact, del)
	}
}

func TestRetentionByPolicy(t *testing.T) {
	cases := []struct {
		cfg       map[string]string
		ms, bytes int64
	}{
		{nil, DefaultRetentionMs, -1},
		{map[string]string{RetentionMs: "5", RetentionBytes: "6"}, 5, 6},
		{map[string]string{CleanupPolicy: "delete", RetentionMs: "5", RetentionBytes: "6"}, 5, 6},
		{map[string]string{CleanupPolicy: "compact", RetentionMs: "5", RetentionBytes: "6"}, -1, -1},
		{map[string]string{CleanupPolicy: "compact"}, -1, -1},
		{map[string]string{CleanupPolicy: "compact,delete", RetentionMs: "5", RetentionBytes: "6"}, 5, 6},
		{map[string]string{CleanupPolicy: "delete,compact", RetentionMs: "9223372036854775807"}, math.MaxInt64, -1},
	}
	for _, c := range cases {
		if ms, bytes := Retention(c.cfg); ms != c.ms || bytes != c.bytes {
			t.Errorf("Retention(%v) = %d, %d; want %d, %d", c.cfg, ms, bytes, c.ms, c.bytes)
		}
	}
}
