package partlog

import (
	"errors"
	"fmt"
)

// Sentinel errors. Typed errors below match them with errors.Is.
var (
	// ErrClosed is returned by every operation after Close.
	ErrClosed = errors.New("partlog: log closed")
	// ErrFailed is returned by every write after a write or fsync failed.
	// The log keeps serving what it had published; reopen it to recover.
	ErrFailed = errors.New("partlog: log failed after an I/O error")
	// ErrOffsetOutOfRange matches *OffsetOutOfRangeError.
	ErrOffsetOutOfRange = errors.New("partlog: offset out of range")
	// ErrNonContiguous matches *NonContiguousError.
	ErrNonContiguous = errors.New("partlog: non-contiguous offsets")
	// ErrInvalidBatch means appended bytes are not whole, valid batches.
	// It wraps the recordbatch error that says why.
	ErrInvalidBatch = errors.New("partlog: invalid batch")
	// ErrBatchTooLarge means a batch is larger than Config.MaxBatchBytes.
	ErrBatchTooLarge = errors.New("partlog: batch too large")
	// ErrStaleEpoch means a leader append carried an epoch older than the
	// latest in the epoch cache.
	ErrStaleEpoch = errors.New("partlog: stale leader epoch")
	// ErrCorrupt means a stored batch failed its CRC on read. The bytes are
	// not returned.
	ErrCorrupt = errors.New("partlog: corrupt batch in log")
	// ErrCoordinatorFenced means a leader append carried a transaction
	// marker whose coordinator epoch is older than the producer's last
	// marker's: a coordinator that lost the transactional id (Kafka's
	// TRANSACTION_COORDINATOR_FENCED).
	ErrCoordinatorFenced = errors.New("partlog: transaction coordinator fenced")
	// ErrInvalidProducerEpoch means a leader append carried a transaction
	// marker of an older producer epoch than the producer's (Kafka's
	// INVALID_PRODUCER_EPOCH).
	ErrInvalidProducerEpoch = errors.New("partlog: marker of an older producer epoch")
)

// OffsetOutOfRangeError reports a read outside [LogStart, LogEnd].
type OffsetOutOfRangeError struct {
	Offset   int64 // the offset asked for
	LogStart int64 // the log start offset at the time
	LogEnd   int64 // the log end offset at the time
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("partlog: offset %d out of range [%d, %d]", e.Offset, e.LogStart, e.LogEnd)
}

// Is makes errors.Is(err, ErrOffsetOutOfRange) hold.
func (e *OffsetOutOfRangeError) Is(target error) bool { return target == ErrOffsetOutOfRange }

// NonContiguousError reports a follower append whose first batch does not
// start at the log end offset, or whose batches do not follow each other.
type NonContiguousError struct {
	Expected int64 // the offset the next batch had to start at
	Got      int64 // the base offset it had
}

func (e *NonContiguousError) Error() string {
	return fmt.Sprintf("partlog: non-contiguous append: expected offset %d, got %d", e.Expected, e.Got)
}

// Is makes errors.Is(err, ErrNonContiguous) hold.
func (e *NonContiguousError) Is(target error) bool { return target == ErrNonContiguous }
