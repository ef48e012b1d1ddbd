package metastore

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
)

// configSpec is one known topic config key: its default and its check.
type configSpec struct {
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

// topicConfigs is every topic config key with Kafka's name and default.
// min.insync.replicas defaults to 2, lowered to the replication factor for
// topics with fewer replicas (see effectiveConfigs).
var topicConfigs = map[string]configSpec{
	"retention.ms":                   {"604800000", intAtLeast(-1)},
	"retention.bytes":                {"-1", intAtLeast(-1)},
	"segment.bytes":                  {"1073741824", intAtLeast(1024)},
	"segment.ms":                     {"604800000", intAtLeast(1)},
	"min.insync.replicas":            {"2", intAtLeast(1)},
	"cleanup.policy":                 {"delete", oneOf("delete", "compact", "compact,delete", "delete,compact")},
	"remote.storage.enable":          {"false", oneOf("true", "false")},
	"local.retention.ms":             {"-2", intAtLeast(-2)},
	"local.retention.bytes":          {"-2", intAtLeast(-2)},
	"unclean.leader.election.enable": {"false", oneOf("true", "false")},
	"compression.type":               {"producer", oneOf("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")},
	"max.message.bytes":              {"1048588", intAtLeast(0)},
	// Flush policy, read by storage nodes: flush.messages=1 fsyncs before
	// every acknowledgement (with group commit), flush.ms fsyncs on an
	// interval. Kafka's defaults leave durability to replication.
	"flush.messages": {"9223372036854775807", intAtLeast(1)},
	"flush.ms":       {"9223372036854775807", intAtLeast(0)},
}

// validateConfigs checks overrides; the error names the first bad key in
// key order.
func validateConfigs(overrides map[string]string) error {
	keys := make([]string, 0, len(overrides))
	for k := range overrides {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		spec, ok := topicConfigs[k]
		if !ok {
			return errf(commonv1.Code_CODE_INVALID_ARGUMENT, commonv1.Reason_REASON_INVALID_CONFIG,
				"unknown topic config key %q", k)
		}
		if err := spec.check(overrides[k]); err != nil {
			return errf(commonv1.Code_CODE_INVALID_ARGUMENT, commonv1.Reason_REASON_INVALID_CONFIG,
				"topic config %s=%q: %v", k, overrides[k], err)
		}
	}
	return nil
}

// effectiveConfigs applies overrides over the defaults.
func effectiveConfigs(overrides map[string]string, replicationFactor int) map[string]string {
	out := make(map[string]string, len(topicConfigs))
	for k, s := range topicConfigs {
		out[k] = s.def
	}
	if replicationFactor > 0 && replicationFactor < 2 {
		out["min.insync.replicas"] = strconv.Itoa(replicationFactor)
	}
	for k, v := range overrides {
		out[k] = v
	}
	return out
}

func configEntries(overrides map[string]string, replicationFactor int) []*controllerv1.ConfigEntry {
	eff := effectiveConfigs(overrides, replicationFactor)
	keys := make([]string, 0, len(eff))
	for k := range eff {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*controllerv1.ConfigEntry, 0, len(keys))
	for _, k := range keys {
		src := controllerv1.ConfigSource_CONFIG_SOURCE_DEFAULT
		if _, ok := overrides[k]; ok {
			src = controllerv1.ConfigSource_CONFIG_SOURCE_TOPIC
		}
		out = append(out, &controllerv1.ConfigEntry{Key: k, Value: eff[k], Source: src})
	}
	return out
}

var topicNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// ValidateTopicName applies Kafka's topic name rules.
func ValidateTopicName(name string) error {
	switch {
	case name == "":
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "empty topic name")
	case name == "." || name == "..":
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "topic name %q is not allowed", name)
	case len(name) > 249:
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "topic name longer than 249 characters")
	case !topicNameRE.MatchString(name):
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "topic name %q has characters outside [a-zA-Z0-9._-]", name)
	}
	return nil
}
