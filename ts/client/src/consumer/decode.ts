// Fetched bytes to messages: whole RecordBatch v2 batches, records before
// the fetch offset skipped (a batch is returned whole when it contains the
// offset), control batches stepped over. The records are read straight
// into messages (no intermediate record objects), keys and values are
// views into the fetched bytes, and only a compressed batch waits.

import { checkBatch, isControl, isLogAppendTime, nextOffset, peekSize, readRecords, recordsSection } from "../recordbatch.js";
import type { BatchHeader, RecordHeader } from "../recordbatch.js";
import type { KafkaMessage } from "./types.js";

/**
 * decodeFrom decodes whole batches and returns the messages at or after
 * from and the position after them; a batch cut short at the end is left
 * for the next fetch. It throws CorruptBatchError or UnsupportedCodecError.
 */
export async function decodeFrom(b: Uint8Array, from: number): Promise<{ msgs: KafkaMessage[]; next: number }> {
  let pos = from;
  const msgs: KafkaMessage[] = [];
  while (b.length >= 12) {
    const size = peekSize(b);
    if (size > b.length) break;
    const batch = b.subarray(0, size);
    b = b.subarray(size);
    const h = checkBatch(batch);
    if (!isControl(h) && nextOffset(h) > pos) {
      const s = recordsSection(h, batch);
      toMessages(h, s instanceof Uint8Array ? s : await s, pos, msgs);
    }
    pos = Math.max(pos, nextOffset(h));
  }
  return { msgs, next: pos };
}

/** toMessages appends the batch's records at or after from to msgs. */
function toMessages(h: BatchHeader, section: Uint8Array, from: number, msgs: KafkaMessage[]): void {
  const lat = isLogAppendTime(h);
  const epoch = h.partitionLeaderEpoch;
  readRecords(h, section, (offset, timestamp, key, value, headers) => {
    if (offset < from) return;
    msgs.push({
      key,
      value,
      timestamp: String(lat ? h.maxTimestamp : timestamp),
      offset: String(offset),
      headers: headers.length === 0 ? {} : headerMap(headers),
      leaderEpoch: epoch,
      size: (key?.length ?? 0) + (value?.length ?? 0),
      attributes: 0,
    });
  });
}

/** headerMap is kafkajs' shape: a key that repeats gives an array of its values in order. */
function headerMap(hs: RecordHeader[]): KafkaMessage["headers"] {
  const headers: KafkaMessage["headers"] = {};
  for (const hd of hs) {
    const cur = headers[hd.key];
    if (cur === undefined) headers[hd.key] = hd.value;
    else if (Array.isArray(cur)) cur.push(hd.value);
    else headers[hd.key] = [cur, hd.value];
  }
  return headers;
}
