package partitioner

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestSharedVectors checks every key of the table the Go and TypeScript
// clients share (testdata/partitioner.json, written by the client's
// TestSharedPartitionerTable -update).
func TestSharedVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.FromSlash("../../testdata/partitioner.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tab struct {
		Partitions []int32 `json:"partitions"`
		Keys       []struct {
			Key        string  `json:"key"`
			KeyHex     string  `json:"keyHex"`
			Murmur2    int32   `json:"murmur2"`
			Partitions []int32 `json:"partitionFor"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &tab); err != nil {
		t.Fatal(err)
	}
	if len(tab.Keys) < 100 {
		t.Fatalf("only %d keys", len(tab.Keys))
	}
	for _, k := range tab.Keys {
		key := []byte(k.Key)
		if k.KeyHex != "" {
			if key, err = hex.DecodeString(k.KeyHex); err != nil {
				t.Fatal(err)
			}
		}
		if got := Murmur2(key); got != k.Murmur2 {
			t.Errorf("Murmur2(%x) = %d, table says %d", key, got, k.Murmur2)
		}
		for i, n := range tab.Partitions {
			if got := ForKey(key, n); got != k.Partitions[i] {
				t.Errorf("ForKey(%x, %d) = %d, table says %d", key, n, got, k.Partitions[i])
			}
		}
	}
}

func TestForKeyInRange(t *testing.T) {
	for i := 0; i < 1000; i++ {
		key := []byte{byte(i), byte(i >> 8), 0xff, 0x80}
		for _, n := range []int32{1, 2, 7, 1000} {
			if p := ForKey(key, n); p < 0 || p >= n {
				t.Fatalf("ForKey(%x, %d) = %d", key, n, p)
			}
		}
	}
}
