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
	"sort"
	"strconv"
	"strings"
)

// Topic config keys accepted by the controller.
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
)

// DeleteRetentionMs is how long key compaction keeps a tombstone. Tiering's
// compactor reads it from a topic's configs when present; the controller
// does not accept it as an override (it is not in the table), so today
// tiering's --tombstone-retention applies to every topic.
const DeleteRetentionMs = "delete.retention.ms"

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
)

// spec is one known key: its default and its check.
type spec struct {
	def   string
	check func(string) error
}

func intAtLeast(min int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		if n < min {
			return fmt.Errorf("must be >= %d", min)
		}
		return nil
	}
}

func oneOf(vals ...string) func(string) error {
	return func(v string) error {
		for _, x := range vals {
			if v == x {
				return nil
			}
		}
		return fmt.Errorf("must be one of %s", strings.Join(vals, ", "))
	}
}

// table is every topic config key with its default and check.
var table = map[string]spec{
	RetentionMs:                 {strconv.FormatInt(DefaultRetentionMs, 10), intAtLeast(-1)},
	RetentionBytes:              {"-1", intAtLeast(-1)},
	SegmentBytes:                {"1073741824", intAtLeast(1024)},
	SegmentMs:                   {"604800000", intAtLeast(1)},
	MinInsyncReplicas:           {strconv.Itoa(DefaultMinInsyncReplicas), intAtLeast(1)},
	CleanupPolicy:               {"delete", oneOf("delete", "compact", "compact,delete", "delete,compact")},
	RemoteStorageEnable:         {"false", oneOf("true", "false")},
	LocalRetentionMs:            {"-2", intAtLeast(-2)},
	LocalRetentionBytes:         {"-2", intAtLeast(-2)},
	UncleanLeaderElectionEnable: {"false", oneOf("true", "false")},
	CompressionType:             {"producer", oneOf("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")},
	MaxMessageBytes:             {"1048588", intAtLeast(0)},
	// Flush policy, read by storage nodes: flush.messages=1 fsyncs before
	// every acknowledgement (with group commit), flush.ms fsyncs on an
	// interval. Kafka's defaults leave durability to replication.
	FlushMessages: {"9223372036854775807", intAtLeast(1)},
	FlushMs:       {"9223372036854775807", intAtLeast(0)},
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

// Int64 returns cfg[key] as an integer, or def when it is unset or not an
// integer.
func Int64(cfg map[string]string, key string, def int64) int64 {
	if v, err := strconv.ParseInt(cfg[key], 10, 64); err == nil {
		return v
	}
	return def
}
