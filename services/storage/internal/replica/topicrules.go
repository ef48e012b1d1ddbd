package replica

import (
	"fmt"
	"math"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// ProduceRules are a topic's rules for the batches its producers send,
// which the leader applies before the append, as Kafka's LogValidator
// does. The zero value applies none: batches are appended as sent.
type ProduceRules struct {
	// RequireKeys refuses a record without a key (cleanup.policy includes
	// compact): recordbatch.ErrKeyRequired.
	RequireKeys bool
	// LogAppendTime stamps every batch with the leader's clock
	// (message.timestamp.type=LogAppendTime); no timestamp window applies.
	LogAppendTime bool
	// LimitTimestamps refuses a record whose timestamp is more than
	// TimestampBeforeMaxMs before the leader's clock or more than
	// TimestampAfterMaxMs after it (message.timestamp.before.max.ms and
	// message.timestamp.after.max.ms with CreateTime):
	// recordbatch.ErrInvalidTimestamp.
	LimitTimestamps                           bool
	TimestampBeforeMaxMs, TimestampAfterMaxMs int64
	// Recompress rewrites every batch whose codec is not Codec with Codec
	// (compression.type other than producer).
	Recompress bool
	Codec      recordbatch.Codec
}

// timestampWindow reports whether the bounds can refuse anything: both at
// Long.MAX_VALUE (Kafka's defaults) cannot, and the check is skipped.
func timestampWindow(before, after int64) bool {
	return before < math.MaxInt64 || after < math.MaxInt64
}

// topicRules are the record checks of p at the leader's time nowMs.
func (p ProduceRules) topicRules(nowMs int64) recordbatch.TopicRules {
	t := recordbatch.TopicRules{RequireKeys: p.RequireKeys}
	if p.LimitTimestamps && !p.LogAppendTime && timestampWindow(p.TimestampBeforeMaxMs, p.TimestampAfterMaxMs) {
		t.CheckTimestamps, t.NowMs = true, nowMs
		t.BeforeMaxMs, t.AfterMaxMs = p.TimestampBeforeMaxMs, p.TimestampAfterMaxMs
	}
	return t
}

// rewrite applies the leader's changes to the validated batches b, as
// Kafka does after validation: the codec first, then the log-append time
// (which recompression keeps). It returns b itself, changed in place,
// unless a batch was recompressed; then a new buffer.
func (p ProduceRules) rewrite(b []byte, nowMs int64) ([]byte, error) {
	if !p.Recompress && !p.LogAppendTime {
		return b, nil
	}
	out := b
	if p.Recompress {
		out = nil
		for at := 0; at < len(b); {
			h, err := recordbatch.PeekHeader(b[at:]) // validated
			if err != nil {
				return nil, fmt.Errorf("%w: %w", partlog.ErrInvalidBatch, err)
			}
			nb, err := recordbatch.Recompress(b[at:at+h.Size()], p.Codec)
			if err != nil {
				return nil, fmt.Errorf("%w: recompress batch at byte %d: %w", partlog.ErrInvalidBatch, at, err)
			}
			out = append(out, nb...)
			at += h.Size()
		}
	}
	if p.LogAppendTime {
		for at := 0; at < len(out); {
			h, _ := recordbatch.PeekHeader(out[at:])
			recordbatch.SetLogAppendTime(out[at:at+h.Size()], nowMs)
			at += h.Size()
		}
	}
	return out, nil
}
