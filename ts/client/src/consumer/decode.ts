// Fetched bytes to messages: whole RecordBatch v2 batches, records before
// the fetch offset skipped (a batch is returned whole when it contains the
// offset), control batches stepped over.

import { decodeBatch, isControl, isLogAppendTime, nextOffset, peekSize } from "../recordbatch.js";
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
    const { header: h, records } = await decodeBatch(b.subarray(0, size));
    b = b.subarray(size);
    if (!isControl(h)) {
      const lat = isLogAppendTime(h);
      for (const r of records) {
        if (r.offset < pos) continue;
        const headers: Record<string, Uint8Array | null | (Uint8Array | null)[]> = {};
        for (const hd of r.headers) {
          const cur = headers[hd.key];
          if (cur === undefined) headers[hd.key] = hd.value;
          else if (Array.isArray(cur)) cur.push(hd.value);
          else headers[hd.key] = [cur, hd.value];
        }
        msgs.push({
          key: r.key,
          value: r.value,
          timestamp: String(lat ? h.maxTimestamp : r.timestamp),
          offset: String(r.offset),
          headers,
          leaderEpoch: h.partitionLeaderEpoch,
          size: (r.key?.length ?? 0) + (r.value?.length ?? 0),
          attributes: 0,
        });
      }
    }
    pos = Math.max(pos, nextOffset(h));
  }
  return { msgs, next: pos };
}
