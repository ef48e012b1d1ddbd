// Fetched bytes to messages: whole RecordBatch v2 batches, records before
// the fetch offset skipped (a batch is returned whole when it contains the
// offset), control batches and, under read_committed, aborted
// transactions' batches stepped over. The records are read straight into
// messages (no intermediate record objects), keys and values are views
// into the fetched bytes, and only a compressed batch waits.

import type { AbortedFilter } from "../aborted.js";
import { checkBatch, isControl, isLogAppendTime, nextOffset, peekSize, readRecords, recordsSection } from "../recordbatch.js";
import type { BatchHeader, RecordHeader } from "../recordbatch.js";
import type { KafkaMessage } from "./types.js";

/**
 * decodeFrom decodes whole batches and returns the messages at or after
 * from and the position after them; a batch cut short at the end is left
 * for the next fetch. Control batches, and the batches of aborted
 * transactions that aborted drops (given for a read_committed answer;
 * none for read_uncommitted), move the position without messages. It
 * throws CorruptBatchError or UnsupportedCodecError.
 */
export async function decodeFrom(b: Uint8Array, from: number, aborted?: AbortedFilter): Promise<{ msgs: KafkaMessage[]; next: number }> {
  let pos = from;
  const msgs: KafkaMessage[] = [];
  while (b.length >= 12) {
    const size = peekSize(b);
    if (size > b.length) break;
    const batch = b.subarray(0, size);
    b = b.subarray(size);
    const h = checkBatch(batch);
    const control = isControl(h);
    let dropped = false;
    if (aborted !== undefined) {
      // The filter reads only a marker's record; a data batch's section is
      // inflated below, and only when it is kept.
      let marker: Uint8Array = EMPTY;
      if (control && h.producerId >= 0n) {
        const s = recordsSection(h, batch);
        marker = s instanceof Uint8Array ? s : await s;
      }
      dropped = aborted.skip(h, marker);
    }
    if (!control && !dropped && nextOffset(h) > pos) {
      const s = recordsSection(h, batch);
      toMessages(h, s instanceof Uint8Array ? s : await s, pos, msgs);
    }
    pos = Math.max(pos, nextOffset(h));
  }
  return { msgs, next: pos };
}

const EMPTY = new Uint8Array(0);

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
