// Committed offsets: one OffsetCommit at a time, in order, fenced by the
// member epoch (the request's) and by the epoch each partition was granted
// under (each partition's), and the OffsetFetch of newly assigned
// partitions. The one place the commit request is built.

import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { common, coordinator } from "../api.js";
import { detailOf, FencedError, fromDetail, StrataError } from "../errors.js";
import type { Logger } from "../logger.js";
import { sleep, tpKey } from "../util.js";
import type { CoordinatorLink } from "./coordinator.js";
import type { Emitter, TopicOffsets } from "./events.js";
import { byTopic, sortTPs, type OwnedPartition } from "./partition.js";
import type { TopicPartition } from "./types.js";

const { Reason } = common;

/** What the committer needs of the consumer. */
export interface CommitterHost {
  readonly groupId: string;
  readonly memberId: string;
  /** The member epoch now. */
  epoch(): number;
  /** The partition this member owns under a key, if any. */
  owned(key: string): OwnedPartition | undefined;
  /** Whether the member reads committed records only (then it asks for stable offsets). */
  readonly readCommitted: boolean;
  /** A fresh backoff for waiting out staged offsets. */
  backoff(): { next(): number };
  /** Whether the run that asks is still the current one (a stopped run stops waiting). */
  current(gen: number): boolean;
}

/** Committer sends commits for one consumer. Not shared. */
export class Committer {
  private chain: Promise<unknown> = Promise.resolve();
  /** Date.now() of the last commit of processed offsets (autoCommit's clock). */
  lastCommit = Date.now();

  constructor(
    private readonly host: CommitterHost,
    private readonly link: CoordinatorLink,
    private readonly events: Emitter,
    private readonly log: Logger,
  ) {}

  /** request builds the OffsetCommit of the given partitions (their processed offsets, or explicit values by key). */
  request(parts: OwnedPartition[], values?: Map<string, number>): coordinator.OffsetCommitRequest | undefined {
    const partitions: coordinator.OffsetCommitPartition[] = [];
    for (const o of parts) {
      const v = values?.get(o.key) ?? o.processed;
      if (v < 0 || o.stale || (values === undefined && v === o.committed)) continue;
      partitions.push(
        create(coordinator.OffsetCommitPartitionSchema, {
          topic: o.topic,
          partition: o.partition,
          committedOffset: BigInt(v),
          committedLeaderEpoch: values ? -1 : o.leaderEpoch,
          memberEpoch: o.grantEpoch,
        }),
      );
    }
    if (partitions.length === 0) return undefined;
    sortTPs(partitions);
    return create(coordinator.OffsetCommitRequestSchema, { groupId: this.host.groupId, memberId: this.host.memberId, memberEpoch: this.host.epoch(), partitions });
  }

  /**
   * commit sends one commit at a time (in order), fenced by the member
   * epoch. It rejects with FencedError when the coordinator refuses the
   * member or a partition, or with the call's error.
   */
  commit(parts: OwnedPartition[], values?: Map<string, number>): Promise<void> {
    const run = async () => {
      const req = this.request(parts, values);
      if (!req) return;
      let resp: coordinator.OffsetCommitResponse;
      try {
        resp = await this.link.call((c, timeoutMs) => c.offsetCommit(req, { timeoutMs }));
      } catch (e) {
        const d = detailOf(e);
        if (d?.reason === Reason.FENCED_MEMBER_EPOCH || d?.reason === Reason.UNKNOWN_MEMBER_ID) {
          throw new FencedError(`commit rejected: ${(e as Error).message}`, { code: Code.Aborted, reason: d.reason, detail: d, cause: e });
        }
        throw e;
      }
      const errs: StrataError[] = [];
      resp.partitions.forEach((p, i) => {
        const sent = req.partitions[i];
        if (p.error) {
          const e = fromDetail(p.error);
          errs.push(
            p.error.reason === Reason.FENCED_MEMBER_EPOCH
              ? new FencedError(`commit ${p.topic}/${p.partition}: ${p.error.message}`, { code: Code.Aborted, reason: p.error.reason, detail: p.error, cause: e })
              : e,
          );
        } else if (sent) {
          const o = this.host.owned(tpKey(sent.topic, sent.partition));
          if (o && Number(sent.committedOffset) > o.committed) o.committed = Number(sent.committedOffset);
        }
      });
      if (this.events.has("consumer.commit_offsets")) {
        const topics: TopicOffsets[] = [];
        for (const p of req.partitions) {
          let t = topics.at(-1);
          if (!t || t.topic !== p.topic) topics.push((t = { topic: p.topic, partitions: [] }));
          t.partitions.push({ partition: p.partition, offset: String(p.committedOffset) });
        }
        void this.events.emit("consumer.commit_offsets", { groupId: this.host.groupId, memberId: this.host.memberId, groupGenerationId: req.memberEpoch, topics });
      }
      if (errs.length) throw errs[0];
    };
    const p = this.chain.then(run, run);
    // The chain only orders commits; each caller gets its own outcome from p.
    this.chain = p.then(
      () => undefined,
      () => undefined,
    );
    return p;
  }

  /** commitProcessed commits every given partition's processed offset and restarts autoCommit's clock. */
  commitProcessed(parts: OwnedPartition[]): Promise<void> {
    this.lastCommit = Date.now();
    return this.commit(parts);
  }

  /** commitQuietly commits for a caller that goes on either way; a failure is logged with its cause and false returned. */
  async commitQuietly(parts: OwnedPartition[], why: string): Promise<boolean> {
    try {
      await this.commitProcessed(parts);
      return true;
    } catch (e) {
      this.log.warn(`commit failed (${why})`, { groupId: this.host.groupId, error: e });
      return false;
    }
  }

  /**
   * fetchCommitted returns the group's committed offsets of the given
   * partitions by key (-1 or absent when none). A read-committed member
   * asks for stable offsets (KIP-447's require_stable, as Kafka's consumer
   * under read_committed): while a transaction has offsets of a partition
   * staged, the coordinator answers it UNSTABLE_OFFSET_COMMIT, and the
   * member asks again after a backoff rather than start from an offset
   * the transaction's commit would move (processing its inputs twice).
   * It stops waiting, answering nothing more, once run gen is over.
   */
  async fetchCommitted(tps: TopicPartition[], gen: number): Promise<Map<string, { offset: number; leaderEpoch: number }>> {
    const topics = [...byTopic(tps)].map(([topic, partitions]) => create(common.TopicPartitionsSchema, { topic, partitions }));
    const requireStable = this.host.readCommitted;
    const bo = this.host.backoff();
    for (;;) {
      const resp = await this.link.call((c, timeoutMs) => c.offsetFetch({ groupId: this.host.groupId, topics, requireStable }, { timeoutMs }));
      const out = new Map<string, { offset: number; leaderEpoch: number }>();
      let unstable = false;
      for (const o of resp.offsets) {
        if (o.error) {
          if (o.error.reason !== Reason.UNSTABLE_OFFSET_COMMIT) throw fromDetail(o.error);
          unstable = true;
          continue;
        }
        out.set(tpKey(o.topic, o.partition), { offset: Number(o.committedOffset), leaderEpoch: o.committedLeaderEpoch });
      }
      if (!unstable || !this.host.current(gen)) return out;
      const wait = bo.next();
      this.log.debug("a transaction has offsets of the group staged; asking again", { groupId: this.host.groupId, inMs: Math.round(wait) });
      await sleep(wait);
    }
  }
}
