package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

// Opt configures both producers and consumers: the transport and metadata
// settings they share. Every option is checked once, when NewProducer or
// NewConsumer validates the whole configuration against the limits table.
type Opt interface {
	ProducerOpt
	ConsumerOpt
}

// ProducerOpt configures a Producer.
type ProducerOpt interface{ applyProducer(*config) }

// ConsumerOpt configures a Consumer.
type ConsumerOpt interface{ applyConsumer(*config) }

type commonOpt func(*config)

func (o commonOpt) applyProducer(c *config) { o(c) }
func (o commonOpt) applyConsumer(c *config) { o(c) }

type producerOpt func(*config)

func (o producerOpt) applyProducer(c *config) { o(c) }

type consumerOpt func(*config)

func (o consumerOpt) applyConsumer(c *config) { o(c) }

// Acks says when a produced batch counts as delivered.
type Acks int8

const (
	// AcksAll waits until every in-sync replica has the batch (acks=all).
	// The default, and the only level idempotence works with.
	AcksAll Acks = iota
	// AcksLeader waits for the leader's local append only (acks=1).
	AcksLeader
	// AcksNone does not wait for the append (acks=0); offsets are -1.
	AcksNone
)

// String names the level as the CLI's --acks flag does.
func (a Acks) String() string {
	switch a {
	case AcksAll:
		return "all"
	case AcksLeader:
		return "leader"
	case AcksNone:
		return "none"
	}
	return fmt.Sprintf("acks(%d)", int8(a))
}

// ParseAcks parses "all" (or "-1"), "leader" (or "1") and "none" (or "0").
func ParseAcks(s string) (Acks, error) {
	switch strings.ToLower(s) {
	case "all", "-1":
		return AcksAll, nil
	case "leader", "1":
		return AcksLeader, nil
	case "none", "0":
		return AcksNone, nil
	}
	return 0, fmt.Errorf("acks must be all, leader or none, not %q", s)
}

// Compression is the codec a producer compresses batches with. The values
// are Kafka's (and the batch header's).
type Compression int8

// The codecs Strata supports.
const (
	NoCompression     = Compression(recordbatch.CodecNone)
	GzipCompression   = Compression(recordbatch.CodecGzip)
	SnappyCompression = Compression(recordbatch.CodecSnappy)
	LZ4Compression    = Compression(recordbatch.CodecLZ4)
	ZstdCompression   = Compression(recordbatch.CodecZstd)
)

// String names the codec as Kafka's compression.type does.
func (c Compression) String() string { return recordbatch.Codec(c).String() }

// ParseCompression parses none, gzip, snappy, lz4 or zstd.
func ParseCompression(s string) (Compression, error) {
	for c := NoCompression; c <= ZstdCompression; c++ {
		if strings.EqualFold(s, c.String()) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("compression must be none, gzip, snappy, lz4 or zstd, not %q", s)
}

// config holds every setting; defaultConfig gives the documented defaults.
type config struct {
	// shared
	httpClient       connect.HTTPClient
	connectOpts      []connect.ClientOption
	requestTimeout   time.Duration
	metadataMaxAge   time.Duration
	unknownTopicWait time.Duration
	retryBackoff     time.Duration
	maxRetryBackoff  time.Duration
	onRetry          func(RetryEvent) // nil: retries are not reported
	// deliveryTimeout bounds a produced record (default 2m) and, once
	// set with DeliveryTimeout (deliveryTimeoutSet), a consumer's run of
	// failed fetches (default unlimited).
	deliveryTimeout    time.Duration
	deliveryTimeoutSet bool

	// producer
	linger          time.Duration
	maxBatchBytes   int64
	compression     Compression
	acks            Acks
	idempotent      bool
	idempotentSet   bool
	maxInFlight     int64 // batches in flight per partition; forced to 1 without idempotence
	maxRetries      int64
	maxBuffered     int64
	manualPartition bool
	// transactionalID makes the producer transactional (transaction.go);
	// "" (the default): not transactional.
	transactionalID    string
	transactionTimeout time.Duration // sent to the coordinator at init; default 60s

	// consumer
	fetchMaxWait           time.Duration
	fetchMaxBytes          int64
	fetchMaxPartitionBytes int64
	onCorrupt              func(*CorruptBatchError) // nil: Poll fails on an undecodable batch
	readCommitted          bool                     // ReadCommitted; default false, true for group consumers

	// tracing (tracing.go)
	tracerProvider trace.TracerProvider          // nil: the global provider
	propagator     propagation.TextMapPropagator // nil: W3C trace context

	// security (security.go)
	tlsFiles      tlsconfig.Files // TLSCA and ClientCertificate
	clientCertSet bool            // ClientCertificate was given
	tlsConfig     *tls.Config     // TLSConfig; nil: none
	token         secret          // Token; unset: none

	// the transport, from openTransport: the HTTP client every call uses,
	// and the TLS files' watcher it started (nil when none).
	httpc     connect.HTTPClient
	tlsSource *tlsconfig.Source
}

func defaultConfig() config {
	return config{
		requestTimeout:   30 * time.Second,
		metadataMaxAge:   5 * time.Minute,
		unknownTopicWait: 2 * time.Second,
		retryBackoff:     100 * time.Millisecond,
		maxRetryBackoff:  time.Second,

		linger:          5 * time.Millisecond,
		maxBatchBytes:   1 << 20,
		compression:     NoCompression,
		acks:            AcksAll,
		idempotent:      true,
		maxInFlight:     5,
		deliveryTimeout: 2 * time.Minute,
		maxRetries:      math.MaxInt32,
		maxBuffered:     100000,

		transactionTimeout: 60 * time.Second,

		fetchMaxWait:           500 * time.Millisecond,
		fetchMaxBytes:          50 << 20,
		fetchMaxPartitionBytes: 1 << 20,
	}
}

// limits is the table every configuration is checked against, once.
var limits = []struct {
	name     string
	get      func(*config) int64
	min, max int64
	duration bool // show values as durations
}{
	{"RequestTimeout", dur(func(c *config) time.Duration { return c.requestTimeout }), int64(10 * time.Millisecond), int64(10 * time.Minute), true},
	{"MetadataMaxAge", dur(func(c *config) time.Duration { return c.metadataMaxAge }), int64(10 * time.Millisecond), int64(24 * time.Hour), true},
	{"UnknownTopicWait", dur(func(c *config) time.Duration { return c.unknownTopicWait }), 0, int64(time.Minute), true},
	{"RetryBackoff", dur(func(c *config) time.Duration { return c.retryBackoff }), int64(time.Millisecond), int64(time.Minute), true},
	{"MaxRetryBackoff", dur(func(c *config) time.Duration { return c.maxRetryBackoff }), int64(time.Millisecond), int64(10 * time.Minute), true},
	{"Linger", dur(func(c *config) time.Duration { return c.linger }), 0, int64(time.Minute), true},
	{"MaxBatchBytes", func(c *config) int64 { return c.maxBatchBytes }, 64, recordbatch.MaxDecompressedSize, false},
	{"Compression", func(c *config) int64 { return int64(c.compression) }, int64(NoCompression), int64(ZstdCompression), false},
	{"Acks", func(c *config) int64 { return int64(c.acks) }, int64(AcksAll), int64(AcksNone), false},
	{"DeliveryTimeout", dur(func(c *config) time.Duration { return c.deliveryTimeout }), int64(time.Millisecond), int64(24 * time.Hour), true},
	{"MaxInFlight", func(c *config) int64 { return c.maxInFlight }, 1, 5, false},
	{"MaxRetries", func(c *config) int64 { return c.maxRetries }, 0, math.MaxInt32, false},
	{"MaxBufferedRecords", func(c *config) int64 { return c.maxBuffered }, 1, 10_000_000, false},
	{"TransactionTimeout", dur(func(c *config) time.Duration { return c.transactionTimeout }), int64(time.Millisecond), int64(math.MaxInt32) * int64(time.Millisecond), true},
	{"FetchMaxWait", dur(func(c *config) time.Duration { return c.fetchMaxWait }), 0, int64(time.Minute), true},
	{"FetchMaxBytes", func(c *config) int64 { return c.fetchMaxBytes }, 1, math.MaxInt32, false},
	{"FetchMaxPartitionBytes", func(c *config) int64 { return c.fetchMaxPartitionBytes }, 1, math.MaxInt32, false},
}

func dur(f func(*config) time.Duration) func(*config) int64 {
	return func(c *config) int64 { return int64(f(c)) }
}

// validate checks the whole configuration once and reports every problem.
func (c *config) validate() error {
	var errs []error
	for _, l := range limits {
		v := l.get(c)
		if v < l.min || v > l.max {
			show := func(v int64) string {
				if l.duration {
					return time.Duration(v).String()
				}
				return fmt.Sprint(v)
			}
			errs = append(errs, fmt.Errorf("client: option %s: %s is outside [%s, %s]",
				l.name, show(v), show(l.min), show(l.max)))
		}
	}
	if c.idempotentSet && c.idempotent && c.acks != AcksAll {
		errs = append(errs, fmt.Errorf("client: option Idempotent(true) needs Acks(AcksAll), not %v", c.acks))
	}
	if c.transactionalID != "" && (c.acks != AcksAll || (c.idempotentSet && !c.idempotent)) {
		// Kafka's producer refuses the same: a transaction's batches are
		// sequenced under the coordinator's producer epoch.
		errs = append(errs, fmt.Errorf("client: option TransactionalID needs idempotence (Acks(AcksAll), not Idempotent(false))"))
	}
	errs = append(errs, c.validateSecurity()...)
	if c.acks != AcksAll {
		c.idempotent = false // idempotence is on by default only where it can work
	}
	if !c.idempotent {
		// Only sequence numbers let a leader hold a batch that overtook an
		// earlier one and refuse it when the gap stays; without them a
		// second batch in flight could be appended before the first.
		c.maxInFlight = 1
	}
	return errors.Join(errs...)
}

// HTTPClient sets the HTTP client for every call. The default speaks HTTP/2
// cleartext with prior knowledge on http:// URLs (what Strata services
// serve) and HTTP/2 over TLS on https:// URLs, configured by TLSCA,
// ClientCertificate or TLSConfig, which cannot be combined with this
// option; nil keeps the default. Token applies to either.
func HTTPClient(hc connect.HTTPClient) Opt {
	return commonOpt(func(c *config) { c.httpClient = hc })
}

// ConnectOptions adds Connect client options (interceptors such as
// otelconnect's, codecs, compression) to every client the producer or
// consumer creates. Default: none.
func ConnectOptions(opts ...connect.ClientOption) Opt {
	return commonOpt(func(c *config) { c.connectOpts = append(c.connectOpts, opts...) })
}

// RequestTimeout bounds each RPC, and is the acks=all wait the producer
// asks the leader for. Default 30s; limits 10ms to 10m.
func RequestTimeout(d time.Duration) Opt {
	return commonOpt(func(c *config) { c.requestTimeout = d })
}

// MetadataMaxAge is how often metadata is refreshed even without errors.
// Errors that mean the metadata is stale (not leader, fenced or unknown
// leader epoch, unavailable) refresh it at once. Default 5m.
func MetadataMaxAge(d time.Duration) Opt {
	return commonOpt(func(c *config) { c.metadataMaxAge = d })
}

// UnknownTopicWait is how long a topic the gateway does not know is asked
// for again before the client reports it does not exist, which covers the
// moment between a topic's creation and the gateway learning about it.
// Default 2s; 0 reports at the first answer.
func UnknownTopicWait(d time.Duration) Opt {
	return commonOpt(func(c *config) { c.unknownTopicWait = d })
}

// RetryBackoff is the first wait before a retry; each further retry of the
// same request doubles it up to MaxRetryBackoff. Each wait is spread ±20%
// at random so that many clients do not retry in step. Default 100ms.
func RetryBackoff(d time.Duration) Opt {
	return commonOpt(func(c *config) { c.retryBackoff = d })
}

// MaxRetryBackoff caps the doubling of RetryBackoff (before the ±20%
// spread). Default 1s.
func MaxRetryBackoff(d time.Duration) Opt {
	return commonOpt(func(c *config) { c.maxRetryBackoff = d })
}

// Linger is how long a partition's first buffered record waits for more
// records to join its batch. A batch is sent earlier when it reaches
// MaxBatchBytes or on Flush. Default 5ms; 0 sends at once (records that
// arrive while a batch is in flight still batch together).
func Linger(d time.Duration) ProducerOpt {
	return producerOpt(func(c *config) { c.linger = d })
}

// MaxBatchBytes caps the uncompressed size of a batch's records. A single
// record larger than this is sent alone. Default 1 MiB (1048576 bytes).
// A topic's batches are also kept within its max.message.bytes when its
// metadata sets it, and below the size of a batch its leader refused as
// too large (which is then split and sent again in halves).
func MaxBatchBytes(n int64) ProducerOpt {
	return producerOpt(func(c *config) { c.maxBatchBytes = n })
}

// WithCompression sets the codec for produced batches. Default
// NoCompression.
func WithCompression(codec Compression) ProducerOpt {
	return producerOpt(func(c *config) { c.compression = codec })
}

// WithAcks sets when a batch counts as delivered. Default AcksAll. Any
// other level turns idempotence off unless Idempotent(true) asks for it,
// which validation then rejects.
func WithAcks(a Acks) ProducerOpt {
	return producerOpt(func(c *config) { c.acks = a })
}

// Idempotent turns the idempotent producer on or off. When on, the producer
// takes a producer id from the gateway (InitProducerId) and numbers each
// partition's batches, so that a retried batch the leader already holds is
// not appended twice. Default true (with AcksAll).
func Idempotent(on bool) ProducerOpt {
	return producerOpt(func(c *config) { c.idempotent, c.idempotentSet = on, true })
}

// MaxInFlight caps the batches of one partition sent and not yet
// answered, as Kafka's max.in.flight.requests.per.connection does; the
// calls to one leader node in flight are capped the same way, each
// carrying at most one batch per partition. More than one lets a
// partition's next batch leave while the leader is still replicating the
// last, instead of waiting a full round trip. Order is kept: the leader
// holds a batch that arrives ahead of its sequence until the gap fills,
// and after a failure the producer sends the unacknowledged batches again
// one at a time, in order, before pipelining again. Only with idempotence:
// without it the producer keeps one batch in flight whatever this says.
// Default 5; limits 1 to 5; 1 sends each partition's batches one round
// trip after another.
func MaxInFlight(n int) ProducerOpt {
	return producerOpt(func(c *config) { c.maxInFlight = int64(n) })
}

// DeliveryTimeout bounds how long the client keeps retrying. For a
// producer it is the time from Produce to the record's callback, retries
// included: a batch not acknowledged by then fails with an error wrapping
// ErrDeliveryTimeout and the last failure. Default 2m.
//
// For a consumer (and a group consumer, through GroupConsumerOptions) it
// is how long Poll keeps retrying failed calls (fetch, list offsets,
// metadata; for a group consumer also its heartbeats to the coordinator)
// while none succeeds: Poll then returns an error wrapping
// ErrDeliveryTimeout and the last failure, and the next Poll starts a new
// period. The period runs across Polls whose context ends meanwhile and
// ends at the first call that succeeds. Consumer's ListOffsets is bounded
// the same way. Default for a consumer: unlimited (Poll retries until its
// context ends). Limits 1ms to 24h.
func DeliveryTimeout(d time.Duration) Opt {
	return commonOpt(func(c *config) { c.deliveryTimeout, c.deliveryTimeoutSet = d, true })
}

// OnRetry sets a function told about every retry: a produce, fetch, list
// offsets, metadata or group coordinator request failed with a retriable
// error, and the client waits RetryEvent.Wait before trying again. The
// event names the partition, the attempt, the wait and the reason (see
// RetryReason), so an application can log why it is waiting: for
// example a produce with AcksAll waiting for the ISR to reach
// min.insync.replicas. No call is made when a request succeeds at the
// first try, nor when the client gives up (the error then goes to the
// record's callback or out of Poll).
//
// fn is called from the client's goroutines (a producer's per-partition
// senders, possibly several at once; the goroutine calling Poll or
// ListOffsets; a group consumer's heartbeat goroutine): it must be safe
// for concurrent use and must not block, since the retry waits for it.
// Default none; nil keeps none.
func OnRetry(fn func(RetryEvent)) Opt {
	return commonOpt(func(c *config) { c.onRetry = fn })
}

// MaxRetries caps how often a batch is retried after a retriable error.
// Default unlimited within DeliveryTimeout; 0 disables retries.
func MaxRetries(n int) ProducerOpt {
	return producerOpt(func(c *config) { c.maxRetries = int64(n) })
}

// MaxBufferedRecords caps records produced but not yet acknowledged;
// Produce blocks (until its context ends) while the cap is reached.
// Default 100000.
func MaxBufferedRecords(n int) ProducerOpt {
	return producerOpt(func(c *config) { c.maxBuffered = int64(n) })
}

// ManualPartitioning makes the producer send each record to the
// Record.Partition it names instead of choosing by key. Default off.
func ManualPartitioning() ProducerOpt {
	return producerOpt(func(c *config) { c.manualPartition = true })
}

// TransactionalID makes the producer transactional (Kafka's
// transactional.id): its producer id and epoch come from the transaction
// coordinator that owns id, which fences any earlier producer with the
// same id, and records are produced only inside a transaction
// (BeginTransaction, then CommitTransaction or AbortTransaction). It
// implies idempotence, so it cannot be combined with Idempotent(false) or
// acks other than AcksAll. Default "": not transactional.
func TransactionalID(id string) ProducerOpt {
	return producerOpt(func(c *config) { c.transactionalID = id })
}

// TransactionTimeout is how long a transaction may stay open before the
// coordinator aborts it (Kafka's transaction.timeout.ms); the producer
// then finds itself fenced at its next call. Default 60s, as Kafka's; the
// coordinator refuses more than its --transaction-max-timeout (15 minutes
// by default). Without TransactionalID it has no effect.
func TransactionTimeout(d time.Duration) ProducerOpt {
	return producerOpt(func(c *config) { c.transactionTimeout = d })
}

// FetchMaxWait is how long a fetch waits on the leader for new records.
// Default 500ms.
func FetchMaxWait(d time.Duration) ConsumerOpt {
	return consumerOpt(func(c *config) { c.fetchMaxWait = d })
}

// FetchMaxBytes caps the record bytes of one fetch response. Default 50 MiB.
func FetchMaxBytes(n int32) ConsumerOpt {
	return consumerOpt(func(c *config) { c.fetchMaxBytes = int64(n) })
}

// FetchMaxPartitionBytes caps the record bytes per partition in one fetch;
// the first batch is returned whole even when larger. Default 1 MiB.
func FetchMaxPartitionBytes(n int32) ConsumerOpt {
	return consumerOpt(func(c *config) { c.fetchMaxPartitionBytes = int64(n) })
}

// ReadCommitted makes the consumer read only committed records, Kafka's
// isolation.level=read_committed: each partition up to its last stable
// offset (the first offset of its oldest open transaction), never a
// record of an aborted transaction. A group consumer reads committed
// records by default; a Consumer reads every record up to the high
// watermark unless given this. Transaction markers are never records
// either way.
func ReadCommitted() ConsumerOpt {
	return consumerOpt(func(c *config) { c.readCommitted = true })
}

// ReadUncommitted makes the consumer read every record up to the high
// watermark, those of open and aborted transactions too (Kafka's
// read_uncommitted): the default of a Consumer, and the way for a group
// consumer to see them.
func ReadUncommitted() ConsumerOpt {
	return consumerOpt(func(c *config) { c.readCommitted = false })
}

// SkipCorruptBatches makes the consumer move past a batch that cannot be
// decoded (see CorruptBatchError), losing its records, instead of failing
// Poll, and call report (which may be nil; it runs on the goroutine
// calling Poll) with what was skipped. A batch whose header is unreadable
// too cannot be skipped: Poll still fails on it. Like kafka-console-
// consumer's --skip-message-on-error, for reading on past an older log's
// damage. Default off.
func SkipCorruptBatches(report func(*CorruptBatchError)) ConsumerOpt {
	return consumerOpt(func(c *config) {
		c.onCorrupt = report
		if c.onCorrupt == nil {
			c.onCorrupt = func(*CorruptBatchError) {}
		}
	})
}
