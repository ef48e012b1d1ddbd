package recordbatch

import (
	"bytes"
	"errors"
	"testing"
)

// TestBuildMarkerLikeKafka checks BuildMarker against commit and abort
// markers laid out by hand from Kafka's MemoryRecords.
// writeEndTransactionalMarker: attributes transactional|control, base
// sequence -1, one record with ControlRecordType's 4-byte key and
// EndTransactionMarker's 6-byte value. The CRCs were computed separately
// with a bit-by-bit CRC-32C.
func TestBuildMarkerLikeKafka(t *testing.T) {
	for _, tc := range []struct {
		typ  ControlType
		crc  string
		key  string
		name string
	}{
		{ControlCommit, "9a8e021f", "00000001", "commit"},
		{ControlAbort, "6eb0d457", "00000000", "abort"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := BuildMarker(0x0102030405060708, 0x090a, 1000, Marker{Type: tc.typ, CoordinatorEpoch: 7})
			if err != nil {
				t.Fatal(err)
			}
			want := mustHex(t, `
				0000000000000000 // baseOffset (stamped by the leader)
				00000042         // batchLength 66
				ffffffff         // partitionLeaderEpoch (stamped by the leader)
				02               // magic
				`+tc.crc+`       // crc
				0030             // attributes: transactional, control
				00000000         // lastOffsetDelta
				00000000000003e8 // baseTimestamp 1000
				00000000000003e8 // maxTimestamp 1000
				0102030405060708 // producerId
				090a             // producerEpoch
				ffffffff         // baseSequence: none
				00000001         // recordCount
				20 00 00 00      // length 16, attributes, timestampDelta 0, offsetDelta 0
				08 `+tc.key+`    // key: 4 bytes, version 0, type
				0c 0000 00000007 // value: 6 bytes, version 0, coordinator epoch 7
				00               // no headers
			`)
			if !bytes.Equal(b, want) {
				t.Fatalf("built\n%x\nwant\n%x", b, want)
			}
			if len(b) != MarkerSize {
				t.Fatalf("%d bytes, MarkerSize %d", len(b), MarkerSize)
			}
			h, m, err := ParseMarker(b)
			if err != nil {
				t.Fatal(err)
			}
			if m.Type != tc.typ || m.CoordinatorEpoch != 7 || m.Commit() != (tc.typ == ControlCommit) {
				t.Fatalf("parsed %+v", m)
			}
			if !h.Control() || !h.Transactional() || h.ProducerID != 0x0102030405060708 || h.ProducerEpoch != 0x090a {
				t.Fatalf("header %+v", h)
			}
			// A marker is a batch a producer may not send.
			if _, err := ValidateProduced(b); !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("ValidateProduced: %v", err)
			}
		})
	}
}

// TestParseMarkerRefuses checks that only commit and abort markers parse,
// and that later versions are read as version 0, as Kafka reads them.
func TestParseMarkerRefuses(t *testing.T) {
	data := mustBuild(t, BuildOptions{Idempotent: true, ProducerID: 1, Transactional: true}, sampleRecords())
	if h, _ := Verify(data); !h.Transactional() || h.Control() {
		t.Fatalf("transactional data batch: %+v", h)
	}
	if _, _, err := ParseMarker(data); !errors.Is(err, ErrNotMarker) {
		t.Fatalf("data batch: %v", err)
	}
	control := func(key, value []byte) []byte {
		b := mustBuild(t, BuildOptions{Idempotent: true, ProducerID: 1}, []Record{{Key: key, Value: value}})
		b[offAttributes+1] |= attrControl | attrTransactional
		return fixCRC(b)
	}
	for name, tc := range map[string]struct {
		key, value []byte
		ok         bool
	}{
		"leader change type": {[]byte{0, 0, 0, 2}, []byte{0, 0, 0, 0, 0, 1}, false},
		"short key":          {[]byte{0, 0, 1}, []byte{0, 0, 0, 0, 0, 1}, false},
		"negative key v":     {[]byte{0xff, 0xff, 0, 1}, []byte{0, 0, 0, 0, 0, 1}, false},
		"short value":        {[]byte{0, 0, 0, 1}, []byte{0, 0, 0, 0, 1}, false},
		"negative value v":   {[]byte{0, 0, 0, 1}, []byte{0x80, 0, 0, 0, 0, 1}, false},
		"null value":         {[]byte{0, 0, 0, 1}, nil, false},
		"later versions":     {[]byte{0, 1, 0, 1, 9}, []byte{0, 3, 0, 0, 0, 1, 9}, true},
	} {
		_, m, err := ParseMarker(control(tc.key, tc.value))
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, ErrNotMarker)) {
			t.Errorf("%s: %+v %v", name, m, err)
		}
		if tc.ok && (m.Type != ControlCommit || m.CoordinatorEpoch != 1) {
			t.Errorf("%s: %+v", name, m)
		}
	}
	if _, err := BuildMarker(1, 0, 0, Marker{Type: 2}); !errors.Is(err, ErrNotMarker) {
		t.Fatalf("build of type 2: %v", err)
	}
}
