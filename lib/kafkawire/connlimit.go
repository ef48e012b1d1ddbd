package kafkawire

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrTooManyConnections is why a connection over Config.MaxConns or
// Config.MaxConnsPerIP is closed as soon as it is accepted, as a Kafka
// broker closes one over max.connections.per.ip.
var ErrTooManyConnections = errors.New("kafkawire: too many connections")

// clientIP is the IP address connections are counted by: the host of a
// TCP address, the whole address otherwise.
func clientIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// overLimit reports why one more connection from ip would exceed the
// limits, or nil. The caller holds s.mu.
func (s *Server) overLimit(ip string) error {
	if s.cfg.MaxConns > 0 && len(s.conns) >= s.cfg.MaxConns {
		return fmt.Errorf("%w: %d open (max.connections)", ErrTooManyConnections, len(s.conns))
	}
	if s.cfg.MaxConnsPerIP > 0 && s.perIP[ip] >= s.cfg.MaxConnsPerIP {
		return fmt.Errorf("%w: %d open from %s (max.connections.per.ip)", ErrTooManyConnections, s.perIP[ip], ip)
	}
	return nil
}

// creationRate is the listener-wide bound on new connections per second
// (Kafka's max.connection.creation.rate, KIP-612): a token bucket holding
// at most one second of connections. Used by the accept loops under
// Server.mu.
type creationRate struct {
	perSec float64
	tokens float64
	last   time.Time
}

// wait takes a token for a connection accepted at now and returns how
// long accepting must pause until the next token, 0 when one is left.
func (r *creationRate) wait(now time.Time) time.Duration {
	burst := max(r.perSec, 1)
	if r.last.IsZero() {
		r.tokens = burst
	} else {
		r.tokens = min(r.tokens+now.Sub(r.last).Seconds()*r.perSec, burst)
	}
	r.last = now
	r.tokens--
	if r.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - r.tokens) / r.perSec * float64(time.Second))
}
