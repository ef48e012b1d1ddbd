package kafkawire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Header is a decoded request header (Kafka's request header v1 or v2).
type Header struct {
	// Key is the API key, for example 18 for ApiVersions.
	Key kmsg.Key
	// Version is the API version the client chose.
	Version int16
	// CorrelationID is echoed in the response so the client matches it.
	CorrelationID int32
	// ClientID is the client's self-chosen name; "" when null.
	ClientID string
}

// errShort is a header or frame that ends early.
var errShort = errors.New("kafkawire: message ends early")

// parseHeader reads the fixed part of a request header (v1: key, version,
// correlation id, nullable client id) and returns it with the rest of the
// message. Tagged fields (header v2) are skipped by skipTags once the
// caller knows the version is flexible.
func parseHeader(b []byte) (Header, []byte, error) {
	var h Header
	if len(b) < 10 {
		return h, nil, errShort
	}
	h.Key = kmsg.Key(binary.BigEndian.Uint16(b[0:]))
	h.Version = int16(binary.BigEndian.Uint16(b[2:]))
	h.CorrelationID = int32(binary.BigEndian.Uint32(b[4:]))
	n := int16(binary.BigEndian.Uint16(b[8:]))
	b = b[10:]
	switch {
	case n == -1:
	case n < -1:
		return h, nil, fmt.Errorf("kafkawire: client id length %d", n)
	case int(n) > len(b):
		return h, nil, errShort
	default:
		h.ClientID = string(b[:n])
		b = b[n:]
	}
	return h, b, nil
}

// skipTags skips a tagged-field section (KIP-482): an unsigned varint
// count, then for each field a varint tag, a varint size and that many
// bytes.
func skipTags(b []byte) ([]byte, error) {
	n, b, err := uvarint(b)
	if err != nil {
		return nil, err
	}
	for i := uint64(0); i < n; i++ {
		if _, b, err = uvarint(b); err != nil {
			return nil, err
		}
		var size uint64
		if size, b, err = uvarint(b); err != nil {
			return nil, err
		}
		if size > uint64(len(b)) {
			return nil, errShort
		}
		b = b[size:]
	}
	return b, nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errShort
	}
	return v, b[n:], nil
}
