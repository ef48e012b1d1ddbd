package kafka

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
)

// Fetch sessions (KIP-227), as a Kafka broker keeps them: a full fetch
// (session epoch 0) opens a session holding its partitions and their
// offsets; the client's next fetches are incremental (epoch 1, 2, ...)
// and name only the partitions it adds or whose offset or leader epoch
// changed, and the ones it forgets. An incremental answer leaves out the
// partitions with nothing new for the client: no records, no error, and
// the same high watermark, last stable offset and log start offset as the
// session's last answer for them.
//
// Sessions live in the memory of one listener's bridge, bounded by
// fetchSessionSlots; a node that restarts has none, and its clients'
// incremental fetches get FETCH_SESSION_ID_NOT_FOUND, on which they start
// a new session with a full fetch.
//
// A session costs its listener memory, so on a listener that
// authenticates (Config.Guard) it belongs to the connection's principal,
// and three rules keep one principal from taking everyone's (Kafka has
// none of them; docs/kafka.md):
//   - a full fetch opens its session only after it was read, and none
//     when a partition was refused for authorization: a principal that
//     may read nothing opens nothing;
//   - a principal holds at most fetchSessionsPerPrincipal sessions; its
//     next one replaces its own least recently used;
//   - a newcomer evicts another principal's session only when that
//     session is stale, never for being smaller.

// Kafka's error codes of fetch sessions.
const (
	errFetchSessionIDNotFound   int16 = 70
	errInvalidFetchSessionEpoch int16 = 71
)

// Session epochs with a meaning of their own (Kafka's FetchMetadata).
const (
	sessionEpochInitial int32 = 0  // a full fetch that opens a session
	sessionEpochFinal   int32 = -1 // a full fetch that closes the session it names, and opens none
)

const (
	// defaultFetchSessionSlots bounds the sessions of one listener
	// (Kafka's max.incremental.fetch.session.cache.slots).
	defaultFetchSessionSlots = 1000
	// fetchSessionStaleAfter is how long an unused session keeps its slot
	// against any newcomer; past it, it is the first evicted.
	fetchSessionStaleAfter = 2 * time.Minute
	// defaultFetchSessionsPerPrincipal bounds one principal's sessions on
	// a listener that authenticates.
	defaultFetchSessionsPerPrincipal = 100
)

// fetchPart is one partition a fetch reads, at the offset the client
// asked for (in this request, or earlier in its session).
type fetchPart struct {
	topic       string
	partition   int32
	offset      int64
	leaderEpoch int32
	maxBytes    int32
	// lastFetchedEpoch is the epoch of the last batch the client read
	// (Fetch v12+), -1 when it sends none.
	lastFetchedEpoch int32
}

type partKey struct {
	topic     string
	partition int32
}

// sessionPart is a session's partition: what the client fetches it at,
// and what the session last answered for it.
type sessionPart struct {
	fetchPart
	// answered is false until the partition is first answered without
	// an error, and again after an error, so that it is answered in full
	// the next time.
	answered          bool
	hw, lso, logStart int64
}

// fetchSession is one open session.
type fetchSession struct {
	id int32
	// epoch is the epoch the client's next incremental fetch must carry.
	epoch    int32
	parts    map[partKey]*sessionPart
	order    []partKey // the order partitions are read in
	lastUsed time.Time
	// owner is the principal that opened it ("" on a listener that does
	// not authenticate).
	owner string
}

// fetchSessions is one listener's session cache. Safe for concurrent use.
type fetchSessions struct {
	mu         sync.Mutex
	slots      int
	perOwner   int // sessions one owner may hold; 0: no bound
	staleAfter time.Duration
	now        func() time.Time
	sessions   map[int32]*fetchSession
	owned      map[string]int // sessions per owner other than ""
}

func newFetchSessions(slots int) *fetchSessions {
	return &fetchSessions{slots: slots, perOwner: defaultFetchSessionsPerPrincipal, staleAfter: fetchSessionStaleAfter,
		now: time.Now, sessions: map[int32]*fetchSession{}, owned: map[string]int{}}
}

// fetchPlan is what one Fetch request reads and how its answer is shaped.
type fetchPlan struct {
	// errCode is a session error (FETCH_SESSION_ID_NOT_FOUND,
	// INVALID_FETCH_SESSION_EPOCH): nothing is read, the answer is the
	// error alone.
	errCode int16
	// sessionID is the session id answered: 0 for none. A full fetch
	// that opens a session gets its id from answer, once it was read.
	sessionID int32
	// opening says a session opens for parts, owned by owner, if the
	// read allows it (see answer).
	opening bool
	owner   string
	// session is the session the fetch belongs to, nil for none;
	// incremental says whether the answer leaves out what is unchanged.
	session     *fetchSession
	incremental bool
	parts       []fetchPart
}

// fetchResult is what was read for one part.
type fetchResult struct {
	errCode           int16
	hw, lso, logStart int64
	records           []byte
	// diverging is where the client's log parts from the leader's, when
	// its last fetched epoch says it does (KIP-595's diverging_epoch).
	diverging *storagev1.DivergingEpoch
	// aborted are the aborted transactions overlapping records, for a
	// read_committed fetch.
	aborted []*storagev1.AbortedTransaction
}

// requestParts lists a request's partitions in its order.
func requestParts(version int16, req *kmsg.FetchRequest) []fetchPart {
	var out []fetchPart
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			last := int32(-1)
			if version >= 12 {
				last = p.LastFetchedEpoch
			}
			out = append(out, fetchPart{topic: t.Topic, partition: p.Partition, offset: p.FetchOffset,
				leaderEpoch: p.CurrentLeaderEpoch, maxBytes: max(p.PartitionMaxBytes, 0), lastFetchedEpoch: last})
		}
	}
	return out
}

// open decides what req, from owner, reads: sessionless (versions before
// 7, epoch -1), a full fetch that may open a session (epoch 0), or the
// next fetch of an open one.
func (c *fetchSessions) open(version int16, req *kmsg.FetchRequest, owner string) fetchPlan {
	parts := requestParts(version, req)
	if version < 7 {
		return fetchPlan{parts: parts}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if req.SessionEpoch == sessionEpochInitial || req.SessionEpoch == sessionEpochFinal {
		// A full fetch closes the session it names.
		if req.SessionID != 0 {
			c.remove(req.SessionID)
		}
		if req.SessionEpoch == sessionEpochFinal || len(parts) == 0 || c.slots <= 0 {
			fetchRequests.Add(context.Background(), 1, sessionNone)
			return fetchPlan{parts: parts}
		}
		return fetchPlan{parts: parts, opening: true, owner: owner}
	}
	s := c.sessions[req.SessionID]
	if s == nil || s.owner != owner {
		// Another principal's session is unknown to this one.
		fetchRequests.Add(context.Background(), 1, sessionError)
		return fetchPlan{errCode: errFetchSessionIDNotFound}
	}
	if req.SessionEpoch != s.epoch {
		fetchRequests.Add(context.Background(), 1, sessionError)
		return fetchPlan{errCode: errInvalidFetchSessionEpoch}
	}
	// Added and changed partitions, then forgotten ones, as Kafka.
	for _, p := range parts {
		k := partKey{p.topic, p.partition}
		if sp := s.parts[k]; sp != nil {
			sp.fetchPart = p
			continue
		}
		s.parts[k] = &sessionPart{fetchPart: p}
		s.order = append(s.order, k)
	}
	forgot := false
	for _, t := range req.ForgottenTopics {
		for _, p := range t.Partitions {
			k := partKey{t.Topic, p}
			if s.parts[k] != nil {
				delete(s.parts, k)
				forgot = true
			}
		}
	}
	if forgot {
		order := s.order[:0]
		for _, k := range s.order {
			if s.parts[k] != nil {
				order = append(order, k)
			}
		}
		s.order = order
	}
	if len(s.parts) == 0 {
		// Everything forgotten: the session ends, as with Kafka.
		c.remove(s.id)
		fetchRequests.Add(context.Background(), 1, sessionNone)
		return fetchPlan{}
	}
	s.epoch = nextSessionEpoch(s.epoch)
	s.lastUsed = now
	plan := fetchPlan{sessionID: s.id, session: s, incremental: true, parts: make([]fetchPart, len(s.order))}
	for i, k := range s.order {
		plan.parts[i] = s.parts[k].fetchPart
	}
	fetchRequests.Add(context.Background(), 1, sessionIncremental)
	return plan
}

// answer records what was read for plan's parts in its session and
// reports, part by part, whether the answer includes it. A full fetch
// answers everything; an incremental one what is new to the client.
// Answered partitions move to the end of the session's order, so that
// when a fetch's byte limit is reached, the next ones read the others
// first. A full fetch that may open a session opens it here, unless a
// partition was refused for authorization, and sets plan.sessionID.
func (c *fetchSessions) answer(plan *fetchPlan, results []fetchResult) []bool {
	include := make([]bool, len(plan.parts))
	if plan.opening {
		c.openAfterRead(plan, results)
	}
	if plan.session == nil {
		for i := range include {
			include[i] = true
		}
		return include
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := plan.session
	open := c.sessions[s.id] == s
	for i, p := range plan.parts {
		r := results[i]
		var sp *sessionPart
		if open {
			sp = s.parts[partKey{p.topic, p.partition}]
		}
		changed := sp == nil || !sp.answered || sp.hw != r.hw || sp.lso != r.lso || sp.logStart != r.logStart
		include[i] = !plan.incremental || len(r.records) > 0 || r.errCode != 0 || r.diverging != nil || changed
		if sp == nil {
			continue
		}
		if r.errCode != 0 {
			sp.answered = false
		} else {
			sp.answered, sp.hw, sp.lso, sp.logStart = true, r.hw, r.lso, r.logStart
		}
	}
	if open && plan.incremental {
		moved := make([]partKey, 0, len(s.order))
		var last []partKey
		for i, p := range plan.parts {
			k := partKey{p.topic, p.partition}
			if s.parts[k] == nil {
				continue
			}
			if include[i] {
				last = append(last, k)
			} else {
				moved = append(moved, k)
			}
		}
		if len(moved)+len(last) == len(s.order) {
			s.order = append(moved, last...)
		}
	}
	return include
}

// openAfterRead opens the session of plan, a full fetch that was read
// with results, unless a partition was refused for authorization or there
// is no room.
func (c *fetchSessions) openAfterRead(plan *fetchPlan, results []fetchResult) {
	plan.opening = false
	for _, r := range results {
		if r.errCode == kerr.TopicAuthorizationFailed.Code {
			fetchRequests.Add(context.Background(), 1, sessionNone)
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.create(c.now(), plan.parts, plan.owner)
	if s == nil {
		fetchRequests.Add(context.Background(), 1, sessionNone)
		return
	}
	fetchRequests.Add(context.Background(), 1, sessionFull)
	plan.sessionID, plan.session = s.id, s
}

// create opens a session for parts, owned by owner. An owner at its bound
// replaces its own least recently used session. When the cache is full it
// evicts the least recently used stale session, or else the smallest of
// owner's own if it holds fewer partitions than the new one. Nil when
// there is no room.
func (c *fetchSessions) create(now time.Time, parts []fetchPart, owner string) *fetchSession {
	if c.slots <= 0 {
		return nil
	}
	if owner != "" && c.perOwner > 0 && c.owned[owner] >= c.perOwner {
		var victim *fetchSession
		for _, s := range c.sessions {
			if s.owner == owner && (victim == nil || s.lastUsed.Before(victim.lastUsed)) {
				victim = s
			}
		}
		if victim != nil {
			c.remove(victim.id)
			fetchSessionEvictions.Add(context.Background(), 1)
		}
	}
	if len(c.sessions) >= c.slots {
		var victim *fetchSession
		for _, s := range c.sessions {
			if now.Sub(s.lastUsed) >= c.staleAfter && (victim == nil || s.lastUsed.Before(victim.lastUsed)) {
				victim = s
			}
		}
		if victim == nil {
			for _, s := range c.sessions {
				if s.owner == owner && len(s.parts) < len(parts) && (victim == nil || len(s.parts) < len(victim.parts) ||
					len(s.parts) == len(victim.parts) && s.lastUsed.Before(victim.lastUsed)) {
					victim = s
				}
			}
		}
		if victim == nil {
			return nil
		}
		c.remove(victim.id)
		fetchSessionEvictions.Add(context.Background(), 1)
	}
	s := &fetchSession{id: c.newID(), epoch: 1, parts: make(map[partKey]*sessionPart, len(parts)), lastUsed: now, owner: owner}
	for _, p := range parts {
		k := partKey{p.topic, p.partition}
		if s.parts[k] == nil {
			s.order = append(s.order, k)
		}
		s.parts[k] = &sessionPart{fetchPart: p}
	}
	c.sessions[s.id] = s
	if owner != "" {
		c.owned[owner]++
	}
	fetchSessionsOpen.Add(context.Background(), 1)
	return s
}

func (c *fetchSessions) remove(id int32) {
	if s, ok := c.sessions[id]; ok {
		delete(c.sessions, id)
		if s.owner != "" {
			if c.owned[s.owner]--; c.owned[s.owner] <= 0 {
				delete(c.owned, s.owner)
			}
		}
		fetchSessionsOpen.Add(context.Background(), -1)
	}
}

// newID is a random positive session id not in use.
func (c *fetchSessions) newID() int32 {
	for {
		var b [4]byte
		rand.Read(b[:])
		id := int32(binary.BigEndian.Uint32(b[:]) & math.MaxInt32)
		if id != 0 && c.sessions[id] == nil {
			return id
		}
	}
}

// len is the number of open sessions.
func (c *fetchSessions) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sessions)
}

// nextSessionEpoch follows Kafka: after the largest epoch comes 1.
func nextSessionEpoch(e int32) int32 {
	if e == math.MaxInt32 {
		return 1
	}
	return e + 1
}

// The fetch sessions' metrics (docs/kafka.md), through the global meter
// provider lib/serve installs (a no-op in unit tests).
var (
	kafkaMeter    = otel.Meter("github.com/strata-mq/strata/services/kafka")
	fetchRequests = func() metric.Int64Counter {
		c, err := kafkaMeter.Int64Counter("strata.kafka.fetch.requests", metric.WithUnit("{request}"),
			metric.WithDescription("Kafka Fetch requests a listener served, by session: none (a sessionless full fetch), full (opened a session), incremental, error (unknown session or wrong epoch)."))
		if err != nil {
			panic(err)
		}
		return c
	}()
	fetchSessionsOpen = func() metric.Int64UpDownCounter {
		c, err := kafkaMeter.Int64UpDownCounter("strata.kafka.fetch.sessions", metric.WithUnit("{session}"),
			metric.WithDescription("Kafka fetch sessions (KIP-227) open on the process's listener."))
		if err != nil {
			panic(err)
		}
		return c
	}()
	fetchSessionEvictions = func() metric.Int64Counter {
		c, err := kafkaMeter.Int64Counter("strata.kafka.fetch.session.evictions", metric.WithUnit("{session}"),
			metric.WithDescription("Kafka fetch sessions evicted to make room for a new one."))
		if err != nil {
			panic(err)
		}
		return c
	}()
	sessionNone        = metric.WithAttributeSet(attribute.NewSet(attribute.String("session", "none")))
	sessionFull        = metric.WithAttributeSet(attribute.NewSet(attribute.String("session", "full")))
	sessionIncremental = metric.WithAttributeSet(attribute.NewSet(attribute.String("session", "incremental")))
	sessionError       = metric.WithAttributeSet(attribute.NewSet(attribute.String("session", "error")))
)
