// Package topicconfig is the table of topic config keys: their names
// (Kafka's where the meaning is the same), defaults and value checks. The
// controller validates overrides and computes effective configs with it;
// storage, tiering and the fakes read effective configs by its key names.
//
// The key names are a user-facing contract (docs/contracts.md): do not
// rename them.
package topicconfig

import (
	"fmt"
	"math"
	"sort"
	"strconv"
)

// Topic config keys accepted by the controller: every key of Kafka 4.x's
// topic config table (TopicConfig, LogConfig), with its meaning where it
// has one here. NoEffect tells the others apart.
const (
	RetentionMs                 = "retention.ms"
	RetentionBytes              = "retention.bytes"
	SegmentBytes                = "segment.bytes"
	SegmentMs                   = "segment.ms"
	MinInsyncReplicas           = "min.insync.replicas"
	CleanupPolicy               = "cleanup.policy"
	RemoteStorageEnable         = "remote.storage.enable"
	LocalRetentionMs            = "local.retention.ms"
	LocalRetentionBytes         = "local.retention.bytes"
	UncleanLeaderElectionEnable = "unclean.leader.election.enable"
	CompressionType             = "compression.type"
	MaxMessageBytes             = "max.message.bytes"
	FlushMessages               = "flush.messages"
	FlushMs                     = "flush.ms"

	// Keys of the log cleaner (key compaction), with Kafka's meanings.

	// DeleteRetentionMs is how long compaction keeps a tombstone.
	DeleteRetentionMs = "delete.retention.ms"
	// MinCompactionLagMs is the least age of a record before it may be
	// compacted away.
	MinCompactionLagMs = "min.compaction.lag.ms"
	// MaxCompactionLagMs is the most time a record may stay uncompacted,
	// whatever the dirty ratio.
	MaxCompactionLagMs = "max.compaction.lag.ms"
	// MinCleanableDirtyRatio is the share of uncleaned bytes in a log that
	// makes it worth cleaning (a double in [0, 1]).
	MinCleanableDirtyRatio = "min.cleanable.dirty.ratio"
	// SegmentJitterMs is the most random time subtracted from segment.ms so
	// that segments of many partitions do not roll at once.
	SegmentJitterMs = "segment.jitter.ms"

	// MessageTimestampType is CreateTime (the producer's timestamps) or
	// LogAppendTime (the leader stamps its clock on every batch).
	MessageTimestampType = "message.timestamp.type"
	// MessageTimestampBeforeMaxMs and MessageTimestampAfterMaxMs bound, with
	// CreateTime, how far a record's timestamp may lie before and after
	// the leader's clock (KIP-937).
	MessageTimestampBeforeMaxMs = "message.timestamp.before.max.ms"
	MessageTimestampAfterMaxMs  = "message.timestamp.after.max.ms"
	// IndexIntervalBytes is how many log bytes go between two entries of
	// the offset index.
	IndexIntervalBytes = "index.interval.bytes"

	// Keys Kafka accepts that have no effect here: stored, returned by
	// DescribeConfigs, and documented as such (docs/kafka.md).

	CompressionGzipLevel                 = "compression.gzip.level"
	CompressionLz4Level                  = "compression.lz4.level"
	CompressionZstdLevel                 = "compression.zstd.level"
	FileDeleteDelayMs                    = "file.delete.delay.ms"
	Preallocate                          = "preallocate"
	SegmentIndexBytes                    = "segment.index.bytes"
	LeaderReplicationThrottledReplicas   = "leader.replication.throttled.replicas"
	FollowerReplicationThrottledReplicas = "follower.replication.throttled.replicas"
	RemoteLogCopyDisable                 = "remote.log.copy.disable"
	RemoteLogDeleteOnDisable             = "remote.log.delete.on.disable"
)

// cleanup.policy's two policies; the value is a comma-separated list of them.
const (
	PolicyCompact = "compact"
	PolicyDelete  = "delete"
)

// message.timestamp.type's values.
const (
	CreateTime    = "CreateTime"
	LogAppendTime = "LogAppendTime"
)

// Defaults that services need as numbers.
const (
	// DefaultRetentionMs is retention.ms's default: 7 days.
	DefaultRetentionMs int64 = 7 * 24 * 3600 * 1000
	// DefaultMinInsyncReplicas is min.insync.replicas's default, lowered
	// to the replication factor for topics with fewer replicas.
	DefaultMinInsyncReplicas = 2
	// LocalRetentionTotal (-2) as local.retention.ms or
	// local.retention.bytes means "the total retention".
	LocalRetentionTotal int64 = -2
	// DefaultDeleteRetentionMs is delete.retention.ms's default: 1 day.
	DefaultDeleteRetentionMs int64 = 24 * 3600 * 1000
	// DefaultMaxCompactionLagMs is max.compaction.lag.ms's default: no
	// limit (Java's Long.MAX_VALUE).
	DefaultMaxCompactionLagMs int64 = math.MaxInt64
	// DefaultMinCleanableDirtyRatio is min.cleanable.dirty.ratio's default.
	DefaultMinCleanableDirtyRatio = 0.5
	// DefaultMessageTimestampAfterMaxMs is message.timestamp.after.max.ms's
	// default since Kafka 4.0 (KIP-1030): one hour.
	DefaultMessageTimestampAfterMaxMs int64 = 3600 * 1000
)

// spec is one known key: its default, its check, and whether it has an
// effect here.
type spec struct {
	def   string
	check func(string) error
	// inert: Kafka accepts the key but nothing here applies it.
	inert bool
}

const longMax = "9223372036854775807" // Java's Long.MAX_VALUE

// table is every topic config key with its default and check: Kafka's
// (LogConfig), except where docs/contracts.md says otherwise.
var table = map[string]spec{
	RetentionMs:    {def: strconv.FormatInt(DefaultRetentionMs, 10), check: longAtLeast(-1)},
	RetentionBytes: {def: "-1", check: longAtLeast(-1)},
	// Kafka's INT; at least 1024 here rather than Kafka's 14 (the
	// contract) and 1 MiB (Kafka 4.0's, KIP-1030).
	SegmentBytes:                {def: "1073741824", check: intBetween(1024, math.MaxInt32)},
	SegmentMs:                   {def: "604800000", check: longAtLeast(1)},
	SegmentJitterMs:             {def: "0", check: longAtLeast(0)},
	MinInsyncReplicas:           {def: strconv.Itoa(DefaultMinInsyncReplicas), check: intBetween(1, math.MaxInt32)},
	CleanupPolicy:               {def: PolicyDelete, check: listOf(PolicyDelete, PolicyCompact)},
	RemoteStorageEnable:         {def: "false", check: boolean},
	LocalRetentionMs:            {def: "-2", check: longAtLeast(-2)},
	LocalRetentionBytes:         {def: "-2", check: longAtLeast(-2)},
	UncleanLeaderElectionEnable: {def: "false", check: boolean},
	CompressionType:             {def: "producer", check: oneOf("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")},
	MaxMessageBytes:             {def: "1048588", check: intBetween(0, math.MaxInt32)},
	// Flush policy, read by storage nodes: flush.messages=1 fsyncs before
	// every acknowledgement (with group commit), flush.ms fsyncs on an
	// interval. Kafka's defaults leave durability to replication.
	FlushMessages: {def: longMax, check: longAtLeast(1)},
	FlushMs:       {def: longMax, check: longAtLeast(0)},
	// The log cleaner's keys.
	DeleteRetentionMs:      {def: strconv.FormatInt(DefaultDeleteRetentionMs, 10), check: longAtLeast(0)},
	MinCompactionLagMs:     {def: "0", check: longAtLeast(0)},
	MaxCompactionLagMs:     {def: longMax, check: longAtLeast(1)},
	MinCleanableDirtyRatio: {def: "0.5", check: floatBetween(0, 1)},
	// Timestamps, applied by the leader before the append.
	MessageTimestampType:        {def: CreateTime, check: oneOf(CreateTime, LogAppendTime)},
	MessageTimestampBeforeMaxMs: {def: longMax, check: longAtLeast(0)},
	MessageTimestampAfterMaxMs:  {def: strconv.FormatInt(DefaultMessageTimestampAfterMaxMs, 10), check: longAtLeast(0)},
	IndexIntervalBytes:          {def: "4096", check: intBetween(0, math.MaxInt32)},

	// Accepted and stored, no effect here.
	CompressionGzipLevel:                 {def: "-1", check: gzipLevel, inert: true},
	CompressionLz4Level:                  {def: "9", check: intBetween(1, 17), inert: true},
	CompressionZstdLevel:                 {def: "3", check: intBetween(-131072, 22), inert: true},
	FileDeleteDelayMs:                    {def: "60000", check: longAtLeast(0), inert: true},
	Preallocate:                          {def: "false", check: boolean, inert: true},
	SegmentIndexBytes:                    {def: "10485760", check: intBetween(4, math.MaxInt32), inert: true},
	LeaderReplicationThrottledReplicas:   {def: "", check: throttledReplicas, inert: true},
	FollowerReplicationThrottledReplicas: {def: "", check: throttledReplicas, inert: true},
	RemoteLogCopyDisable:                 {def: "false", check: boolean, inert: true},
	RemoteLogDeleteOnDisable:             {def: "false", check: boolean, inert: true},
}

// Known reports whether key is a topic config key.
func Known(key string) bool {
	_, ok := table[key]
	return ok
}

// Keys returns every topic config key, sorted.
func Keys() []string {
	out := make([]string, 0, len(table))
	for k := range table {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Default returns key's default value, or "" for an unknown key.
func Default(key string) string { return table[key].def }

// NoEffect reports whether key is one Kafka accepts that nothing here
// applies: it is stored and described, and changes nothing.
func NoEffect(key string) bool { return table[key].inert }

// Validate checks overrides: every key known and every value acceptable.
// The error names the first bad key in key order, as one line
// ("unknown topic config key %q" or "topic config K=%q: why").
func Validate(overrides map[string]string) error {
	keys := make([]string, 0, len(overrides))
	for k := range overrides {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s, ok := table[k]
		if !ok {
			return fmt.Errorf("unknown topic config key %q", k)
		}
		if err := s.check(overrides[k]); err != nil {
			return fmt.Errorf("topic config %s=%q: %v", k, overrides[k], err)
		}
	}
	return nil
}

// Effective applies overrides over the defaults. min.insync.replicas
// defaults to the replication factor when that is below 2; a
// replicationFactor of 0 leaves the default as it is.
func Effective(overrides map[string]string, replicationFactor int) map[string]string {
	out := make(map[string]string, len(table))
	for k, s := range table {
		out[k] = s.def
	}
	if replicationFactor > 0 && replicationFactor < DefaultMinInsyncReplicas {
		out[MinInsyncReplicas] = strconv.Itoa(replicationFactor)
	}
	for k, v := range overrides {
		out[k] = v
	}
	return out
}
