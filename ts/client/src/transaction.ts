// A transactional producer's side of transactions (docs/design/transactions.md,
// "Clients"), in kafkajs' shape: `const tx = await producer.transaction()`,
// then tx.send, tx.sendOffsets, tx.commit or tx.abort. The calls are those
// Kafka's TransactionManager makes, on the coordinator service over
// Connect:
//
//   - InitTransactionalProducer, once, on the coordinator that owns the
//     transactional id (FindCoordinator with the transaction key type): the
//     producer id and epoch every batch is written with. It fences any
//     earlier producer of the same id and aborts its open transaction.
//   - AddPartitionsToTxn before the first batch of a transaction to a
//     partition (the adds of one turn of the event loop in one call).
//   - AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator, for
//     sendOffsets.
//   - EndTxn to commit or abort, once every batch sent in the transaction
//     is answered. A transaction that added nothing ends without a call.
//
// NOT_COORDINATOR, COORDINATOR_LOADING and CONCURRENT_TRANSACTIONS are
// retried within the client's retry options (CoordinatorLink). A fenced
// producer (PRODUCER_FENCED from the coordinator, INVALID_PRODUCER_EPOCH
// from a leader) fails with ProducerFencedError from then on. A send that
// fails leaves the transaction abortable only: commit refuses, abort works,
// and after it the producer takes the next epoch of its id (KIP-360,
// InitTransactionalProducer with the id and epoch it holds), so its
// partitions start their sequences again from 0.

import { Code } from "@connectrpc/connect";
import { common, coordinator } from "./api.js";
import type { ResolvedRetry } from "./config.js";
import { CoordinatorLink, type CoordinatorClient } from "./consumer/coordinator.js";
import { fromDetail, ProducerFencedError, StrataError } from "./errors.js";
import type { Logger } from "./logger.js";
import type { Cluster } from "./metadata.js";
import type { ProducerRecord, RecordMetadata } from "./producer.js";
import { tpKey } from "./util.js";

const { Reason } = common;

/** A producer id and epoch of a transactional id; gen counts the ids and epochs the producer was given. */
export interface TxnProducerId {
  id: bigint;
  epoch: number;
  gen: number;
}

/** Offsets to commit with a transaction, as kafkajs' sendOffsets takes them. */
export interface TxnOffsets {
  /**
   * The group whose offsets these are: a running group Consumer (its group
   * id, member id and member epoch are sent, so a member fenced meanwhile
   * cannot commit: KIP-447), or its fields. memberId and memberEpoch
   * default to none (no member check).
   */
  consumer?: { groupId: string; memberId?: string; memberEpoch?: number | (() => number) };
  /** kafkajs' name for the group id, when consumer is not given: no member check. */
  consumerGroupId?: string;
  /** The next offset to read of each partition, as a decimal string or number. */
  topics: { topic: string; partitions: { partition: number; offset: string | number | bigint; metadata?: string | null }[] }[];
}

/** The state of the producer's transactions, shared by the producer's sinks and the Transaction objects. */
export class TxnState {
  private readonly link: CoordinatorLink;
  private readonly groupLinks = new Map<string, CoordinatorLink>();
  private pid: Promise<TxnProducerId> | undefined;
  private gen = 0;
  /** Set once fenced: every later call fails with it. */
  fenced: ProducerFencedError | undefined;
  /** The transaction in progress; undefined between transactions. */
  current: Transaction | undefined;
  /** A batch failed for good since the epoch was last taken: the next one must be taken before sending again. */
  private spent = false;
  /** Partitions added to the current transaction, and the adds waiting for the next AddPartitionsToTxn. */
  private added = new Set<string>();
  private groups = new Set<string>();
  private pending = new Map<string, { topic: string; partition: number; waiters: { ok: () => void; fail: (e: unknown) => void }[] }>();
  private scheduled = false;

  constructor(
    private readonly cluster: Cluster,
    readonly transactionalId: string,
    private readonly timeoutMs: number,
    private readonly requestTimeout: number,
    private readonly retry: ResolvedRetry,
    private readonly log: Logger,
  ) {
    this.link = new CoordinatorLink(cluster, transactionalId, requestTimeout, retry, log, coordinator.CoordinatorKeyType.TRANSACTION);
  }

  /** producerId is the id and epoch to write with, asked of the coordinator once (and again after a failed transaction's abort). */
  producerId(): Promise<TxnProducerId> {
    this.pid ??= this.init(undefined);
    return this.pid;
  }

  private init(held: TxnProducerId | undefined): Promise<TxnProducerId> {
    const gen = ++this.gen;
    const p = this.call("InitTransactionalProducer", (c, timeoutMs) =>
      c.initTransactionalProducer(
        { transactionalId: this.transactionalId, transactionTimeoutMs: this.timeoutMs, producerId: held?.id ?? -1n, producerEpoch: held?.epoch ?? -1 },
        { timeoutMs },
      ),
    ).then(
      (r) => {
        this.log.debug("transactional producer initialized", { transactionalId: this.transactionalId, producerId: r.producerId, producerEpoch: r.producerEpoch });
        return { id: r.producerId, epoch: r.producerEpoch, gen };
      },
      (e) => {
        if (this.pid === p) this.pid = undefined;
        throw e;
      },
    );
    return p;
  }

  /** begin starts a transaction; the caller holds the producer id already. */
  begin(tx: Transaction): void {
    this.current = tx;
    this.added = new Set();
    this.groups = new Set();
  }

  /** inTransaction reports whether a send may go now. */
  get inTransaction(): boolean {
    return this.current !== undefined && this.current.state === "open";
  }

  /** batchFailed notes a batch of the transaction that failed for good: its sequences are spent. */
  batchFailed(e: unknown): void {
    this.spent = true;
    this.current?.failed(e);
  }

  /**
   * addPartition resolves once the partition is in the current transaction:
   * at once when it is already, else with the other partitions added in
   * the same turn of the event loop, in one AddPartitionsToTxn.
   */
  addPartition(topic: string, partition: number): Promise<void> {
    if (this.fenced) return Promise.reject(this.fenced);
    const k = tpKey(topic, partition);
    if (this.added.has(k)) return Promise.resolve();
    return new Promise((ok, fail) => {
      let e = this.pending.get(k);
      if (!e) {
        e = { topic, partition, waiters: [] };
        this.pending.set(k, e);
      }
      e.waiters.push({ ok, fail });
      if (!this.scheduled) {
        this.scheduled = true;
        setTimeout(() => void this.flushAdds(), 0);
      }
    });
  }

  private async flushAdds(): Promise<void> {
    this.scheduled = false;
    const batch = [...this.pending.values()];
    this.pending.clear();
    if (batch.length === 0) return;
    const byTopic = new Map<string, number[]>();
    for (const e of batch) {
      const ps = byTopic.get(e.topic) ?? [];
      ps.push(e.partition);
      byTopic.set(e.topic, ps);
    }
    let failure: unknown;
    const refused = new Map<string, StrataError>();
    try {
      const pid = await this.producerId();
      const r = await this.call("AddPartitionsToTxn", (c, timeoutMs) =>
        c.addPartitionsToTxn(
          { transactionalId: this.transactionalId, producerId: pid.id, producerEpoch: pid.epoch, partitions: [...byTopic].map(([topic, partitions]) => ({ topic, partitions })) },
          { timeoutMs },
        ),
      );
      for (const p of r.partitions) if (p.error) refused.set(tpKey(p.topic, p.partition), this.fencedOr(fromDetail(p.error)));
    } catch (e) {
      failure = e;
    }
    for (const e of batch) {
      const k = tpKey(e.topic, e.partition);
      const err = failure ?? refused.get(k);
      if (err === undefined) this.added.add(k);
      for (const w of e.waiters) {
        if (err === undefined) w.ok();
        else w.fail(err);
      }
    }
  }

  /** sendOffsets adds the group to the transaction and stages its offsets with the group's coordinator. */
  async sendOffsets(o: TxnOffsets): Promise<void> {
    const groupId = o.consumer?.groupId ?? o.consumerGroupId;
    if (typeof groupId !== "string" || groupId === "") throw new TypeError("@strata-mq/client: sendOffsets needs {consumer} (a group Consumer or {groupId, memberId, memberEpoch}) or {consumerGroupId}");
    if (!Array.isArray(o.topics)) throw new TypeError("@strata-mq/client: sendOffsets needs topics: [{topic, partitions: [{partition, offset}]}]");
    const partitions = o.topics.flatMap((t) =>
      t.partitions.map((p) => ({ topic: t.topic, partition: p.partition, committedOffset: BigInt(p.offset), committedLeaderEpoch: -1, metadata: p.metadata ?? "" })),
    );
    const pid = await this.producerId();
    if (!this.groups.has(groupId)) {
      await this.call("AddOffsetsToTxn", (c, timeoutMs) =>
        c.addOffsetsToTxn({ transactionalId: this.transactionalId, producerId: pid.id, producerEpoch: pid.epoch, groupId }, { timeoutMs }),
      );
      this.groups.add(groupId);
    }
    const c = o.consumer;
    const memberEpoch = typeof c?.memberEpoch === "function" ? c.memberEpoch() : (c?.memberEpoch ?? -1);
    const memberId = o.consumer?.memberId ?? "";
    let link = this.groupLinks.get(groupId);
    if (!link) {
      link = new CoordinatorLink(this.cluster, groupId, this.requestTimeout, this.retry, this.log);
      this.groupLinks.set(groupId, link);
    }
    let r: coordinator.TxnOffsetCommitResponse;
    try {
      r = await link.call((c, timeoutMs) =>
        c.txnOffsetCommit(
          { transactionalId: this.transactionalId, groupId, producerId: pid.id, producerEpoch: pid.epoch, memberId, memberEpoch, partitions },
          { timeoutMs },
        ),
      );
    } catch (e) {
      throw this.fencedOr(e);
    }
    for (const p of r.partitions) if (p.error) throw this.fencedOr(fromDetail(p.error));
  }

  /** end commits or aborts the current transaction at the coordinator, unless it added nothing. */
  async end(commit: boolean): Promise<void> {
    if (this.added.size > 0 || this.groups.size > 0) {
      const pid = await this.producerId();
      await this.call("EndTxn", (c, timeoutMs) => c.endTxn({ transactionalId: this.transactionalId, producerId: pid.id, producerEpoch: pid.epoch, commit }, { timeoutMs }));
    }
    this.added = new Set();
    this.groups = new Set();
    this.current = undefined;
    if (!commit && this.spent) {
      // Sequences of a failed batch are spent: the next transaction goes
      // under the next epoch, from sequence 0 on every partition.
      this.spent = false;
      const held = await this.producerId();
      const next = this.init(held);
      this.pid = next;
      await next;
    }
  }

  /** call runs one call on the transactional id's coordinator, turning a fencing into ProducerFencedError. */
  private async call<T>(what: string, fn: (c: CoordinatorClient, timeoutMs: number) => Promise<T>): Promise<T> {
    if (this.fenced) throw this.fenced;
    try {
      return await this.link.call(fn);
    } catch (e) {
      const f = this.fencedOr(e);
      if (f !== e) this.log.error(`${what}: producer fenced`, { transactionalId: this.transactionalId, error: e });
      throw f;
    }
  }

  /**
   * fencedOr turns a fencing into ProducerFencedError (and remembers it);
   * any other error is returned as it is.
   */
  fencedOr<E>(e: E): E | ProducerFencedError {
    if (e instanceof ProducerFencedError) return e;
    if (e instanceof StrataError && (e.reasonCode === Reason.PRODUCER_FENCED || e.reasonCode === Reason.INVALID_PRODUCER_EPOCH)) {
      this.fenced ??= new ProducerFencedError(this.transactionalId, e);
      return this.fenced;
    }
    return e;
  }
}

/** What a Transaction is: open for sends, or ended (committed, aborted). */
export type TransactionState = "open" | "committing" | "aborting" | "committed" | "aborted";

/** The part of the producer a Transaction drives. */
export interface TxnProducer {
  sendInTxn(record: ProducerRecord): Promise<RecordMetadata[]>;
  flush(): Promise<void>;
}

/**
 * Transaction is one transaction of a transactional producer, in kafkajs'
 * shape: send and sendBatch write in it, sendOffsets commits a group's
 * offsets with it, and commit or abort ends it. Get it from
 * `producer.transaction()`; one at a time per producer.
 */
export class Transaction {
  /** @internal */
  state: TransactionState = "open";
  private failure: unknown;

  /** @internal use producer.transaction() */
  constructor(
    private readonly producer: TxnProducer,
    private readonly txn: TxnState,
  ) {}

  /** isActive reports whether the transaction takes sends (kafkajs' isActive). */
  isActive(): boolean {
    return this.state === "open";
  }

  /** send writes messages in the transaction: as Producer.send, and they are read (read-committed) only if it commits. */
  async send(record: ProducerRecord): Promise<RecordMetadata[]> {
    this.open("send");
    try {
      return await this.producer.sendInTxn(record);
    } catch (e) {
      this.failed(e);
      throw this.txn.fencedOr(e);
    }
  }

  /** sendBatch writes to several topics in the transaction (kafkajs' sendBatch). */
  async sendBatch(batch: { topicMessages: ProducerRecord[] }): Promise<RecordMetadata[]> {
    const all = await Promise.all(batch.topicMessages.map((tm) => this.send(tm)));
    return all.flat();
  }

  /**
   * sendOffsets commits a consumer group's offsets with the transaction:
   * they become the group's committed offsets if it commits and are
   * dropped if it aborts (a consume-transform-produce loop's exactly-once
   * step). `consumer` is the group Consumer the records were read by, or
   * {groupId, memberId, memberEpoch}; kafkajs' {consumerGroupId} is taken
   * too, without the member check.
   */
  async sendOffsets(o: TxnOffsets): Promise<void> {
    this.open("sendOffsets");
    try {
      await this.txn.sendOffsets(o);
    } catch (e) {
      this.failed(e);
      throw e;
    }
  }

  /**
   * commit waits for every send of the transaction to be answered and
   * commits it: its records become readable to read-committed consumers
   * and its offsets the groups' committed offsets. It refuses, and the
   * transaction must be aborted, when a send or sendOffsets failed; a
   * fenced producer gets ProducerFencedError.
   */
  async commit(): Promise<void> {
    this.open("commit");
    this.state = "committing";
    try {
      await this.producer.flush();
      if (this.txn.fenced) throw this.txn.fenced;
      if (this.failure !== undefined) {
        throw new StrataError("the transaction cannot commit: a send or sendOffsets in it failed; abort it", { code: Code.FailedPrecondition, reason: Reason.INVALID_TXN_STATE, cause: this.failure });
      }
      await this.txn.end(true);
      this.state = "committed";
    } catch (e) {
      // Still this producer's transaction: abort is what is left to do.
      this.state = "open";
      this.failure ??= e;
      throw e;
    }
  }

  /** abort waits for every send of the transaction to be answered and aborts it: read-committed consumers never see its records, and its offsets are dropped. */
  async abort(): Promise<void> {
    this.open("abort");
    this.state = "aborting";
    try {
      await this.producer.flush();
      if (this.txn.fenced) throw this.txn.fenced;
      await this.txn.end(false);
      this.state = "aborted";
    } catch (e) {
      this.state = "open";
      throw e;
    }
  }

  /** @internal a send of the transaction failed: it can only abort now. */
  failed(e: unknown): void {
    this.failure ??= e;
  }

  private open(what: string): void {
    if (this.txn.fenced) throw this.txn.fenced;
    if (this.state !== "open") throw new StrataError(`${what}: the transaction is ${this.state}`, { code: Code.FailedPrecondition, reason: Reason.INVALID_TXN_STATE });
  }
}
