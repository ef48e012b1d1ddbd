package server

import (
	"math"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/topicconfig"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// What TopicConfig (node.go) needs beyond reading numbers: the produce
// rules and the encodings of Kafka values partlog spells differently.

// produceRules reads the configs the leader applies to what producers
// send before the append (Kafka's LogValidator): a key in every record of
// a compacted topic, the timestamp type and window, and the codec. A
// config missing from m applies nothing.
func produceRules(m map[string]string) replica.ProduceRules {
	var p replica.ProduceRules
	p.RequireKeys, _ = topicconfig.Cleanup(m)
	_, before := m[topicconfig.MessageTimestampBeforeMaxMs]
	_, after := m[topicconfig.MessageTimestampAfterMaxMs]
	switch {
	case m[topicconfig.MessageTimestampType] == topicconfig.LogAppendTime:
		p.LogAppendTime = true
	case before || after:
		p.LimitTimestamps = true
		p.TimestampBeforeMaxMs = topicconfig.Int64(m, topicconfig.MessageTimestampBeforeMaxMs, math.MaxInt64)
		p.TimestampAfterMaxMs = topicconfig.Int64(m, topicconfig.MessageTimestampAfterMaxMs, math.MaxInt64)
	}
	if codec, ok := topicCodecs[m[topicconfig.CompressionType]]; ok {
		p.Recompress, p.Codec = true, codec
	}
	return p
}

// topicCodecs are the compression.type values that name a codec; the
// default, producer, keeps each batch's own.
var topicCodecs = map[string]recordbatch.Codec{
	"uncompressed": recordbatch.CodecNone, "gzip": recordbatch.CodecGzip, "snappy": recordbatch.CodecSnappy,
	"lz4": recordbatch.CodecLZ4, "zstd": recordbatch.CodecZstd,
}

// retainNoBytes is partlog's RetentionBytes for Kafka's retention.bytes=0
// (partlog takes zero as its default, no limit). One byte deletes every
// sealed segment below the high watermark as zero does, except that the
// newest sealed segment stays while the active segment is still empty.
const retainNoBytes int64 = 1
