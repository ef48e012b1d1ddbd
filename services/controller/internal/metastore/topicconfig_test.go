package metastore

import (
	"testing"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/topicconfig"
)

// Every key of the table is described, a key with no effect here as much
// as one with: overrides with the topic as their source, the rest with
// their defaults. Kafka Streams and MirrorMaker 2 read them back.
func TestConfigEntriesDescribeEveryKey(t *testing.T) {
	overrides := map[string]string{"preallocate": "true", "cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"}
	if err := validateConfigs(overrides); err != nil {
		t.Fatal(err)
	}
	entries := configEntries(overrides, 3)
	if len(entries) != len(topicconfig.Keys()) {
		t.Fatalf("%d entries, want one per key (%d)", len(entries), len(topicconfig.Keys()))
	}
	got := map[string]*controllerv1.ConfigEntry{}
	for _, e := range entries {
		got[e.GetKey()] = e
	}
	for key, want := range map[string]struct {
		value  string
		source controllerv1.ConfigSource
	}{
		"preallocate":                    {"true", controllerv1.ConfigSource_CONFIG_SOURCE_TOPIC},
		"cleanup.policy":                 {"compact", controllerv1.ConfigSource_CONFIG_SOURCE_TOPIC},
		"message.timestamp.type":         {"LogAppendTime", controllerv1.ConfigSource_CONFIG_SOURCE_TOPIC},
		"segment.index.bytes":            {"10485760", controllerv1.ConfigSource_CONFIG_SOURCE_DEFAULT},
		"message.timestamp.after.max.ms": {"3600000", controllerv1.ConfigSource_CONFIG_SOURCE_DEFAULT},
		"delete.retention.ms":            {"86400000", controllerv1.ConfigSource_CONFIG_SOURCE_DEFAULT},
	} {
		e := got[key]
		if e.GetValue() != want.value || e.GetSource() != want.source {
			t.Errorf("%s: %q from %v, want %q from %v", key, e.GetValue(), e.GetSource(), want.value, want.source)
		}
	}
}
