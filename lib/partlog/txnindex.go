package partlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/strata-mq/strata/lib/vfs"
)

// Aborted transaction index files (part of the format, do not change).
//
// <base>.txnindex lists the transactions whose abort marker lies in the
// segment <base>.log, in the order of their markers, in the layout of
// Kafka's TransactionIndex: no header, 34-byte entries (AbortedTxn),
// big-endian:
//
//	offset size field
//	     0    2 version (0)
//	     2    8 producer id
//	    10    8 first offset: of the transaction's first batch
//	    18    8 last offset: of the abort marker
//	    26    8 last stable offset when the marker was appended: the first
//	            offset of the earliest transaction then still open, or the
//	            marker's offset + 1 (Kafka's lastStableOffset(completedTxn))
//
// A segment without an aborted transaction has no file (Kafka creates it
// lazily too). Entries are appended as abort markers are appended, and the
// file is fsynced with its segment before the recovery point passes the
// segment's end: a segment that recovery trusts without reading it (see
// recovery.go) therefore has its whole index on disk, and a missing file
// there means no aborted transaction. Every segment recovery reads is
// reindexed from its batches, and so is one whose index does not decode:
// a length that is not a multiple of 34, a version other than 0, or an
// entry whose offsets are not first <= last, with last inside the segment
// and increasing.
//
// The last stable offset of each entry bounds the first offsets of the
// aborted transactions listed after it, in this segment and the next
// ones, which is what lets AbortedTxns stop early (Kafka's
// collectAbortedTxns).
const (
	txnIndexSuffix    = ".txnindex"
	abortedTxnSize    = 34
	abortedTxnVersion = 0
)

// AbortedTxn is one aborted transaction of the log (Kafka's AbortedTxn).
type AbortedTxn struct {
	ProducerID  int64 // the transaction's producer
	FirstOffset int64 // offset of its first batch in this partition
	LastOffset  int64 // offset of its abort marker
	// LastStableOffset is the last stable offset as of the marker (see
	// the layout above).
	LastStableOffset int64
}

// ErrTxnIndex is wrapped by every error decoding a .txnindex file
// (DecodeAbortedTxns).
var ErrTxnIndex = errors.New("partlog: bad transaction index")

// AppendAbortedTxns appends entries for txns to dst in the .txnindex
// layout: a segment's index is the entries of its aborted transactions in
// the order of their markers, so the index of segments merged end to end
// is their indexes concatenated. Tiering stores a tiered segment's index
// with this codec, the one home of the format.
func AppendAbortedTxns(dst []byte, txns []AbortedTxn) []byte {
	for _, t := range txns {
		dst = binary.BigEndian.AppendUint16(dst, abortedTxnVersion)
		dst = binary.BigEndian.AppendUint64(dst, uint64(t.ProducerID))
		dst = binary.BigEndian.AppendUint64(dst, uint64(t.FirstOffset))
		dst = binary.BigEndian.AppendUint64(dst, uint64(t.LastOffset))
		dst = binary.BigEndian.AppendUint64(dst, uint64(t.LastStableOffset))
	}
	return dst
}

// DecodeAbortedTxns reads the .txnindex of the segment whose offsets are
// [base, next), checking each entry (see the layout above): an error
// wrapping ErrTxnIndex when the length is not a multiple of 34, an entry's
// version is not 0, or its offsets are not first <= last, with last in
// [base, next) and increasing. Empty b is a segment without an aborted
// transaction.
func DecodeAbortedTxns(b []byte, base, next int64) ([]AbortedTxn, error) {
	if len(b)%abortedTxnSize != 0 {
		return nil, fmt.Errorf("%w: %d bytes, not a multiple of %d", ErrTxnIndex, len(b), abortedTxnSize)
	}
	out := make([]AbortedTxn, 0, len(b)/abortedTxnSize)
	prev := base - 1
	for i := 0; i < len(b); i += abortedTxnSize {
		e := b[i : i+abortedTxnSize]
		if v := binary.BigEndian.Uint16(e); v != abortedTxnVersion {
			return nil, fmt.Errorf("%w: entry %d: version %d", ErrTxnIndex, len(out), v)
		}
		t := AbortedTxn{
			ProducerID:       int64(binary.BigEndian.Uint64(e[2:])),
			FirstOffset:      int64(binary.BigEndian.Uint64(e[10:])),
			LastOffset:       int64(binary.BigEndian.Uint64(e[18:])),
			LastStableOffset: int64(binary.BigEndian.Uint64(e[26:])),
		}
		if t.ProducerID < 0 || t.FirstOffset < 0 || t.FirstOffset > t.LastOffset || t.LastOffset <= prev || t.LastOffset >= next {
			return nil, fmt.Errorf("%w: entry %d %+v in a segment of offsets [%d, %d)", ErrTxnIndex, len(out), t, base, next)
		}
		prev = t.LastOffset
		out = append(out, t)
	}
	return out, nil
}

// loadAbortedTxns reads the segment's .txnindex: none when the file does
// not exist, an error when it cannot be read or does not decode.
func (s *segment) loadAbortedTxns(fsys vfs.FS) ([]AbortedTxn, error) {
	b, err := vfs.ReadFile(fsys, s.path(txnIndexSuffix))
	if isNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return DecodeAbortedTxns(b, s.base, s.next.Load())
}

// abortedCount is how many entries the segment's index holds.
func (s *segment) abortedCount() int {
	s.idxMu.RLock()
	defer s.idxMu.RUnlock()
	return len(s.aborted)
}

// appendAbortedLocked adds txns, whose markers were just written to the
// active segment s, to its index: to the file (created with the first
// entry) and then in memory. The file is fsynced by the next fsync round
// that covers the segment (syncLocked). The caller holds mu.
func (l *Log) appendAbortedLocked(s *segment, txns []AbortedTxn) error {
	n := s.abortedCount()
	var f vfs.File
	var err error
	if n == 0 {
		f, err = l.fs.Create(s.path(txnIndexSuffix))
		l.dirDirty = true
	} else {
		f, err = l.fs.OpenReadWrite(s.path(txnIndexSuffix))
	}
	if err == nil {
		_, err = f.WriteAt(AppendAbortedTxns(nil, txns), int64(n)*abortedTxnSize)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("partlog: write %s: %w", segmentName(s.base)+txnIndexSuffix, err)
	}
	s.idxMu.Lock()
	s.aborted = append(s.aborted, txns...)
	s.idxMu.Unlock()
	s.txnUnsynced = true
	return nil
}

// writeAbortedTxns replaces the segment's .txnindex with its entries in
// memory, fsynced (recovery, truncation, a cleaned segment), or removes
// it when there are none. It does not fsync the directory.
func (s *segment) writeAbortedTxns(fsys vfs.FS) error {
	s.idxMu.RLock()
	b := AppendAbortedTxns(nil, s.aborted)
	s.idxMu.RUnlock()
	name := s.path(txnIndexSuffix)
	if len(b) == 0 {
		if err := fsys.Remove(name); err != nil && !isNotExist(err) {
			return err
		}
		return nil
	}
	f, err := fsys.Create(name)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	s.txnUnsynced = false
	return err
}

// syncAbortedTxns fsyncs the segment's .txnindex. The caller holds
// flushMu, so the file is not replaced or removed meanwhile.
func (s *segment) syncAbortedTxns(fsys vfs.FS) error {
	f, err := fsys.OpenReadWrite(s.path(txnIndexSuffix))
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// AbortedTxns returns the aborted transactions that overlap the offsets
// [from, to): those whose first offset is below to and whose marker is at
// or after from, in the order of their markers. It is what a
// read_committed fetch of that range answers with (Kafka's
// collectAbortedTransactions), so that a consumer can skip their records.
// It reads the in-memory indexes from the segment holding from onwards and
// stops at the first entry whose last stable offset reaches to. Safe for
// concurrent use.
func (l *Log) AbortedTxns(from, to int64) ([]AbortedTxn, error) {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	if l.closed.Load() {
		return nil, ErrClosed
	}
	return l.abortedTxnsLocked(from, to), nil
}

// abortedTxnsLocked is AbortedTxns. The caller holds segMu.
func (l *Log) abortedTxnsLocked(from, to int64) []AbortedTxn {
	var out []AbortedTxn
	if from >= to {
		return out
	}
	for i := l.segmentFor(from); i < len(l.segs); i++ {
		s := l.segs[i]
		s.idxMu.RLock()
		for _, t := range s.aborted {
			if t.LastOffset >= from && t.FirstOffset < to {
				out = append(out, t)
			}
			if t.LastStableOffset >= to {
				s.idxMu.RUnlock()
				return out
			}
		}
		s.idxMu.RUnlock()
	}
	return out
}
