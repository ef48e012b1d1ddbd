package kafkawire

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrTooManyConnections is why a connection over Config.MaxConns,
// Config.MaxConnsPerIP (or its override) or its address's creation rate is
// closed as soon as it is accepted, as a Kafka broker closes one over
// max.connections.per.ip.
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

// overLimit reports why one more connection from ip, accepted at now,
// would exceed the limits, or nil; a connection within them takes one of
// its address's creation-rate tokens. The caller holds s.mu.
func (s *Server) overLimit(ip string, now time.Time) error {
	if s.cfg.MaxConns > 0 && len(s.conns) >= s.cfg.MaxConns {
		return fmt.Errorf("%w: %d open (max.connections)", ErrTooManyConnections, len(s.conns))
	}
	if n, ok := s.cfg.MaxConnsPerIPOverrides[ip]; ok {
		if s.perIP[ip] >= n {
			return fmt.Errorf("%w: %d open from %s (max.connections.per.ip.overrides: %d)", ErrTooManyConnections, s.perIP[ip], ip, n)
		}
	} else if s.cfg.MaxConnsPerIP > 0 && s.perIP[ip] >= s.cfg.MaxConnsPerIP {
		return fmt.Errorf("%w: %d open from %s (max.connections.per.ip)", ErrTooManyConnections, s.perIP[ip], ip)
	}
	rate, ok := s.cfg.ConnCreationRatePerIPOverrides[ip]
	if !ok {
		rate = s.cfg.ConnCreationRatePerIP
	}
	if rate > 0 && !s.takeIPToken(ip, rate, now) {
		return fmt.Errorf("%w: new connections from %s over %g a second (connection_creation_rate)", ErrTooManyConnections, ip, rate)
	}
	return nil
}

// takeIPToken takes one of ip's creation-rate tokens at now, reporting
// false when it has none: a bucket of one second of rate (at least one
// connection), refilled at rate. Buckets that have filled up again are
// dropped once there are many, so addresses that connected once cost
// nothing for long. The caller holds s.mu.
func (s *Server) takeIPToken(ip string, rate float64, now time.Time) bool {
	burst := max(rate, 1)
	if len(s.ipRates) >= maxIPRateBuckets {
		for k, b := range s.ipRates {
			if b.tokens+now.Sub(b.last).Seconds()*b.rate >= max(b.rate, 1) {
				delete(s.ipRates, k)
			}
		}
	}
	b := s.ipRates[ip]
	if b == nil {
		b = &ipRate{rate: rate, tokens: burst, last: now}
		s.ipRates[ip] = b
	}
	b.rate = rate
	b.tokens = min(b.tokens+now.Sub(b.last).Seconds()*rate, burst)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// maxIPRateBuckets is how many per-address creation-rate buckets are
// kept before full ones are swept.
const maxIPRateBuckets = 4096

// ipRate is one client address's connection-creation bucket (KIP-612's
// per-IP connection_creation_rate quota).
type ipRate struct {
	rate, tokens float64
	last         time.Time
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
