package topicconfig

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Typed reads of effective configs, for the services that apply them.
// Each takes the config map as the controller sends it (every key with its
// effective value) and a fallback for a key that is missing or unreadable.

// Int64 returns cfg[key] as an integer, or def when it is unset or not an
// integer. A value beyond int64 saturates at math.MaxInt64 or
// math.MinInt64 rather than falling back to def.
func Int64(cfg map[string]string, key string, def int64) int64 {
	v, err := strconv.ParseInt(strings.TrimSpace(cfg[key]), 10, 64)
	if err == nil {
		return v
	}
	if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
		return v // ParseInt returns the bound it passed
	}
	return def
}

// Float64 returns cfg[key] as a float, or def when it is unset, not a
// number, or NaN.
func Float64(cfg map[string]string, key string, def float64) float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(cfg[key]), 64)
	if err != nil || math.IsNaN(v) {
		return def
	}
	return v
}

// Millis converts a count of milliseconds to a time.Duration, saturating
// at the largest and smallest Duration instead of wrapping: Kafka accepts
// any long, and time.Duration holds only about 292 years. Negative counts
// stay negative, so a -1 ("no limit") is still seen as negative.
func Millis(ms int64) time.Duration {
	const most = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case ms > most:
		return math.MaxInt64
	case ms < -most:
		return math.MinInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// Duration returns cfg[key], a count of milliseconds, as a saturated
// time.Duration (see Millis), or Millis(defMs) when it is unset or not an
// integer.
func Duration(cfg map[string]string, key string, defMs int64) time.Duration {
	return Millis(Int64(cfg, key, defMs))
}

// ParseCleanupPolicy reads a cleanup.policy value, a comma-separated list
// as Kafka's ConfigDef LIST type parses it (spaces around commas allowed),
// into its two policies.
func ParseCleanupPolicy(v string) (compact, del bool) {
	for _, p := range strings.Split(v, ",") {
		switch strings.TrimSpace(p) {
		case PolicyCompact:
			compact = true
		case PolicyDelete:
			del = true
		}
	}
	return compact, del
}

// Cleanup returns a topic's policies from its configs. An unset
// cleanup.policy is the default, delete.
func Cleanup(cfg map[string]string) (compact, del bool) {
	v, ok := cfg[CleanupPolicy]
	if !ok {
		v = table[CleanupPolicy].def
	}
	return ParseCleanupPolicy(v)
}

// Retention returns the total retention that applies to a topic, -1 for
// no limit: retention.ms and retention.bytes when its cleanup.policy
// includes delete, and no limit at all for a compact-only topic, whose
// records only key compaction removes (Kafka's LogManager deletes by time
// and size only for logs with the delete policy).
func Retention(cfg map[string]string) (ms, bytes int64) {
	if _, del := Cleanup(cfg); !del {
		return -1, -1
	}
	return Int64(cfg, RetentionMs, DefaultRetentionMs), Int64(cfg, RetentionBytes, -1)
}
