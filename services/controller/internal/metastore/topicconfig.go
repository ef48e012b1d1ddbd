package metastore

import (
	"regexp"
	"sort"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/topicconfig"
)

// validateConfigs checks overrides (lib/topicconfig); the error names the
// first bad key in key order.
func validateConfigs(overrides map[string]string) error {
	if err := topicconfig.Validate(overrides); err != nil {
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, commonv1.Reason_REASON_INVALID_CONFIG, "%v", err)
	}
	return nil
}

func configEntries(overrides map[string]string, replicationFactor int) []*controllerv1.ConfigEntry {
	eff := topicconfig.Effective(overrides, replicationFactor)
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
