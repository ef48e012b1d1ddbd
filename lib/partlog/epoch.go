package partlog

// Leader epoch cache (KIP-101, KIP-279): for each leader epoch seen in the
// log, the offset of its first batch. A replica asks the leader where an
// epoch ended to know how far to truncate, instead of trusting its own
// high watermark.

// UndefinedEpoch and UndefinedOffset are what EndOffsetForEpoch answers
// when it has no answer, as in Kafka.
const (
	UndefinedEpoch  int32 = -1
	UndefinedOffset int64 = -1
)

// epochEntry says that leader epoch epoch starts at offset start.
type epochEntry struct {
	epoch int32 // leader epoch
	start int64 // offset of its first batch
}

// epochCache holds entries with strictly increasing epochs and
// non-decreasing start offsets. It is not safe for concurrent use; Log
// guards it with its append lock.
type epochCache struct {
	entries []epochEntry // the history, oldest first
}

func (c *epochCache) latest() int32 {
	if len(c.entries) == 0 {
		return UndefinedEpoch
	}
	return c.entries[len(c.entries)-1].epoch
}

// assign records that epoch starts at start, dropping any entry it
// contradicts (an epoch at least as new, or one starting at or after
// start). It reports whether the cache changed.
func (c *epochCache) assign(epoch int32, start int64) bool {
	if epoch < 0 {
		return false
	}
	if n := len(c.entries); n > 0 {
		last := c.entries[n-1]
		if last.epoch == epoch && last.start <= start {
			return false
		}
		if last.epoch > epoch && last.start <= start {
			// An older epoch after a newer one: not a new epoch start.
			return false
		}
	}
	kept := c.entries[:0]
	for _, e := range c.entries {
		if e.epoch < epoch && e.start < start {
			kept = append(kept, e)
		}
	}
	c.entries = append(kept, epochEntry{epoch: epoch, start: start})
	return true
}

// truncateFromEnd drops entries that start at or after leo.
func (c *epochCache) truncateFromEnd(leo int64) bool {
	n := len(c.entries)
	for n > 0 && c.entries[n-1].start >= leo {
		n--
	}
	changed := n != len(c.entries)
	c.entries = c.entries[:n]
	return changed
}

// truncateFromStart drops entries wholly below logStart; the last of them
// is kept, moved to start at logStart, since its epoch still covers it.
func (c *epochCache) truncateFromStart(logStart int64) bool {
	i := 0
	for i < len(c.entries) && c.entries[i].start < logStart {
		i++
	}
	if i == 0 {
		return false
	}
	if i < len(c.entries) && c.entries[i].start == logStart {
		c.entries = c.entries[i:]
	} else {
		c.entries = c.entries[i-1:]
		c.entries[0].start = logStart
	}
	return true
}

// endOffsetFor answers EndOffsetForEpoch exactly as Kafka's
// LeaderEpochFileCache.endOffsetFor does.
func (c *epochCache) endOffsetFor(epoch int32, leo int64) (int32, int64) {
	if epoch == UndefinedEpoch || len(c.entries) == 0 {
		return UndefinedEpoch, UndefinedOffset
	}
	if epoch == c.latest() {
		return epoch, leo
	}
	// higher: first entry with a larger epoch; floor: last with epoch <= requested.
	hi := -1
	for i, e := range c.entries {
		if e.epoch > epoch {
			hi = i
			break
		}
	}
	if hi < 0 {
		return UndefinedEpoch, UndefinedOffset
	}
	if hi == 0 {
		return epoch, c.entries[0].start
	}
	return c.entries[hi-1].epoch, c.entries[hi].start
}

func (c *epochCache) clone() []epochEntry {
	return append([]epochEntry(nil), c.entries...)
}
