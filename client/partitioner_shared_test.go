package client

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// testdata/partitioner.json at the repository root is the table of keys,
// their murmur2 hashes and their partitions that this package and the
// TypeScript client both check, so records keyed from either client land on
// the same partitions. Regenerate with
//
//	go test . -run TestSharedPartitionerTable -update
//
// The hashes of the Kafka keys in kafkaMurmur2 are Kafka's own, so a
// regenerated table stays anchored to Kafka.

var updatePartitioner = flag.Bool("update", false, "rewrite ../testdata/partitioner.json")

type partitionerTable struct {
	Comment    string           `json:"comment"`
	Partitions []int32          `json:"partitions"` // partition counts each key is mapped for
	Keys       []partitionerKey `json:"keys"`
}

type partitionerKey struct {
	Key        string  `json:"key"`    // the key as UTF-8 text, or
	KeyHex     string  `json:"keyHex"` // the key as hex when it is not text ("" when key is set)
	Murmur2    int32   `json:"murmur2"`
	Partitions []int32 `json:"partitionFor"` // PartitionForKey for each count in Partitions
}

func sharedPartitionCounts() []int32 { return []int32{1, 3, 7, 12, 100} }

func makePartitionerTable() partitionerTable {
	t := partitionerTable{
		Comment:    "murmur2 key partitioning shared by client/ and ts/client; regenerate with: cd client && go test . -run TestSharedPartitionerTable -update",
		Partitions: sharedPartitionCounts(),
	}
	add := func(text string, key []byte) {
		k := partitionerKey{Murmur2: murmur2(key)}
		if text != "" || len(key) == 0 {
			k.Key = text
		} else {
			k.KeyHex = hex.EncodeToString(key)
		}
		for _, n := range t.Partitions {
			k.Partitions = append(k.Partitions, PartitionForKey(key, n))
		}
		t.Keys = append(t.Keys, k)
	}
	for _, c := range kafkaMurmur2 {
		add(c.key, []byte(c.key))
	}
	add("", []byte{})
	for _, s := range []string{"é", "ключ", "キー", "🔑 key", "order-1", "billing/eu-west-1"} {
		add(s, []byte(s))
	}
	for i := 0; i < 100; i++ {
		s := fmt.Sprintf("order-%d", i)
		add(s, []byte(s))
	}
	for i := 0; i < 8; i++ {
		key := []byte{0x80 | byte(i), 0xff, byte(i * 37), 0x00, byte(255 - i)}[:1+i%5]
		add("", key)
	}
	return t
}

func TestSharedPartitionerTable(t *testing.T) {
	path := filepath.FromSlash("../testdata/partitioner.json")
	if *updatePartitioner {
		out, err := json.MarshalIndent(makePartitionerTable(), "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with -update)", err)
	}
	var tab partitionerTable
	if err := json.Unmarshal(raw, &tab); err != nil {
		t.Fatal(err)
	}
	if len(tab.Keys) < 100 {
		t.Fatalf("only %d keys", len(tab.Keys))
	}
	kafka := map[string]int32{}
	for _, c := range kafkaMurmur2 {
		kafka[c.key] = c.hash
	}
	for _, k := range tab.Keys {
		key := []byte(k.Key)
		if k.KeyHex != "" {
			if key, err = hex.DecodeString(k.KeyHex); err != nil {
				t.Fatal(err)
			}
		}
		if h, ok := kafka[k.Key]; ok && k.KeyHex == "" && k.Murmur2 != h {
			t.Errorf("table hash of %q is %d, Kafka's is %d", k.Key, k.Murmur2, h)
		}
		if got := murmur2(key); got != k.Murmur2 {
			t.Errorf("murmur2(%x) = %d, table says %d", key, got, k.Murmur2)
		}
		for i, n := range tab.Partitions {
			if got := PartitionForKey(key, n); got != k.Partitions[i] {
				t.Errorf("PartitionForKey(%x, %d) = %d, table says %d", key, n, got, k.Partitions[i])
			}
		}
	}
}
