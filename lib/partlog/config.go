package partlog

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/strata-mq/strata/lib/vfs"
)

// FlushMode says when appended bytes are fsynced.
type FlushMode uint8

// The flush modes. The zero value is FlushNone, Kafka's default.
const (
	// FlushNone never fsyncs on the append path: durability comes from
	// replication. Segments are still fsynced after a roll, by Flush and
	// by Close, and the recovery point follows those fsyncs.
	FlushNone FlushMode = iota
	// FlushInterval fsyncs in the background every Flush.Interval.
	FlushInterval
	// FlushSync acknowledges an append only after an fsync covers its
	// bytes. Concurrent appends share fsyncs (group commit).
	FlushSync
)

func (m FlushMode) String() string {
	switch m {
	case FlushNone:
		return "none"
	case FlushInterval:
		return "interval"
	case FlushSync:
		return "sync"
	}
	return fmt.Sprintf("flushmode(%d)", uint8(m))
}

// FlushPolicy is the flush mode and its interval.
type FlushPolicy struct {
	// Mode is when to fsync. Default FlushNone.
	Mode FlushMode
	// Interval is the fsync period for FlushInterval. Default 1s; ignored
	// by the other modes.
	Interval time.Duration
}

// Defaults. Byte and age defaults follow Kafka's topic defaults.
const (
	DefaultSegmentBytes       = 1 << 30
	DefaultSegmentAge         = 7 * 24 * time.Hour
	DefaultIndexIntervalBytes = 4096
	DefaultRetentionAge       = 7 * 24 * time.Hour
	DefaultRetentionBytes     = -1
	// DefaultMaxBatchBytes is 1 MiB of records plus 64 KiB of headroom for
	// the batch and record framing.
	DefaultMaxBatchBytes      = 1<<20 + 64<<10
	DefaultFlushInterval      = time.Second
	DefaultCheckpointInterval = time.Minute
	// DefaultProducerExpiry is Kafka's producer.id.expiration.ms.
	DefaultProducerExpiry = 24 * time.Hour

	// maxAppendBytes caps one append so that positions in a segment always
	// fit the index's uint32 (a segment holds at most SegmentBytes plus one
	// append).
	maxAppendBytes = 1 << 30
	// maxSegmentBytes is the largest SegmentBytes accepted.
	maxSegmentBytes = math.MaxInt32
)

// Config is the per-partition log configuration. Zero fields take the
// documented default, so the zero Config is a valid Kafka-default log.
type Config struct {
	// SegmentBytes rolls the active segment when an append would take it
	// past this size (Kafka's segment.bytes). Default 1 GiB, at most
	// 2 GiB-1. An append larger than this goes alone into a fresh segment.
	SegmentBytes int64
	// SegmentAge rolls the active segment once it has existed this long
	// (Kafka's segment.ms), measured from when this process created or
	// opened it. Default 7 days.
	SegmentAge time.Duration
	// SegmentJitter (Kafka's segment.jitter.ms) lets each segment roll by
	// age up to this much earlier, an amount drawn at random once per
	// segment, so the segments of many partitions do not all roll at
	// once. Default 0: none; at most SegmentAge counts.
	SegmentJitter time.Duration
	// IndexIntervalBytes is how many log bytes go between two entries of
	// the sparse offset index (Kafka's index.interval.bytes). Default 4096.
	IndexIntervalBytes int
	// RetentionAge deletes sealed segments whose newest record is older
	// than this (Kafka's retention.ms). Default 7 days; negative keeps
	// segments forever.
	RetentionAge time.Duration
	// RetentionBytes deletes the oldest sealed segments while the log is
	// larger than this (Kafka's retention.bytes). Default and any negative
	// value: no size limit. Zero is taken as the default.
	RetentionBytes int64
	// Flush is the fsync policy. Default FlushNone.
	Flush FlushPolicy
	// MaxBatchBytes rejects any batch larger than this (Kafka's
	// max.message.bytes). Default 1 MiB + 64 KiB.
	MaxBatchBytes int
	// CheckpointInterval is how often the recovery point and high
	// watermark are written in the background. Default 1 minute; negative
	// disables the background writes (Flush and Close still write).
	CheckpointInterval time.Duration
	// ProducerExpiry forgets an idempotent producer this long after the
	// log last saw a batch of it (Kafka's producer.id.expiration.ms); it
	// is checked with the background checkpoints and when a producer
	// snapshot is written or read. Default 24h; negative never forgets.
	ProducerExpiry time.Duration
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.SegmentAge == 0 {
		c.SegmentAge = DefaultSegmentAge
	}
	if c.IndexIntervalBytes == 0 {
		c.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if c.RetentionAge == 0 {
		c.RetentionAge = DefaultRetentionAge
	}
	if c.RetentionBytes == 0 {
		c.RetentionBytes = DefaultRetentionBytes
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.Flush.Interval == 0 {
		c.Flush.Interval = DefaultFlushInterval
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = DefaultCheckpointInterval
	}
	if c.ProducerExpiry == 0 {
		c.ProducerExpiry = DefaultProducerExpiry
	}
	return c
}

// Validate reports every problem with the configuration (after defaults
// are applied) joined into one error, or nil.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("partlog: config: "+format, args...))
	}
	if c.SegmentBytes < 64 || c.SegmentBytes > maxSegmentBytes {
		bad("SegmentBytes %d outside [64, %d]", c.SegmentBytes, int64(maxSegmentBytes))
	}
	if c.SegmentAge < 0 {
		bad("SegmentAge %v is negative", c.SegmentAge)
	}
	if c.SegmentJitter < 0 {
		bad("SegmentJitter %v is negative", c.SegmentJitter)
	}
	if c.IndexIntervalBytes < 0 {
		bad("IndexIntervalBytes %d is negative", c.IndexIntervalBytes)
	}
	if c.MaxBatchBytes < 61 || c.MaxBatchBytes > maxAppendBytes {
		bad("MaxBatchBytes %d outside [61, %d]", c.MaxBatchBytes, maxAppendBytes)
	}
	switch c.Flush.Mode {
	case FlushNone, FlushSync:
	case FlushInterval:
		if c.Flush.Interval < 0 {
			bad("Flush.Interval %v is negative", c.Flush.Interval)
		}
	default:
		bad("unknown Flush.Mode %d", c.Flush.Mode)
	}
	return errors.Join(errs...)
}

// Option configures Open. Each option's comment states its default.
type Option func(*options)

type options struct {
	fs        vfs.FS           // filesystem holding the directory
	clock     func() time.Time // wall clock for roll, retention and append time
	logger    *slog.Logger     // where recovery and failures are reported
	onFailure func(error)      // called once when the log fails; may be nil
}

// WithFS sets the filesystem. Default vfs.Default (the OS); nil is a no-op.
func WithFS(fs vfs.FS) Option {
	return func(o *options) {
		if fs != nil {
			o.fs = fs
		}
	}
}

// WithClock sets the wall clock used to roll segments by age, apply
// retention by time and stamp LogAppendTime. Default time.Now; nil is a
// no-op.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.clock = now
		}
	}
}

// WithLogger sets the logger for recovery and failure reports. Default:
// discard; nil is a no-op.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithFailureHook sets a function called once, from the goroutine whose
// write or fsync failed, when the log fails (every later write returns
// ErrFailed until the log is reopened). It must not call back into the
// log. Default none; nil is a no-op.
func WithFailureHook(fn func(err error)) Option {
	return func(o *options) {
		if fn != nil {
			o.onFailure = fn
		}
	}
}

func buildOptions(opts []Option) options {
	o := options{
		fs:     vfs.Default,
		clock:  time.Now,
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
