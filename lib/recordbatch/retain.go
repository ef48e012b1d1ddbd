package recordbatch

import "fmt"

// DeleteHorizon returns the time (Unix ms) after which the log cleaner may
// remove the batch's tombstones, when the batch carries one (KIP-534: the
// cleaner stores it in baseTimestamp and sets attribute bit 6 the first
// time it keeps a tombstone of the batch).
func (h Header) DeleteHorizon() (int64, bool) {
	if h.Attributes&attrDeleteHorizon == 0 {
		return 0, false
	}
	return h.BaseTimestamp, true
}

// Retain encodes the records the log cleaner keeps from the batch with
// header src, as Kafka's MemoryRecords.filterTo rewrites a batch: the base
// offset and lastOffsetDelta stay (so the batch keeps its offset range and
// its producer's last sequence, KafkaProducer relies on it), and so do the
// leader epoch, producer id, epoch and base sequence, the timestamp type,
// the transactional and control bits and the codec; each kept record keeps
// its own offset and timestamp. The max timestamp is the largest kept
// record's, or src's for log-append time.
//
// horizon, when >= 0 and src has no delete horizon yet, is stamped as the
// batch's delete horizon (see DeleteHorizon); src's own horizon is always
// kept. kept may be empty: the batch then has no records section and no
// codec, as Kafka writes an empty batch it keeps for its producer state.
func Retain(src Header, kept []Record, horizon int64) ([]byte, error) {
	attrs := src.Attributes &^ attrCodecMask
	base := src.BaseTimestamp
	if h, ok := src.DeleteHorizon(); ok {
		base = h
	} else if horizon >= 0 {
		attrs |= attrDeleteHorizon
		base = horizon
	} else if len(kept) > 0 {
		base = kept[0].Timestamp
	}
	maxTS := src.MaxTimestamp
	codec := src.Codec()
	if len(kept) == 0 {
		codec = CodecNone
	} else if !src.LogAppendTime() {
		maxTS = kept[0].Timestamp
		for _, r := range kept {
			maxTS = max(maxTS, r.Timestamp)
		}
	}
	if !validCodec(codec) {
		return nil, fmt.Errorf("%w: retain: %v", ErrCodec, codec)
	}
	attrs |= int16(codec)
	b, err := newBatch(codec, 64*len(kept), func(dst []byte) []byte {
		for _, r := range kept {
			dst = appendRecord(dst, int32(r.Offset-src.BaseOffset), r.Timestamp-base, r)
		}
		return dst
	})
	if err != nil {
		return nil, err
	}
	putHeader(b, Header{
		BaseOffset: src.BaseOffset, PartitionLeaderEpoch: src.PartitionLeaderEpoch,
		Attributes: attrs, LastOffsetDelta: src.LastOffsetDelta,
		BaseTimestamp: base, MaxTimestamp: maxTS,
		ProducerID: src.ProducerID, ProducerEpoch: src.ProducerEpoch, BaseSequence: src.BaseSequence,
		RecordCount: int32(len(kept)),
	})
	return b, nil
}
