package partlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// FuzzDecodeIndex feeds arbitrary bytes to both index decoders, as given
// and with the header CRC repaired (otherwise almost every mutation stops
// at the CRC). Decoding must never panic, every error must wrap ErrIndex,
// and whatever decodes must encode back to the same bytes.
func FuzzDecodeIndex(f *testing.F) {
	m := IndexMeta{BaseOffset: 7, NextOffset: 40, LogSize: 5000, MaxTimestamp: 99}
	f.Add(EncodeOffsetIndex(m, nil))
	f.Add(EncodeOffsetIndex(m, []OffsetEntry{{Rel: 0, Pos: 0}, {Rel: 3, Pos: 4096}}))
	f.Add(EncodeTimeIndex(m, []TimeEntry{{Timestamp: 10, Rel: 3}}))
	f.Add([]byte("SPOI"))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkIndex(t, b)
		if len(b) >= indexHeaderSize {
			fixed := bytes.Clone(b)
			c := crc32.Update(0, castagnoli, fixed[:indexHeaderCRCStart])
			c = crc32.Update(c, castagnoli, fixed[indexHeaderSize:])
			binary.BigEndian.PutUint32(fixed[indexHeaderCRCStart:], c)
			checkIndex(t, fixed)
		}
	})
}

func checkIndex(t *testing.T, b []byte) {
	if m, e, err := DecodeOffsetIndex(b); err != nil {
		if !errors.Is(err, ErrIndex) {
			t.Fatalf("offset index error wraps no ErrIndex: %v", err)
		}
	} else if again := EncodeOffsetIndex(m, e); !bytes.Equal(again, b) {
		t.Fatalf("offset index re-encodes differently:\n%x\n%x", b, again)
	}
	if m, e, err := DecodeTimeIndex(b); err != nil {
		if !errors.Is(err, ErrIndex) {
			t.Fatalf("time index error wraps no ErrIndex: %v", err)
		}
	} else if again := EncodeTimeIndex(m, e); !bytes.Equal(again, b) {
		t.Fatalf("time index re-encodes differently:\n%x\n%x", b, again)
	}
}
