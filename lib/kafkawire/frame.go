package kafkawire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrFrameTooLarge is the error a connection closes with when a request's
// size prefix exceeds the limit for its state: Config.MaxPreAuthBytes
// before authentication, Config.MaxRequestBytes after.
var ErrFrameTooLarge = errors.New("kafkawire: request frame too large")

// errIdle is a connection closed for silence (Config.IdleTimeout) or for
// not authenticating in time (Config.LoginTimeout).
var errIdle = errors.New("kafkawire: connection idle")

// frameReader reads one connection's request frames under the limits of
// its state. It is used by the connection's reading goroutine only.
type frameReader struct {
	c net.Conn
	r *bufio.Reader
}

// preAuthKeys are the APIs a connection may send before it authenticates
// on a listener that requires it, as on a Kafka SASL listener
// (SaslServerAuthenticator: ApiVersions, SaslHandshake, SaslAuthenticate).
func preAuthKey(k kmsg.Key) bool {
	return k == kmsg.ApiVersions || k == kmsg.SASLHandshake || k == kmsg.SASLAuthenticate
}

// frameLimits are the bounds on the next frame.
type frameLimits struct {
	// max is the largest size prefix accepted.
	max int32
	// preAuth refuses, from the header alone, a request other than the
	// SASL ones and ApiVersions, without reading its body.
	preAuth bool
	// deadline is when the whole frame must have arrived.
	deadline func() time.Time
	// busy reports a request still being handled: a connection waiting
	// on its own long poll is not idle, so the wait for its next frame
	// starts again instead of closing it.
	busy func() bool
}

// next reads one frame. A frame refused before authentication by its API
// key returns its header (as far as the frame has one) and a nil body,
// with ErrNotAuthenticated; its body is never read.
func (fr *frameReader) next(l frameLimits) (Header, []byte, error) {
	// Wait for the frame's first byte, unless it is already buffered (a
	// pipelined request: no read, so no deadline, is needed for it). A
	// timeout with a request in flight is not idleness: wait again.
	for fr.r.Buffered() == 0 {
		if err := fr.c.SetReadDeadline(l.deadline()); err != nil {
			return Header{}, nil, err
		}
		_, err := fr.r.Peek(1)
		if err == nil {
			break
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if l.busy() {
				continue
			}
			return Header{}, nil, errIdle
		}
		return Header{}, nil, err
	}
	// The rest of the frame has a full period from its first byte.
	if err := fr.c.SetReadDeadline(l.deadline()); err != nil {
		return Header{}, nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(fr.r, size[:]); err != nil {
		return Header{}, nil, frameErr(err)
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > l.max {
		// Checked before anything is allocated: the prefix alone costs
		// nothing (CVE-2022-34917 was a broker allocating it first).
		return Header{}, nil, fmt.Errorf("%w: %d bytes (limit %d)", ErrFrameTooLarge, uint32(n), l.max)
	}
	if l.preAuth && n >= 2 {
		// The API key comes first; the version and correlation id, when
		// the frame has them, let a refusal be answered.
		hb, err := fr.r.Peek(min(int(n), 8))
		if err != nil {
			return Header{}, nil, frameErr(err)
		}
		if k := kmsg.Key(binary.BigEndian.Uint16(hb)); !preAuthKey(k) {
			h := Header{Key: k}
			if len(hb) == 8 {
				h.Version = int16(binary.BigEndian.Uint16(hb[2:]))
				h.CorrelationID = int32(binary.BigEndian.Uint32(hb[4:]))
			}
			return h, nil, ErrNotAuthenticated
		}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(fr.r, b); err != nil {
		return Header{}, nil, frameErr(err)
	}
	return Header{}, b, nil
}

// frameErr is a read error inside a frame: an early end is unexpected,
// and a deadline passing mid-frame is a client too slow to send it.
func frameErr(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errIdle
	}
	return err
}
