// Dropping aborted transactions from a read_committed fetch answer: the
// TypeScript twin of lib/recordbatch/aborted.go, in the order Kafka's
// consumer applies it (CompletedFetch.nextFetchedRecord and
// isBatchAborted). A read_committed Fetch reads each partition up to its
// last stable offset and lists, per partition, the aborted transactions
// that overlap what it returns: a producer id and the offset of that
// transaction's first batch. A producer's transactional batches from that
// offset up to its abort marker are not the application's records.

import { CorruptBatchError } from "./errors.js";
import { isControl, isTransactional, readRecords, type BatchHeader } from "./recordbatch.js";

/** One aborted transaction of a fetch answer (FetchPartitionResult.aborted_transactions). */
export interface AbortedTxn {
  producerId: bigint;
  /** Offset of the transaction's first batch in the partition. */
  firstOffset: number;
}

/**
 * AbortedFilter tells, for the batches of one partition's read_committed
 * answer read in offset order, which are data batches of an aborted
 * transaction. A filter of no transactions drops nothing. Use one filter
 * per answer and partition; it keeps state from batch to batch.
 */
export class AbortedFilter {
  /** The transactions not reached yet, by first offset. */
  private readonly pending: AbortedTxn[];
  private nextPending = 0;
  /** Producers inside an aborted transaction at the current batch. */
  private readonly aborted = new Set<bigint>();

  /** The answer's aborted transactions, in any order. */
  constructor(txns: readonly AbortedTxn[]) {
    this.pending = [...txns].sort((a, b) => a.firstOffset - b.firstOffset);
  }

  /**
   * skip reports whether the batch with header h is an aborted
   * transaction's data batch the consumer must not see. Call it for every
   * batch, control batches included, in offset order: an abort marker ends
   * its producer's aborted stretch. records is the batch's records section
   * (uncompressed); it is read only for a control batch. Control batches
   * are never records: the caller steps over them whatever skip says.
   */
  skip(h: BatchHeader, records: Uint8Array): boolean {
    if (h.producerId < 0n) return false;
    // Every transaction that begins at or before this batch's last offset
    // has begun for its producer (Kafka compares with lastOffset too, so a
    // transaction listed from inside a batch counts for that whole batch).
    const last = h.baseOffset + h.lastOffsetDelta;
    while (this.nextPending < this.pending.length && this.pending[this.nextPending]!.firstOffset <= last) {
      this.aborted.add(this.pending[this.nextPending++]!.producerId);
    }
    if (isControl(h)) {
      if (isAbortMarker(h, records)) this.aborted.delete(h.producerId);
      return false;
    }
    return isTransactional(h) && this.aborted.has(h.producerId);
  }
}

/**
 * isAbortMarker reports whether a control batch is an abort marker: its
 * one record's key is Kafka's ControlRecordType, version 0 or more (a
 * later version is read as 0) and type 0 (abort; 1 is commit). Only the
 * key decides, as in Kafka's consumer (ControlRecordType.parse of the
 * first record's key). A control batch whose records do not read is no
 * marker.
 */
function isAbortMarker(h: BatchHeader, records: Uint8Array): boolean {
  if (h.recordCount !== 1) return false;
  let abort = false;
  try {
    readRecords(h, records, (_offset, _timestamp, key) => {
      if (key === null || key.length < 4) return;
      const dv = new DataView(key.buffer, key.byteOffset, key.byteLength);
      abort = dv.getInt16(0) >= 0 && dv.getInt16(2) === 0;
    });
  } catch (e) {
    if (e instanceof CorruptBatchError) return false;
    throw e;
  }
  return abort;
}
