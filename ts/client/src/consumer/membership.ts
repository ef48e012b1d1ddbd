// Group membership on the coordinator's heartbeat protocol (KIP-848 style,
// docs/design/coordinator.md): a background loop reports the subscription
// and the partitions this member owns (plus those assigned and not yet
// started, so the coordinator never frees a partition this member may
// still start on), at the interval the coordinator gives, and hands each
// new assignment to the consumer. A fence (FENCED_MEMBER_EPOCH,
// UNKNOWN_MEMBER_ID) drops everything and rejoins at epoch 0; a refusal
// (authentication, authorization) is fatal. Leaving sends epoch -1, or -2
// for a static member (groupInstanceId), which means "will come back".

import { create } from "@bufbuild/protobuf";
import { common, coordinator } from "../api.js";
import { detailOf, fromConnect, isAbort, isAuthError } from "../errors.js";
import type { Logger } from "../logger.js";
import { Backoff, tpKey } from "../util.js";
import type { CoordinatorLink } from "./coordinator.js";
import type { Emitter } from "./events.js";
import { byTopic, sortTPs } from "./partition.js";
import type { TopicPartition } from "./types.js";

const { Reason } = common;

/** What the membership needs of the consumer. */
export interface MembershipHost {
  readonly groupId: string;
  readonly memberId: string;
  /** Static membership id; "" for a dynamic member. */
  readonly instanceId: string;
  readonly clientId: string;
  readonly rebalanceTimeout: number;
  /** The coordinator assignor asked for; "" for the group's choice. */
  readonly serverAssignor: string;
  /** The subscribed topic names. */
  topics(): string[];
  /** The partitions to report as owned: owned now, and assigned but not started. */
  reported(): TopicPartition[];
  /** A new assignment arrived (the full set). */
  onAssignment(target: Map<string, TopicPartition>): void;
  /** The coordinator fenced this member: drop every partition now. */
  onFenced(): void;
  /** A failure no retry can fix (a refusal): the consumer crashes. */
  onFatal(e: unknown): void;
}

/** Membership runs one member's heartbeats. Not shared between consumers. */
export class Membership {
  /** The member epoch: 0 to join, -1 after leaving. */
  epoch = 0;
  /** The heartbeat interval the coordinator gave, in ms. */
  interval = 1_000;
  private loop: Promise<void> | undefined;
  private abort: AbortController | undefined;
  private kickFn: (() => void) | undefined;
  private kickPending = false;
  private beatWaiters: (() => void)[] = [];

  constructor(
    private readonly host: MembershipHost,
    private readonly link: CoordinatorLink,
    private readonly events: Emitter,
    private readonly requestTimeout: number,
    private readonly backoff: () => Backoff,
    private readonly log: Logger,
  ) {}

  /** running reports whether the heartbeat loop runs. */
  get running(): boolean {
    return this.loop !== undefined;
  }

  /** start runs the heartbeat loop (once; a second start does nothing). */
  start(): void {
    if (this.loop) return;
    const abort = new AbortController();
    this.abort = abort;
    this.loop = this.run(abort.signal);
  }

  /** stop ends the heartbeat loop and waits for it. Safe to call twice. */
  async stop(): Promise<void> {
    const loop = this.loop;
    if (!loop) return;
    this.abort?.abort();
    this.kickFn?.();
    await loop;
    this.loop = undefined;
  }

  /** kick sends a heartbeat now (or right after the one in flight). */
  kick(): void {
    if (this.kickFn) this.kickFn();
    else this.kickPending = true;
  }

  /** beat resolves after the next heartbeat answer (kafkajs' heartbeat() in a handler). */
  beat(): Promise<void> {
    if (!this.loop) return Promise.resolve();
    const p = new Promise<void>((r) => this.beatWaiters.push(r));
    this.kick();
    return p;
  }

  /**
   * leave stops the loop and, when the member is in the group, tells the
   * coordinator it leaves (epoch -1; -2 for a static member). The epoch is
   * -1 afterwards, whatever the answer.
   */
  async leave(): Promise<void> {
    await this.stop();
    if (this.epoch <= 0) {
      this.epoch = -1;
      return;
    }
    const req = create(coordinator.ConsumerGroupHeartbeatRequestSchema, {
      groupId: this.host.groupId,
      memberId: this.host.memberId,
      instanceId: this.host.instanceId,
      memberEpoch: this.host.instanceId ? -2 : -1,
    });
    this.epoch = -1;
    await this.link.call((c, timeoutMs) => c.consumerGroupHeartbeat(req, { timeoutMs }));
  }

  /** rejoin makes the next heartbeat a join (after a leave, to consume again). */
  rejoin(): void {
    this.epoch = 0;
  }

  /** request builds the member's heartbeat: subscription and reported partitions. */
  request(): coordinator.ConsumerGroupHeartbeatRequest {
    return create(coordinator.ConsumerGroupHeartbeatRequestSchema, {
      groupId: this.host.groupId,
      memberId: this.host.memberId,
      memberEpoch: this.epoch,
      instanceId: this.host.instanceId,
      subscribedTopicNames: this.host.topics(),
      clientId: this.host.clientId,
      rebalanceTimeoutMs: this.host.rebalanceTimeout,
      serverAssignor: this.host.serverAssignor,
      ownedPartitions: [...byTopic(sortTPs(this.host.reported()))].map(([topic, partitions]) => create(common.TopicPartitionsSchema, { topic, partitions })),
    });
  }

  private async run(signal: AbortSignal): Promise<void> {
    const bo = this.backoff();
    while (!signal.aborted) {
      let wait: number;
      try {
        wait = await this.heartbeat(signal);
        bo.reset();
      } catch (e) {
        if (signal.aborted) break;
        if (isAuthError(e)) {
          this.host.onFatal(e); // the same credentials are refused again
          break;
        }
        wait = bo.next();
        this.log.warn("heartbeat failed; retrying", { groupId: this.host.groupId, retryInMs: Math.round(wait), error: e });
      }
      if (signal.aborted) break;
      if (this.kickPending) {
        // Something changed while the last heartbeat was in flight (a
        // revocation done, say): report it now, not an interval later.
        this.kickPending = false;
        continue;
      }
      await new Promise<void>((r) => {
        const t = setTimeout(r, wait);
        this.kickFn = () => {
          clearTimeout(t);
          r();
        };
      });
      this.kickFn = undefined;
    }
    const w = this.beatWaiters;
    this.beatWaiters = [];
    for (const f of w) f();
  }

  /** heartbeat sends one heartbeat and returns the wait before the next. */
  private async heartbeat(signal: AbortSignal): Promise<number> {
    if (this.host.topics().length === 0) return 200;
    const req = this.request();
    const co = await this.link.get();
    let resp: coordinator.ConsumerGroupHeartbeatResponse;
    try {
      resp = await co.c.consumerGroupHeartbeat(req, { timeoutMs: this.requestTimeout, signal });
    } catch (e0) {
      if (isAbort(e0) || signal.aborted) throw e0;
      const e = fromConnect(e0, co.addr);
      const d = detailOf(e);
      if (d?.reason === Reason.FENCED_MEMBER_EPOCH || d?.reason === Reason.UNKNOWN_MEMBER_ID) {
        this.log.info("fenced by the coordinator; rejoining", { groupId: this.host.groupId, memberEpoch: req.memberEpoch, error: e });
        this.epoch = 0;
        this.host.onFenced();
        return 0; // rejoin at once
      }
      this.link.failed(e, co.addr);
      throw e;
    }
    const w = this.beatWaiters;
    this.beatWaiters = [];
    for (const f of w) f();
    if (req.memberEpoch !== this.epoch || signal.aborted) return this.interval; // fenced or leaving meanwhile
    this.epoch = resp.memberEpoch;
    if (resp.heartbeatIntervalMs > 0) this.interval = resp.heartbeatIntervalMs;
    if (this.events.has("consumer.heartbeat")) void this.events.emit("consumer.heartbeat", { groupId: this.host.groupId, memberId: this.host.memberId, groupGenerationId: this.epoch });
    if (resp.assignment) {
      const t = new Map<string, TopicPartition>();
      for (const tps of resp.assignment.partitions) for (const p of tps.partitions) t.set(tpKey(tps.topic, p), { topic: tps.topic, partition: p });
      this.host.onAssignment(t);
    }
    return this.interval;
  }
}
