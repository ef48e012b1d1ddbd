package serve

import (
	"bufio"
	"net"
)

// readBufferSize is the read buffer of each cleartext connection a
// [Server] accepts: larger than a frame header and most Connect requests,
// so one read system call takes several HTTP/2 frames.
const readBufferSize = 32 << 10

// bufferedListener gives every accepted connection a read buffer.
//
// Go's HTTP/2 server reads frames straight from the connection it is
// handed: io.ReadFull of the 9-byte frame header, then of the payload,
// two read system calls per frame (four for a unary call's HEADERS and
// DATA) whatever is already waiting in the socket. Its client side reads
// through a bufio.Reader; this gives the server the same. Under TLS the
// tls.Conn buffers whole records itself, so only cleartext listeners are
// wrapped.
type bufferedListener struct{ net.Listener }

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, readBufferSize)}, nil
}

// bufferedConn is a net.Conn whose reads go through a buffer. Writes,
// deadlines and Close are the connection's own. A read at least as large
// as the buffer bypasses it (bufio.Reader does so once it is empty), so a
// large DATA frame is not copied twice.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes a TCP connection, as net/http does at the end of
// some HTTP/1.1 exchanges when the connection offers it.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
