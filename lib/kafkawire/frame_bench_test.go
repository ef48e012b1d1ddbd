package kafkawire

import (
	"bufio"
	"encoding/binary"
	"net"
	"testing"
	"time"
)

// BenchmarkFrameReaderPipelined reads small request frames a client sent
// back to back over TCP, as an idempotent producer pipelines them: most
// frames are already in the read buffer when the next is asked for.
func BenchmarkFrameReaderPipelined(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	frame := make([]byte, 4+100)
	binary.BigEndian.PutUint32(frame, 100)
	sent := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			sent <- err
			return
		}
		defer c.Close()
		w := bufio.NewWriterSize(c, 64<<10)
		for range b.N {
			if _, err := w.Write(frame); err != nil {
				sent <- err
				return
			}
		}
		sent <- w.Flush()
	}()
	c, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	fr := &frameReader{c: c, r: bufio.NewReaderSize(c, 64<<10)}
	limits := frameLimits{max: DefaultMaxRequestBytes, busy: func() bool { return false },
		deadline: func() time.Time { return time.Now().Add(time.Minute) }}
	b.SetBytes(int64(len(frame)))
	b.ResetTimer()
	for range b.N {
		if _, _, err := fr.next(limits); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := <-sent; err != nil {
		b.Fatal(err)
	}
}
