// Package partlog is the log a storage node keeps for one partition
// replica: record batches appended to segment files, with sparse indexes,
// checkpoints, recovery after a crash, truncation for replication, a
// leader epoch history, retention, and a flush policy with group commit.
//
// # Directory layout
//
// One directory per replica. The on-disk format is part of the format; do
// not change it.
//
//	00000000000000000000.log        segment: batches exactly as appended
//	00000000000000000000.index      sparse offset index of that segment
//	00000000000000000000.timeindex  time index of that segment
//	00000000000000000000.txnindex   aborted transactions of that segment (txnindex.go)
//	00000000000000004096.log        next segment, named by its base offset
//	...
//	00000000000000004096.snapshot   idempotent-producer state as of offset 4096
//	log-checkpoint                  recovery point, high watermark, log start
//	leader-epoch-checkpoint         leader epoch -> start offset history
//	clean-shutdown                  written by Close, removed by Open
//	cleaner-checkpoint              first dirty offset of the log cleaner
//	<base>.cleaned, <base>.<end>.swap  a cleaning pass's segment (cleanswap.go)
//	*.tmp                           checkpoint or snapshot being written; removed on open
//
// Segment names are the base offset (the offset of the segment's first
// batch) as 20 zero-padded decimal digits. A .log file is the
// concatenation of record batches in the layout of package recordbatch
// (Kafka's RecordBatch v2), with the leader's base offset and leader
// epoch stamped in, and nothing else: no framing, no padding. Offsets are
// increasing within and across segments: as a leader appends them each
// batch starts where the previous one ended, and each segment's base is
// the previous segment's end; the log cleaner (cleaner.go) removes
// records and batches but never changes an offset, leaving gaps that
// reads pass over and followers copy.
//
// The index, checkpoint and producer snapshot layouts are documented next
// to their code (index.go, checkpoint.go, producersnapshot.go) and in
// docs/design/log.md.
//
// # Producer state
//
// The log remembers, per idempotent producer id, its latest epoch and the
// offsets and sequences of its last ProducerWindow batches (Producer),
// updated as batches are appended, saved in snapshot files at every roll,
// on Close and before retention deletes segments, and rebuilt on open and
// after truncation from the newest snapshot and the batch headers after
// it. It outlives retention and expires after Config.ProducerExpiry.
// It holds each producer's open transaction, from which the log derives
// its last stable offset, and each abort marker adds an entry to its
// segment's aborted transaction index (lso.go, txnindex.go).
//
// # Appending and reading
//
// One appender at a time holds the append lock, writes the bytes with one
// WriteAt at the end of the active segment, updates the in-memory indexes,
// then publishes the segment's new size and the log end offset with atomic
// stores. Readers do not take the append lock: they read the published
// values and ReadAt below them, so they never see part of a batch.
// Truncation, retention and roll change the segment list under a
// reader-writer lock that readers hold shared for the length of one read,
// so a file is never closed or shortened under a reader.
//
// Indexes are memory-resident. A segment's index files are written when
// it is sealed (roll) and, for the active segment, on Close; they are not
// fsynced. Each carries a CRC and the log size and end offset it covers,
// so a missing, torn, stale or corrupt index is detected on open and
// rebuilt from the log.
//
// # Durability
//
// The recovery point is the offset below which every byte is fsynced. It
// advances after fsyncs (Flush, the FlushInterval timer, group commits,
// after a roll, Close) and is persisted in log-checkpoint. With FlushSync
// an append returns only after an fsync covers it; fsync rounds run
// outside the append lock, and every appender waiting when a round starts
// is covered by it (group commit). An idle log holds no goroutine: its
// timed and deferred work runs on runtime timers and on goroutines that
// end with the work (background.go).
//
// The configuration, flush policy included, may change while the log is
// open (Reconfigure).
//
// A write or fsync error puts the log in a failed state (like Kafka
// taking the log directory offline): the failed bytes are never published,
// every later write returns ErrFailed, reads of published data go on, and
// reopening the directory runs recovery.
//
// # Recovery
//
// Open reads the checkpoints (a missing or corrupt one is logged and
// treated as a recovery point of zero), then walks the segments in order.
// A segment is trusted without reading it only if its index files are
// intact, cover exactly the file's size, end at or below the recovery
// point, and end where the next segment begins. Every other segment is
// scanned from its start: each batch must have a valid length, magic and
// CRC and start at the expected offset. At the first batch that does not,
// the segment is truncated there and every later segment is deleted, so
// nothing after a corruption is ever served; what was cut is logged. The
// indexes of scanned segments are rebuilt, the epoch history is extended
// from scanned batches and trimmed to the log end and log start, the high
// watermark is clamped to the log end, the scanned segments are fsynced,
// and the recovery point becomes the log end. Close leaves a clean-shutdown
// marker as its last step; Open removes it, so a log opened without one was
// left by a crash or power loss and has been recovered from its last
// fsynced point (UncleanShutdown).
package partlog
