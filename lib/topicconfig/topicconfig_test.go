package topicconfig

import (
	"strings"
	"testing"
)

// The contract keys (docs/contracts.md) must stay known under these names.
func TestContractKeysAreKnown(t *testing.T) {
	for _, k := range []string{
		"retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "min.insync.replicas",
		"cleanup.policy", "remote.storage.enable", "local.retention.ms", "local.retention.bytes",
		"unclean.leader.election.enable", "compression.type", "max.message.bytes",
		"flush.messages", "flush.ms",
	} {
		if !Known(k) {
			t.Errorf("%s is not known", k)
		}
	}
	if got := len(Keys()); got != 14 {
		t.Errorf("%d keys, want 14", got)
	}
	if Known(DeleteRetentionMs) {
		t.Errorf("%s became settable: document it in docs/contracts.md and update this test", DeleteRetentionMs)
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
		{map[string]string{"segment.ms": "x"}, "not an integer"},
		{map[string]string{"compression.type": "brotli"}, "must be one of producer, uncompressed, gzip, snappy, lz4, zstd"},
		{map[string]string{"remote.storage.enable": "yes"}, "must be one of true, false"},
		{map[string]string{"no.such.key": "1"}, `unknown topic config key "no.such.key"`},
		// The first bad key in key order is named.
		{map[string]string{"segment.ms": "0", "min.insync.replicas": "0"}, "min.insync.replicas"},
		{map[string]string{DeleteRetentionMs: "1"}, "unknown topic config key"},
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
	cfg := map[string]string{"a": "12", "b": "x", "c": ""}
	for k, want := range map[string]int64{"a": 12, "b": 7, "c": 7, "missing": 7} {
		if got := Int64(cfg, k, 7); got != want {
			t.Errorf("Int64(%s) = %d, want %d", k, got, want)
		}
	}
}
