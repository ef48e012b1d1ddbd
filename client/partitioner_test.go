package client

import "testing"

// Hash values returned by Kafka's Java Utils.murmur2 for these UTF-8 keys.
var kafkaMurmur2 = []struct {
	key  string
	hash int32
}{
	{"1", -1993445489},
	{"12", 126087238},
	{"123", -267702483},
	{"1234", -1614185708},
	{"12345", -1188365604},
	{"21", -973932308},
	{"foobar", -790332482},
	{"a-little-bit-long-string", -985981536},
	{"a-little-bit-longer-string", -1486304829},
	{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
	{"abc", 479470107},
}

func TestMurmur2MatchesKafka(t *testing.T) {
	for _, c := range kafkaMurmur2 {
		if got := murmur2([]byte(c.key)); got != c.hash {
			t.Errorf("murmur2(%q) = %d, Kafka gives %d", c.key, got, c.hash)
		}
	}
}

func TestPartitionForKey(t *testing.T) {
	// Partition = (hash & 0x7fffffff) % n, the Kafka default partitioner's
	// mapping, checked against values worked out from the hashes above.
	cases := []struct {
		key  string
		n    int32
		want int32
	}{
		{"1", 12, 154038159 % 12},       // -1993445489 & 0x7fffffff = 154038159
		{"12", 12, 126087238 % 12},      // already positive
		{"123", 3, 1879781165 % 3},      // -267702483 & 0x7fffffff = 1879781165
		{"foobar", 12, 1357151166 % 12}, // -790332482 & 0x7fffffff = 1357151166
		{"abc", 1, 0},
	}
	for _, c := range cases {
		if got := PartitionForKey([]byte(c.key), c.n); got != c.want {
			t.Errorf("PartitionForKey(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
}

func TestPartitionForKeyInRange(t *testing.T) {
	for i := 0; i < 10000; i++ {
		key := []byte{byte(i), byte(i >> 8), byte(i >> 16), 0x80}
		if p := PartitionForKey(key, 7); p < 0 || p >= 7 {
			t.Fatalf("key %x: partition %d out of range", key, p)
		}
	}
}
