// Package logcheck makes the deterministic batches that the crash tests
// write and checks a recovered log against them: batch SEQ always holds the
// same records, so any byte that differs after a crash is corruption.
package logcheck

import (
	"bytes"
	"fmt"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// RecordsPerBatch is how many records each batch holds; batch SEQ covers
// offsets SEQ*RecordsPerBatch up to the next batch.
const RecordsPerBatch = 16

// Epoch is the leader epoch the writer appends with.
const Epoch = 1

// Batch returns the uncompressed batch for sequence number seq.
func Batch(seq int64) ([]byte, error) {
	recs := make([]recordbatch.Record, RecordsPerBatch)
	for i := range recs {
		recs[i] = recordbatch.Record{
			Key:       []byte(fmt.Sprintf("key-%d-%d", seq, i)),
			Value:     value(seq, i),
			Timestamp: 1_700_000_000_000 + seq,
		}
	}
	return recordbatch.Build(recordbatch.BuildOptions{}, recs)
}

func value(seq int64, i int) []byte {
	v := bytes.Repeat([]byte{byte(seq), byte(i)}, 128)
	return append(v, fmt.Sprintf("|%d/%d", seq, i)...)
}

// Verify reads the whole log and checks that it is exactly batches
// 0..n-1 in order, each with the expected records. It returns n.
func Verify(l *partlog.Log) (int64, error) {
	var seq int64
	off := l.LogStartOffset()
	end := l.LogEndOffset()
	for off < end {
		res, err := l.Read(off, 1<<20, end)
		if err != nil {
			return seq, fmt.Errorf("logcheck: read at %d: %w", off, err)
		}
		it := recordbatch.NewIter(res.Batches, true)
		got := 0
		for _, batch, ok := it.Next(); ok; _, batch, ok = it.Next() {
			dec, err := recordbatch.Decode(batch)
			if err != nil {
				return seq, fmt.Errorf("logcheck: batch %d: %w", seq, err)
			}
			if dec.Header.BaseOffset != seq*RecordsPerBatch || len(dec.Records) != RecordsPerBatch {
				return seq, fmt.Errorf("logcheck: batch %d: base offset %d with %d records", seq, dec.Header.BaseOffset, len(dec.Records))
			}
			for i, r := range dec.Records {
				if !bytes.Equal(r.Value, value(seq, i)) || string(r.Key) != fmt.Sprintf("key-%d-%d", seq, i) {
					return seq, fmt.Errorf("logcheck: batch %d record %d: content differs", seq, i)
				}
			}
			off = dec.Header.NextOffset()
			seq++
			got++
		}
		if err := it.Err(); err != nil {
			return seq, fmt.Errorf("logcheck: at offset %d: %w", off, err)
		}
		if got == 0 {
			return seq, fmt.Errorf("logcheck: read at %d returned no batch before the log end %d", off, end)
		}
	}
	return seq, nil
}
