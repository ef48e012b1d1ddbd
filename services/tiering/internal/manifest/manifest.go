// Package manifest keeps the per-partition manifest in the bucket: the
// record of which offset ranges (and leader epochs) live in which object.
//
// Layout (part of the format; see proto/strata/tiering/v1/tiering.proto):
//
//	<prefix>/<topic>-<topic_id>/<partition>/manifest.binpb
//	<prefix>/<topic>-<topic_id>/<partition>/<base offset, 20 digits>-<segment_id>.log
//	... .index, .timeindex and .txnindex beside it
//
// The manifest is a tieringv1.Manifest in protobuf binary encoding,
// replaced whole on every change with a conditional write (If-Match on the
// ETag it was read with, If-None-Match: * for the first), so concurrent
// writers never lose each other's updates: the loser reloads and retries.
// Objects are written before the manifest names them and deleted only after
// it stopped naming them, so the manifest never points at a missing or
// partial object, and the bucket alone lists and reads the tiered history.
//
// The manifest's log_start_offset outlives its segments (part of the
// format): when retention expires every segment it stays one past the last
// expired offset, so an empty manifest still says where the partition's
// log starts and where the next upload must begin.
package manifest

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/protobuf/proto"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
)

// FormatVersion is the manifest format this package reads and writes.
const FormatVersion = 1

// FileName is the manifest object's name inside a partition's directory.
const FileName = "manifest.binpb"

// topicIDLen is the length of a canonical UUID text.
const topicIDLen = 36

// Errors.
var (
	// ErrConflict: the manifest kept changing under us; the caller may retry.
	ErrConflict = errors.New("manifest: conflicting concurrent writes")
	// ErrFormat: the manifest object cannot be decoded or has an unknown
	// format version.
	ErrFormat = errors.New("manifest: unreadable manifest")
)

// Partition names one partition's manifest.
type Partition struct {
	Topic     string
	TopicID   string
	Partition int32
}

// Dir is the key prefix of a partition's objects, without a trailing slash.
func Dir(prefix string, p Partition) string {
	return path.Join(prefix, p.Topic+"-"+p.TopicID, strconv.Itoa(int(p.Partition)))
}

// Key is the key of a partition's manifest.
func Key(prefix string, p Partition) string { return Dir(prefix, p) + "/" + FileName }

// SegmentKeys returns the keys of a segment's .log, .index and .timeindex
// objects.
func SegmentKeys(prefix string, p Partition, base int64, segmentID string) (log, index, timeIndex string) {
	stem := segmentStem(prefix, p, base, segmentID)
	return stem + ".log", stem + ".index", stem + ".timeindex"
}

// TxnIndexKey returns the key of a segment's aborted transaction index
// object (.txnindex), stored only when the segment holds an abort marker.
func TxnIndexKey(prefix string, p Partition, base int64, segmentID string) string {
	return segmentStem(prefix, p, base, segmentID) + ".txnindex"
}

func segmentStem(prefix string, p Partition, base int64, segmentID string) string {
	return fmt.Sprintf("%s/%020d-%s", Dir(prefix, p), base, segmentID)
}

// ObjectKeys returns the keys of every object an entry names: its .log
// and those of its indexes it has.
func ObjectKeys(e *tieringv1.SegmentEntry) []string {
	var out []string
	for _, k := range []string{e.GetObjectKey(), e.GetOffsetIndexKey(), e.GetTimeIndexKey(), e.GetTxnIndexKey()} {
		if k != "" {
			out = append(out, k)
		}
	}
	return out
}

// Store reads and writes manifests in a bucket under a key prefix.
type Store struct {
	Bucket objstore.Bucket
	Prefix string // may be empty
	// Now is the clock for updated_at_ms. Default time.Now.
	Now func() time.Time
}

// New returns a manifest (version 0) for a partition that has none.
func New(p Partition) *tieringv1.Manifest {
	return &tieringv1.Manifest{FormatVersion: FormatVersion, Topic: p.Topic, TopicId: p.TopicID, Partition: p.Partition,
		LogStartOffset: -1, LeaderEpoch: -1}
}

// errVersion is wrapped, with ErrFormat, by Decode's error for a manifest
// of another format version: reading it again cannot help.
var errVersion = errors.New("unknown format version")

// Decode decodes a manifest object. Every error wraps ErrFormat: bytes
// that are not a Manifest, or one of a format version this build does not
// read.
func Decode(data []byte) (*tieringv1.Manifest, error) {
	m := &tieringv1.Manifest{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if v := m.GetFormatVersion(); v != FormatVersion {
		return nil, fmt.Errorf("%w: %w %d, this build reads %d", ErrFormat, errVersion, v, FormatVersion)
	}
	return m, nil
}

// Load reads a partition's manifest and the ETag to update it with. A
// partition without one gets New(p) and an empty ETag.
func (s *Store) Load(ctx context.Context, p Partition) (*tieringv1.Manifest, string, error) {
	key := Key(s.Prefix, p)
	type loaded struct {
		m    *tieringv1.Manifest
		etag string
	}
	// A store that writes in place (the embedded server) can show a torn
	// object to a read racing a write (undecodable, or cut short: an
	// unexpected EOF from the client); a second read sees a whole one.
	got, err := backoff.Retry(ctx, func() (loaded, error) {
		data, etag, err := s.Bucket.Get(ctx, key)
		if errors.Is(err, objstore.ErrNotFound) {
			return loaded{New(p), ""}, nil
		}
		if err != nil {
			return loaded{}, err
		}
		m, err := Decode(data)
		if errors.Is(err, errVersion) {
			return loaded{}, backoff.Permanent(fmt.Errorf("%s: %w", key, err))
		}
		if err != nil {
			return loaded{}, fmt.Errorf("%s: %w", key, err)
		}
		return loaded{m, etag}, nil
	}, backoff.WithBackOff(retryBackoff(20*time.Millisecond)), backoff.WithMaxTries(loadTries))
	if err != nil {
		return nil, "", err
	}
	return got.m, got.etag, nil
}

// How often Load reads a manifest that fails to read, and how often Update
// writes one that another writer changed first.
const (
	loadTries   = 3
	updateTries = 8
)

// retryBackoff is the wait between tries of Load and Update: from first,
// doubling, with jitter so that writers racing on one manifest part.
func retryBackoff(first time.Duration) backoff.BackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     first,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         time.Second,
	}
}

// ErrUnchanged may be returned by an Update function to leave the manifest
// as it is; Update then returns the current manifest and no error.
var ErrUnchanged = errors.New("manifest: unchanged")

// Update applies fn to the current manifest and writes the result with a
// conditional put, bumping the version. When another writer got there
// first it reloads and applies fn again, up to 8 times, then fails with
// ErrConflict. fn must be deterministic on its input and may be called
// several times.
func (s *Store) Update(ctx context.Context, p Partition, fn func(m *tieringv1.Manifest) error) (*tieringv1.Manifest, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	key := Key(s.Prefix, p)
	errLost := fmt.Errorf("%w: %s", ErrConflict, key)
	return backoff.Retry(ctx, func() (*tieringv1.Manifest, error) {
		cur, etag, err := s.Load(ctx, p)
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		m := proto.Clone(cur).(*tieringv1.Manifest)
		if err := fn(m); errors.Is(err, ErrUnchanged) {
			return cur, nil
		} else if err != nil {
			return nil, backoff.Permanent(err)
		}
		sort.SliceStable(m.Segments, func(i, j int) bool { return m.Segments[i].GetBaseOffset() < m.Segments[j].GetBaseOffset() })
		m.Version = cur.GetVersion() + 1
		m.UpdatedAtMs = now().UnixMilli()
		m.LogStartOffset = logStart(cur.GetLogStartOffset(), m)
		data, err := proto.Marshal(m)
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		if _, err := s.Bucket.PutIf(ctx, key, data, etag); errors.Is(err, objstore.ErrPrecondition) {
			return nil, errLost // another writer got there first: reload and apply fn again
		} else if err != nil {
			return nil, backoff.Permanent(err)
		}
		return m, nil
	}, backoff.WithBackOff(retryBackoff(10*time.Millisecond)), backoff.WithMaxTries(updateTries))
}

// logStart is the log start offset a manifest is written with: the first
// active entry's base offset; with no active entry, one past the last
// offset any entry (being deleted) covers, or else the previous log start.
// So once the tier has held anything it keeps its extent when retention
// empties it: the log start is then where the next upload must begin, as
// Kafka's log start offset stays past the segments remote retention
// deleted. -1 only for a tier that never held anything (or a manifest an
// older build emptied).
func logStart(prev int64, m *tieringv1.Manifest) int64 {
	if a := Active(m); len(a) > 0 {
		return a[0].GetBaseOffset()
	}
	start := prev
	for _, e := range m.GetSegments() {
		start = max(start, e.GetLastOffset()+1)
	}
	return start
}

// Partitions lists every partition that has a manifest under the prefix,
// from the bucket alone, sorted by topic, topic id and partition.
func (s *Store) Partitions(ctx context.Context, topic string) ([]Partition, error) {
	root := s.Prefix
	if root != "" {
		root += "/"
	}
	listPrefix := root
	if topic != "" {
		listPrefix += topic + "-"
	}
	var out []Partition
	err := s.Bucket.List(ctx, listPrefix, func(o objstore.ObjectInfo) error {
		rest := strings.TrimPrefix(o.Key, root)
		parts := strings.Split(rest, "/")
		if len(parts) != 3 || parts[2] != FileName {
			return nil
		}
		dir := parts[0]
		if len(dir) < topicIDLen+2 || dir[len(dir)-topicIDLen-1] != '-' {
			return nil
		}
		name, id := dir[:len(dir)-topicIDLen-1], dir[len(dir)-topicIDLen:]
		if topic != "" && name != topic {
			return nil
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil {
			return nil
		}
		out = append(out, Partition{Topic: name, TopicID: id, Partition: int32(n)})
		return nil
	})
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.TopicID != b.TopicID {
			return a.TopicID < b.TopicID
		}
		return a.Partition < b.Partition
	})
	return out, err
}

// Active returns the readable entries, ordered by base offset.
func Active(m *tieringv1.Manifest) []*tieringv1.SegmentEntry {
	var out []*tieringv1.SegmentEntry
	for _, e := range m.GetSegments() {
		if e.GetState() == tieringv1.SegmentState_SEGMENT_STATE_ACTIVE {
			out = append(out, e)
		}
	}
	return out
}

// LogStart is the first offset the tier serves: the manifest's
// log_start_offset, raised to its delete_records_offset (DeleteRecords)
// but never past TieredEnd, where a delete beyond everything tiered leaves
// the tier empty; -1 when the tier never held anything. Readers and
// GetTieredState use it; uploads keep to log_start_offset, the first
// offset the active segments hold.
func LogStart(m *tieringv1.Manifest) int64 {
	start, end := m.GetLogStartOffset(), TieredEnd(m)
	if end < 0 {
		return -1
	}
	return min(max(start, m.GetDeleteRecordsOffset()), end)
}

// TieredEnd is one past the last offset the manifest holds: its log start
// when retention emptied it (the tier is empty there), -1 when it never
// held anything.
func TieredEnd(m *tieringv1.Manifest) int64 {
	a := Active(m)
	if len(a) == 0 {
		return max(m.GetLogStartOffset(), -1)
	}
	return a[len(a)-1].GetLastOffset() + 1
}

// SizeBytes is the total size of the active .log objects.
func SizeBytes(m *tieringv1.Manifest) int64 {
	var n int64
	for _, e := range Active(m) {
		n += e.GetSizeBytes()
	}
	return n
}

// Find returns the active entry holding offset, or the first active entry
// after it when offset falls in a gap compaction left; nil when none.
func Find(m *tieringv1.Manifest, offset int64) *tieringv1.SegmentEntry {
	a := Active(m)
	i := sort.Search(len(a), func(i int) bool { return a[i].GetLastOffset() >= offset })
	if i == len(a) {
		return nil
	}
	return a[i]
}
