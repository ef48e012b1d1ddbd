package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// Offset is where a consumer starts reading a partition.
type Offset struct {
	kind offsetKind
	at   int64 // offset, Unix ms or distance from the end, by kind
}

type offsetKind int8

const (
	offsetStart offsetKind = iota
	offsetEnd
	offsetExact
	offsetTime
	offsetEndMinus
)

// StartOffset starts at the log start offset: the oldest record kept.
func StartOffset() Offset { return Offset{kind: offsetStart} }

// EndOffset starts at the high watermark: only records produced from now on.
func EndOffset() Offset { return Offset{kind: offsetEnd} }

// AtOffset starts at an exact offset. An offset outside the log is moved
// to the nearest end of the log, as for any out-of-range position.
func AtOffset(o int64) Offset { return Offset{kind: offsetExact, at: o} }

// AtTimestamp starts at the first record whose timestamp is at or after t,
// or at the end when there is none.
func AtTimestamp(t time.Time) Offset { return Offset{kind: offsetTime, at: t.UnixMilli()} }

// EndOffsetMinus starts n records before the high watermark (at the log
// start when the log is shorter).
func EndOffsetMinus(n int64) Offset { return Offset{kind: offsetEndMinus, at: n} }

func (o Offset) String() string {
	switch o.kind {
	case offsetStart:
		return "start"
	case offsetEnd:
		return "end"
	case offsetExact:
		return fmt.Sprint(o.at)
	case offsetTime:
		return fmt.Sprintf("@%d", o.at)
	}
	return fmt.Sprintf("end-%d", o.at)
}

// Consumer reads assigned partitions from their leaders.
//
// A consumer keeps one position per partition: the next offset to return.
// Positions move only past records it returned (or past offsets a batch
// covers without records), so when a partition's leader changes the
// consumer refreshes its metadata and goes on from its own position on the
// new leader: nothing is skipped or returned twice. A position outside the
// log (retention deleted it, or an unclean election truncated it) moves to
// the nearest end of the log that the leader reports. A leader that
// answers with a throttle time (the principal is over its fetch quota) is
// not asked again until it has passed; partitions led by other nodes are
// fetched meanwhile.
//
// Assign, Unassign, Position, HighWatermark and LogStartOffset are safe to call
// concurrently with Poll; Poll itself must not be called concurrently.
type Consumer struct {
	cfg     config
	cl      *cluster
	tracing *tracing

	mu      sync.Mutex
	closed  bool
	cursors map[topicPartition]*cursor
	changed chan struct{}            // closed and replaced when the assignment changes
	fetches map[string]*pendingFetch // the Fetch in flight to each leader node (fetch)
	served  uint64                   // answers with records taken so far; orders a Fetch's partitions (startFetchLocked)

	ctx       context.Context // ends at Close, and with it every Fetch in flight
	cancel    context.CancelFunc
	fetchDone chan struct{} // a Fetch in flight was answered; capacity 1

	// The run of failed Poll rounds in progress, for OnRetry and
	// DeliveryTimeout; owned by Poll. failingSince is zero when the last
	// round succeeded.
	failingSince time.Time
	failures     int
	// refusal is a partition's refusal (ErrPermissionDenied) that came
	// with other partitions' records; the next Poll returns it. Owned by
	// Poll.
	refusal error

	closeOnce sync.Once
}

// cursor is the state of one assigned partition.
type cursor struct {
	tp    topicPartition
	start Offset
	pos   int64 // next offset to return; -1 until resolved from start
	hw    int64 // last high watermark seen; -1 until one is seen
	lso   int64 // last log start offset seen; -1 until one is seen
	// served is Consumer.served when the partition last had records; 0
	// before. Guarded by Consumer.mu.
	served uint64
}

// NewConsumer returns a consumer that bootstraps from the gateway at the
// given base URL (http:// or https://). It validates the options and
// reads the TLS files they name (TLSCA, ClientCertificate), and makes no
// call.
func NewConsumer(gateway string, opts ...ConsumerOpt) (*Consumer, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.applyConsumer(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if gateway == "" {
		return nil, errors.New("client: no gateway address")
	}
	if err := cfg.openTransport(); err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, cursors: map[topicPartition]*cursor{}, changed: make(chan struct{}),
		fetches: map[string]*pendingFetch{}, fetchDone: make(chan struct{}, 1)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.cl = newCluster(gateway, &c.cfg)
	c.tracing = newTracing(&c.cfg)
	return c, nil
}

// Assign replaces the assignment: the given partitions of each topic, each
// starting at its Offset. Partitions assigned before and named again start
// over at the given Offset.
func (c *Consumer) Assign(assignment map[string]map[int32]Offset) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cursors = map[topicPartition]*cursor{}
	for topic, parts := range assignment {
		for p, off := range parts {
			tp := topicPartition{topic, p}
			c.cursors[tp] = &cursor{tp: tp, start: off, pos: -1, hw: -1, lso: -1}
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// Unassign stops reading one partition.
func (c *Consumer) Unassign(topic string, partition int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cursors, topicPartition{topic, partition})
}

// Position returns the next offset the consumer returns from a partition;
// false when the partition is not assigned or its start is not resolved.
func (c *Consumer) Position(topic string, partition int32) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.cursors[topicPartition{topic, partition}]
	if cur == nil || cur.pos < 0 {
		return 0, false
	}
	return cur.pos, true
}

// LogStartOffset returns the last log start offset seen for an assigned
// partition: the first offset the log still holds. Records below it were
// deleted (retention, or a deletion of records up to an offset).
func (c *Consumer) LogStartOffset(topic string, partition int32) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.cursors[topicPartition{topic, partition}]
	if cur == nil || cur.lso < 0 {
		return 0, false
	}
	return cur.lso, true
}

// HighWatermark returns the last high watermark a fetch of the partition
// reported; false before the first.
func (c *Consumer) HighWatermark(topic string, partition int32) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.cursors[topicPartition{topic, partition}]
	if cur == nil || cur.hw < 0 {
		return 0, false
	}
	return cur.hw, true
}

// Partitions returns the number of partitions of a topic, asking the
// gateway when the topic is not cached yet; *UnknownTopicError when the
// topic does not exist.
func (c *Consumer) Partitions(ctx context.Context, topic string) (int32, error) {
	t, err := c.cl.topic(ctx, topic)
	if err != nil {
		return 0, err
	}
	return int32(len(t.parts)), nil
}

// ListOffsets answers, for each partition of the topic given, the offset
// that off resolves to now (StartOffset: log start; EndOffset: high
// watermark; AtTimestamp: first offset at or after the time). Transient
// failures are retried (and told to OnRetry) until ctx ends or, when
// DeliveryTimeout is set, for that long (then ErrDeliveryTimeout).
func (c *Consumer) ListOffsets(ctx context.Context, topic string, partitions []int32, off Offset) (map[int32]int64, error) {
	curs := make([]*cursor, len(partitions))
	for i, p := range partitions {
		curs[i] = &cursor{tp: topicPartition{topic, p}, start: off, pos: -1}
	}
	bo := newBackoff(&c.cfg)
	since := time.Now()
	for attempt := 1; ; attempt++ {
		err := c.resolve(ctx, curs)
		done := true
		for _, cur := range curs {
			if cur.pos < 0 {
				done = false
			}
		}
		if done {
			out := make(map[int32]int64, len(curs))
			for _, cur := range curs {
				out[cur.tp.partition] = cur.pos
			}
			return out, nil
		}
		if err != nil && classify(err) == actFail {
			return nil, err
		}
		wait := bo.NextBackOff()
		if err != nil {
			if err := c.retryOrGiveUp(err, since, attempt, wait); err != nil {
				return nil, err
			}
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// retryOrGiveUp decides about a retry of a call that has failed attempt
// times in a row since since, the last time with err, before a wait: it
// returns the error to give up with when the wait would end after the
// DeliveryTimeout (when one is set), else reports the retry to OnRetry
// and returns nil.
func (c *Consumer) retryOrGiveUp(err error, since time.Time, attempt int, wait time.Duration) error {
	if c.cfg.deliveryTimeoutSet && time.Now().Add(wait).After(since.Add(c.cfg.deliveryTimeout)) {
		return fmt.Errorf("%w: %w", ErrDeliveryTimeout, err)
	}
	c.cfg.retried(retryEvent(err, attempt, wait))
	return nil
}

// Close releases the consumer's goroutines and connections. Poll returns
// ErrClosed afterwards. Safe to call more than once.
func (c *Consumer) Close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
		c.cancel()
		c.cl.close()
	})
}

// Poll returns the next records of the assigned partitions, waiting until
// at least one is available or ctx ends (then it returns ctx.Err()).
// Records of one partition come in offset order. Transient failures
// (leader changes, unavailable nodes) are retried inside Poll; it returns
// an error for what retrying cannot fix: a topic that no longer exists
// (*UnknownTopicError), a batch that cannot be decoded
// (*CorruptBatchError, unless SkipCorruptBatches), a position the log does
// not hold although it lies within the log's range (ErrOffsetOutOfRange),
// credentials or permissions the cluster refuses (ErrUnauthenticated,
// ErrPermissionDenied),
// calls that kept failing for longer than DeliveryTimeout when one is set
// (ErrDeliveryTimeout), or a closed consumer. OnRetry is told about each
// retry.
func (c *Consumer) Poll(ctx context.Context) ([]*Record, error) {
	start := time.Now()
	bo := newBackoff(&c.cfg)
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		curs := make([]*cursor, 0, len(c.cursors))
		for _, cur := range c.cursors {
			curs = append(curs, cur)
		}
		changed := c.changed
		c.mu.Unlock()
		if err := c.refusal; err != nil {
			c.refusal = nil
			return nil, err
		}
		if len(curs) == 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-changed:
				continue
			}
		}
		sort.Slice(curs, func(i, j int) bool {
			a, b := curs[i].tp, curs[j].tp
			return a.topic < b.topic || a.topic == b.topic && a.partition < b.partition
		})

		var unresolved []*cursor
		for _, cur := range curs {
			if c.snapshotPos(cur) < 0 {
				unresolved = append(unresolved, cur)
			}
		}
		var err error
		if len(unresolved) > 0 {
			err = c.resolve(ctx, unresolved)
		}
		recs, ferr := c.fetch(ctx, curs)
		if len(recs) > 0 {
			if ferr != nil && refused(ferr) {
				c.refusal = ferr
			}
			c.failingSince, c.failures = time.Time{}, 0
			c.tracing.received(ctx, start, recs)
			return recs, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		err = errors.Join(err, ferr)
		if err == nil {
			bo.Reset()
			c.failingSince, c.failures = time.Time{}, 0
			if c.cfg.fetchMaxWait < 10*time.Millisecond {
				// Fetches do not long-poll: pace the loop.
				if err := sleep(ctx, c.cfg.retryBackoff); err != nil {
					return nil, err
				}
			}
			continue
		}
		if fatal := c.fatal(err); fatal != nil {
			return nil, fatal
		}
		if c.failingSince.IsZero() {
			c.failingSince = time.Now()
		}
		c.failures++
		wait := bo.NextBackOff()
		if err := c.retryOrGiveUp(err, c.failingSince, c.failures, wait); err != nil {
			c.failingSince, c.failures = time.Time{}, 0 // the next Poll gets a new period
			return nil, err
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// fatal picks out the errors Poll returns rather than retries.
func (c *Consumer) fatal(err error) error {
	var ute *UnknownTopicError
	if errors.As(err, &ute) {
		return ute
	}
	var cbe *CorruptBatchError
	if errors.As(err, &cbe) {
		return cbe
	}
	if errors.Is(err, ErrOffsetOutOfRange) || refused(err) {
		return err
	}
	if errors.Is(err, recordbatch.ErrCRC) || errors.Is(err, recordbatch.ErrCorrupt) ||
		errors.Is(err, recordbatch.ErrShortBatch) || errors.Is(err, recordbatch.ErrBadMagic) ||
		errors.Is(err, recordbatch.ErrBadLength) || errors.Is(err, recordbatch.ErrCodec) {
		return err
	}
	return nil
}

func (c *Consumer) snapshotPos(cur *cursor) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cur.pos
}

// leaderGroup is the partitions one node leads.
type leaderGroup struct {
	addr  string
	curs  []*cursor
	epoch []int32
}

// byLeader groups cursors by their partition's leader. Cursors whose
// leader is unknown are left out, with an error that makes the caller
// refresh and retry.
func (c *Consumer) byLeader(ctx context.Context, curs []*cursor) (map[string]*leaderGroup, error) {
	groups := map[string]*leaderGroup{}
	var errs []error
	for _, cur := range curs {
		info, _, err := c.cl.leader(ctx, cur.tp.topic, cur.tp.partition)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		g := groups[info.addr]
		if g == nil {
			g = &leaderGroup{addr: info.addr}
			groups[info.addr] = g
		}
		g.curs = append(g.curs, cur)
		g.epoch = append(g.epoch, info.epoch)
	}
	err := errors.Join(errs...)
	if err != nil {
		_ = c.cl.refresh(ctx)
	}
	return groups, err
}

// resolve turns start Offsets into positions with ListOffsets.
func (c *Consumer) resolve(ctx context.Context, curs []*cursor) error {
	var exact []*cursor
	var lookup []*cursor
	for _, cur := range curs {
		if cur.start.kind == offsetExact {
			exact = append(exact, cur)
		} else {
			lookup = append(lookup, cur)
		}
	}
	c.mu.Lock()
	for _, cur := range exact {
		if cur.pos < 0 {
			cur.pos = max(cur.start.at, 0)
		}
	}
	c.mu.Unlock()
	if len(lookup) == 0 {
		return nil
	}
	groups, err := c.byLeader(ctx, lookup)
	errs := []error{err}
	for _, g := range groups {
		req := &storagev1.ListOffsetsRequest{}
		if c.cfg.readCommitted {
			// As Kafka's consumer: a committed reader's "latest" is the
			// last stable offset, not the high watermark.
			req.IsolationLevel = commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
		}
		for i, cur := range g.curs {
			lp := &storagev1.ListOffsetsPartition{Topic: cur.tp.topic, Partition: cur.tp.partition, CurrentLeaderEpoch: g.epoch[i]}
			switch cur.start.kind {
			case offsetStart:
				lp.Spec = storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST
			case offsetTime:
				lp.Spec, lp.TimestampMs = storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, cur.start.at
			default:
				lp.Spec = storagev1.OffsetSpec_OFFSET_SPEC_LATEST
			}
			req.Partitions = append(req.Partitions, lp)
		}
		if err := c.cl.waitThrottle(ctx, g.addr); err != nil {
			errs = append(errs, err)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
		resp, err := c.cl.storage(g.addr).ListOffsets(rctx, connect.NewRequest(req))
		cancel()
		if err != nil {
			errs = append(errs, scopedGroup(g, fromConnect(err)))
			_ = c.cl.refresh(ctx)
			continue
		}
		for i, r := range resp.Msg.GetPartitions() {
			if i >= len(g.curs) {
				break
			}
			cur := g.curs[i]
			if r.GetError() != nil {
				errs = append(errs, c.partitionError(ctx, cur, fromDetail(r.GetError())))
				continue
			}
			off := r.GetOffset()
			if cur.start.kind == offsetEndMinus {
				off = max(off-cur.start.at, 0)
			}
			c.mu.Lock()
			if cur.pos < 0 {
				cur.pos = off
			}
			c.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// partitionError handles a per-partition failure: refresh metadata for
// leadership errors, move an out-of-range position to the log's nearest
// end, and report an unknown topic.
func (c *Consumer) partitionError(ctx context.Context, cur *cursor, err error) error {
	var e *Error
	if errors.As(err, &e) && e.Reason == commonv1.Reason_REASON_OFFSET_OUT_OF_RANGE {
		// A position outside the log may mean the topic was deleted and
		// created again under the same name: refresh the metadata before
		// reading on, so the records read next carry the new topic id. A
		// refresh that fails (a short Poll deadline on a loaded machine)
		// leaves the position where it is: the next fetch is refused again
		// and refreshes again, rather than reading on under the old id.
		if rerr := c.cl.refresh(ctx); rerr != nil {
			return scoped(cur.tp, fmt.Errorf("client: %s/%d: refreshing metadata after an out-of-range answer: %w",
				cur.tp.topic, cur.tp.partition, rerr))
		}
		if h := e.Detail.GetOffsetRange(); h != nil {
			c.mu.Lock()
			pos, moved := cur.pos, true
			if cur.pos >= 0 && cur.pos < h.GetLogStartOffset() {
				cur.pos = h.GetLogStartOffset()
			} else if cur.pos > h.GetHighWatermark() {
				cur.pos = h.GetHighWatermark()
			} else {
				moved = false
			}
			c.mu.Unlock()
			if moved {
				return nil
			}
			return fmt.Errorf("%w: %s/%d at offset %d (the log holds [%d, %d)): %w", ErrOffsetOutOfRange,
				cur.tp.topic, cur.tp.partition, pos, h.GetLogStartOffset(), h.GetHighWatermark(), err)
		}
		return fmt.Errorf("%w: %s/%d: %w", ErrOffsetOutOfRange, cur.tp.topic, cur.tp.partition, err)
	}
	if classify(err) == actRefresh {
		if !c.cl.applyHint(err) {
			_ = c.cl.refresh(ctx)
		}
		if c.cl.isMissing(cur.tp.topic) {
			return &UnknownTopicError{Topic: cur.tp.topic}
		}
	}
	return scoped(cur.tp, fmt.Errorf("client: %s/%d: %w", cur.tp.topic, cur.tp.partition, err))
}

// pendingFetch is a Fetch in flight to one leader node.
type pendingFetch struct {
	g      *leaderGroup
	req    *storagev1.FetchRequest
	cancel context.CancelFunc
	done   chan struct{} // closed when resp or err is set
	resp   *storagev1.FetchResponse
	err    error
}

// covers reports whether p asks for every partition of g at its current
// position and leader epoch. The caller holds c.mu.
func (p *pendingFetch) covers(g *leaderGroup) bool {
	for i, cur := range g.curs {
		found := false
		for j, pc := range p.g.curs {
			if pc == cur {
				found = p.req.GetPartitions()[j].GetFetchOffset() == cur.pos && p.g.epoch[j] == g.epoch[i]
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// fetch keeps one Fetch in flight to each leader node, covering every
// partition the consumer reads there, and returns the records of the
// answers that have arrived, waiting for the first when none has. A Fetch
// still in flight when Poll returns stays in flight for the next Poll, so
// a slower leader's answer is taken later instead of being canceled and
// asked again (which, while the faster leaders always had records, could
// starve its partitions). A Fetch whose partitions changed (assigned,
// resolved, moved by another leader's answer, or at a new leader epoch) is
// replaced; an answer for a position that moved meanwhile is dropped by
// take.
func (c *Consumer) fetch(ctx context.Context, curs []*cursor) ([]*Record, error) {
	var ready []*cursor
	c.mu.Lock()
	for _, cur := range curs {
		if cur.pos >= 0 {
			ready = append(ready, cur)
		}
	}
	c.mu.Unlock()
	groups := map[string]*leaderGroup{}
	var gerr error
	if len(ready) > 0 {
		groups, gerr = c.byLeader(ctx, ready)
	}
	c.mu.Lock()
	changed := c.changed
	for addr, p := range c.fetches {
		if g := groups[addr]; g == nil || !p.covers(g) {
			p.cancel()
			delete(c.fetches, addr)
		}
	}
	for addr, g := range groups {
		if c.fetches[addr] == nil {
			c.fetches[addr] = c.startFetchLocked(ctx, g)
		}
	}
	n := len(c.fetches)
	c.mu.Unlock()
	if n == 0 {
		return nil, gerr
	}
	for {
		recs, errs, any := c.takeArrived(ctx)
		if any {
			return recs, errors.Join(append(errs, gerr)...)
		}
		select {
		case <-ctx.Done():
			return nil, gerr
		case <-changed:
			return nil, gerr
		case <-c.fetchDone:
		}
	}
}

// startFetchLocked sends g's Fetch, once the node's throttle (throttle.go)
// has passed. It runs on until it is answered, it times out, it is
// replaced, or the consumer closes; Poll's ctx gives it its values (trace
// context) but not its end. The caller holds c.mu.
func (c *Consumer) startFetchLocked(ctx context.Context, g *leaderGroup) *pendingFetch {
	req := &storagev1.FetchRequest{
		MaxWaitMs: int32(c.cfg.fetchMaxWait / time.Millisecond),
		MinBytes:  1,
		MaxBytes:  int32(c.cfg.fetchMaxBytes),
	}
	if c.cfg.readCommitted {
		req.IsolationLevel = commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	// The partitions that had records longest ago go first, as Kafka's
	// consumers move a partition to the end of their order once it
	// returned records: a storage node lets only the first partition with
	// records go over fetchMaxBytes and fills the rest of it in request
	// order (KIP-74), so a fixed order would keep serving the first
	// partitions while they lag and leave the others waiting.
	order := make([]int, len(g.curs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return g.curs[order[a]].served < g.curs[order[b]].served })
	curs, epochs := make([]*cursor, len(order)), make([]int32, len(order))
	for i, j := range order {
		curs[i], epochs[i] = g.curs[j], g.epoch[j]
	}
	g.curs, g.epoch = curs, epochs
	for i, cur := range g.curs {
		req.Partitions = append(req.Partitions, &storagev1.FetchPartition{
			Topic: cur.tp.topic, Partition: cur.tp.partition, FetchOffset: cur.pos,
			CurrentLeaderEpoch: g.epoch[i], MaxBytes: int32(c.cfg.fetchMaxPartitionBytes),
		})
	}
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(c.ctx, cancel) // Close
	p := &pendingFetch{g: g, req: req, cancel: cancel, done: make(chan struct{})}
	stor := c.cl.storage(g.addr)
	go func() {
		defer cancel()
		defer stop()
		// A throttled node is asked once its throttle has passed; the
		// timeout starts then.
		err := c.cl.waitThrottle(base, g.addr)
		if err == nil {
			fctx, fcancel := context.WithTimeout(base, c.cfg.requestTimeout+c.cfg.fetchMaxWait)
			var resp *connect.Response[storagev1.FetchResponse]
			resp, err = stor.Fetch(fctx, connect.NewRequest(req))
			fcancel()
			if err == nil {
				p.resp = resp.Msg
				c.cl.throttle(g.addr, resp.Msg.GetThrottleTimeMs())
			}
		}
		p.err = err
		close(p.done)
		select {
		case c.fetchDone <- struct{}{}:
		default:
		}
	}()
	return p
}

// takeArrived applies every answer that has arrived; any reports whether
// there was one.
func (c *Consumer) takeArrived(ctx context.Context) (recs []*Record, errs []error, any bool) {
	c.mu.Lock()
	var arrived []*pendingFetch
	for addr, p := range c.fetches {
		select {
		case <-p.done:
			arrived = append(arrived, p)
			delete(c.fetches, addr)
		default:
		}
	}
	c.mu.Unlock()
	for _, p := range arrived {
		if p.err != nil {
			errs = append(errs, scopedGroup(p.g, fromConnect(p.err)))
			_ = c.cl.refresh(ctx)
			continue
		}
		got, err := c.take(ctx, p.g, p.req, p.resp)
		errs = append(errs, err)
		recs = append(recs, got...)
	}
	return recs, errs, len(arrived) > 0
}

// take applies one Fetch answer: decodes the batches of each partition
// from the position the request asked for and moves the positions.
func (c *Consumer) take(ctx context.Context, g *leaderGroup, req *storagev1.FetchRequest, resp *storagev1.FetchResponse) ([]*Record, error) {
	var recs []*Record
	var errs []error
	for i, pr := range resp.GetPartitions() {
		if i >= len(g.curs) {
			break
		}
		cur := g.curs[i]
		asked := req.GetPartitions()[i].GetFetchOffset()
		c.mu.Lock()
		current := c.cursors[cur.tp] == cur && cur.pos == asked
		c.mu.Unlock()
		if !current {
			continue // reassigned or moved while the fetch ran
		}
		if pr.GetError() != nil {
			errs = append(errs, c.partitionError(ctx, cur, fromDetail(pr.GetError())))
			continue
		}
		var topicID string
		if t := c.cl.known(cur.tp.topic); t != nil {
			topicID = t.id
		}
		got, next, bad := decodeFrom(cur.tp, topicID, pr.GetRecords(), asked, abortedFilter(req, pr))
		skip := bad != nil && c.cfg.onCorrupt != nil && bad.Next > next
		if skip {
			next = bad.Next
		}
		c.mu.Lock()
		cur.hw, cur.lso = pr.GetHighWatermark(), pr.GetLogStartOffset()
		cur.pos = next
		if len(pr.GetRecords()) > 0 {
			c.served++
			cur.served = c.served
		}
		c.mu.Unlock()
		recs = append(recs, got...)
		switch {
		case skip:
			c.cfg.onCorrupt(bad)
		case bad != nil:
			errs = append(errs, bad)
		}
	}
	return recs, errors.Join(errs...)
}

// decodeFrom decodes whole batches and returns the records at or after
// from, and the position after them. Records below from (the head of the
// first batch) are skipped; a batch cut short at the end is left for the
// next fetch; control batches, and the batches of aborted transactions
// that aborted drops (nil: none), move the position without records. A batch
// that does not decode stops it: the records before it are returned, the
// position stays before it, and bad says which batch and why. The records
// carry topicID (Record.TopicID).
func decodeFrom(tp topicPartition, topicID string, b []byte, from int64, aborted *recordbatch.AbortedFilter) (_ []*Record, _ int64, bad *CorruptBatchError) {
	pos := from
	var recs []*Record
	for len(b) > 0 {
		size, err := recordbatch.PeekSize(b)
		if err != nil || size > len(b) {
			break
		}
		batch, err := recordbatch.Decode(b[:size])
		if err != nil {
			bad = &CorruptBatchError{Topic: tp.topic, Partition: tp.partition, Offset: pos, Next: -1, Err: err}
			if h, herr := recordbatch.PeekHeader(b[:size]); herr == nil && h.NextOffset() > pos {
				bad.Offset, bad.Next = max(h.BaseOffset, pos), h.NextOffset()
			}
			return recs, pos, bad
		}
		whole := b[:size]
		b = b[size:]
		h := batch.Header
		if !aborted.Skip(h, whole) && !h.Control() {
			for _, r := range batch.Records {
				if r.Offset < pos {
					continue
				}
				rec := &Record{
					Topic: tp.topic, TopicID: topicID, Partition: tp.partition, Offset: r.Offset,
					Key: r.Key, Value: r.Value, Timestamp: time.UnixMilli(r.Timestamp),
					LeaderEpoch: h.PartitionLeaderEpoch,
				}
				if h.LogAppendTime() {
					rec.Timestamp = time.UnixMilli(h.MaxTimestamp)
				}
				for _, hd := range r.Headers {
					rec.Headers = append(rec.Headers, Header{Key: hd.Key, Value: hd.Value})
				}
				recs = append(recs, rec)
			}
		}
		pos = max(pos, h.NextOffset())
	}
	return recs, pos, nil
}

// abortedFilter is the filter of a read_committed answer's aborted
// transactions, nil for a read_uncommitted one.
func abortedFilter(req *storagev1.FetchRequest, pr *storagev1.FetchPartitionResult) *recordbatch.AbortedFilter {
	if req.GetIsolationLevel() != commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
		return nil
	}
	txns := make([]recordbatch.AbortedTxn, len(pr.GetAbortedTransactions()))
	for i, a := range pr.GetAbortedTransactions() {
		txns[i] = recordbatch.AbortedTxn{ProducerID: a.GetProducerId(), FirstOffset: a.GetFirstOffset()}
	}
	return recordbatch.NewAbortedFilter(txns)
}

// CorruptBatchError is what Poll returns when a partition holds a batch
// that cannot be decoded: its CRC matched (the bytes are the ones
// written) but its inside is broken, as only a log written before leaders
// validated produced batches can hold. The records before it have been
// returned; the partition's position stays at Offset, so Poll returns the
// error again until the position moves. To read on, losing the batch's
// records, name the partition again at Next (AddAssignment with
// AtOffset(Next)), or consume with SkipCorruptBatches.
type CorruptBatchError struct {
	Topic     string // topic of the partition
	Partition int32  // partition index
	Offset    int64  // where the consumer is stuck: the batch's first offset (or the start position, inside it)
	// Next is the offset just after the batch, from its header; -1 when
	// the header is unreadable too, and nothing says where the batch ends.
	Next int64
	// Err is why it does not decode; it wraps a recordbatch sentinel
	// (recordbatch.ErrCorrupt, ErrCRC, ...).
	Err error
}

func (e *CorruptBatchError) Error() string {
	span := ""
	if e.Next > e.Offset+1 {
		span = fmt.Sprintf(" (offsets %d to %d)", e.Offset, e.Next-1)
	}
	return fmt.Sprintf("client: topic %s partition %d offset %d: batch cannot be decoded%s: %v",
		e.Topic, e.Partition, e.Offset, span, e.Err)
}

func (e *CorruptBatchError) Unwrap() error { return e.Err }

// AddAssignment starts reading more partitions, each at its Offset,
// without touching the positions of partitions already assigned (a
// partition named again starts over at the given Offset). The group
// consumer uses it to add partitions during a rebalance.
func (c *Consumer) AddAssignment(assignment map[string]map[int32]Offset) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, parts := range assignment {
		for p, off := range parts {
			tp := topicPartition{topic, p}
			c.cursors[tp] = &cursor{tp: tp, start: off, pos: -1, hw: -1, lso: -1}
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
}
