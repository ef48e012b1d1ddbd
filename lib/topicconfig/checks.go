package topicconfig

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Value checks, one per Kafka ConfigDef type and validator the table uses
// (LogConfig's CONFIG definitions). Kafka trims a value before parsing it;
// so do these.

// longAtLeast is a LONG with Range.atLeast(min).
func longAtLeast(min int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		if n < min {
			return fmt.Errorf("must be >= %d", min)
		}
		return nil
	}
}

// intBetween is an INT (32 bits, as Java's int) with Range.between(min,
// max); max is math.MaxInt32 for Range.atLeast(min).
func intBetween(min, max int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if err != nil {
			return fmt.Errorf("not a 32-bit integer")
		}
		switch {
		case max == math.MaxInt32 && n < min:
			return fmt.Errorf("must be >= %d", min)
		case n < min || n > max:
			return fmt.Errorf("must be between %d and %d", min, max)
		}
		return nil
	}
}

// gzipLevel is Kafka's GzipCompression level validator: -1 (the codec's
// default) or 1 to 9.
func gzipLevel(v string) error {
	if strings.TrimSpace(v) == "-1" {
		return nil
	}
	if intBetween(1, 9)(v) != nil {
		return fmt.Errorf("must be -1 or between 1 and 9")
	}
	return nil
}

// floatBetween is a DOUBLE with Range.between(min, max). NaN is refused
// (Kafka's comparisons let it through; no ratio is NaN).
func floatBetween(min, max float64) func(string) error {
	return func(v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) {
			return fmt.Errorf("not a number")
		}
		if f < min || f > max {
			return fmt.Errorf("must be between %g and %g", min, max)
		}
		return nil
	}
}

// boolean is a BOOLEAN. Kafka also takes TRUE and False; the services
// compare with "true", so only the lower-case words are accepted.
var boolean = oneOf("true", "false")

// oneOf is a STRING with ValidString.in(vals...), case-sensitive as
// Kafka's.
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

// listOf is a LIST with ValidList.in(vals...): comma-separated, spaces
// around the commas allowed, every item one of vals. An empty list is
// accepted, as Kafka's ConfigDef parses "" to one.
func listOf(vals ...string) func(string) error {
	one := oneOf(vals...)
	return func(v string) error {
		if strings.TrimSpace(v) == "" {
			return nil
		}
		for _, item := range strings.Split(v, ",") {
			if one(strings.TrimSpace(item)) != nil {
				return fmt.Errorf("must be a comma-separated list of %s", strings.Join(vals, ", "))
			}
		}
		return nil
	}
}

var replicaEntry = regexp.MustCompile(`^([0-9]+:[0-9]+)?$`)

// throttledReplicas is Kafka's ThrottledReplicaListValidator: "*" or a
// list of partitionId:brokerId entries.
func throttledReplicas(v string) error {
	if strings.TrimSpace(v) == "*" {
		return nil
	}
	for _, item := range strings.Split(v, ",") {
		if !replicaEntry.MatchString(strings.TrimSpace(item)) {
			return fmt.Errorf("must be * or a list of partitionId:brokerId entries")
		}
	}
	return nil
}
