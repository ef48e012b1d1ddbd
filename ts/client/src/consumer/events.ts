// The consumer's instrumentation events, as kafkajs names and shapes them,
// with a payload type per event so listeners are checked at compile time.
// A listener that throws (or rejects) is logged with its error and the
// others still run; it never breaks the group protocol.

import type { Logger } from "../logger.js";
import type { TopicPartition } from "./types.js";

/** Event names (kafkajs' where kafkajs has one). */
export const ConsumerEvents = {
  HEARTBEAT: "consumer.heartbeat",
  COMMIT_OFFSETS: "consumer.commit_offsets",
  GROUP_JOIN: "consumer.group_join",
  FETCH_START: "consumer.fetch_start",
  FETCH: "consumer.fetch",
  START_BATCH_PROCESS: "consumer.start_batch_process",
  END_BATCH_PROCESS: "consumer.end_batch_process",
  CONNECT: "consumer.connect",
  DISCONNECT: "consumer.disconnect",
  STOP: "consumer.stop",
  CRASH: "consumer.crash",
  REBALANCING: "consumer.rebalancing",
  /** Partitions gained: listeners are awaited before the partitions are fetched. */
  PARTITIONS_ASSIGNED: "consumer.partitions_assigned",
  /** Partitions given up or lost: listeners are awaited before release. */
  PARTITIONS_REVOKED: "consumer.partitions_revoked",
} as const;

/** One of ConsumerEvents' values. */
export type ConsumerEventName = (typeof ConsumerEvents)[keyof typeof ConsumerEvents];

/** Offsets by topic, as kafkajs' commit_offsets event carries them. */
export interface TopicOffsets {
  topic: string;
  partitions: { partition: number; offset: string }[];
}

/** Shared fields of the batch events. */
export interface BatchEventPayload {
  topic: string;
  partition: number;
  highWatermark: string;
  offsetLag: string;
  offsetLagLow: string;
  batchSize: number;
  firstOffset: string | null;
  lastOffset: string;
}

/** The payload of each event. */
export interface ConsumerEventPayloads {
  "consumer.heartbeat": { groupId: string; memberId: string; groupGenerationId: number };
  "consumer.commit_offsets": { groupId: string; memberId: string; groupGenerationId: number; topics: TopicOffsets[] };
  "consumer.group_join": {
    groupId: string;
    memberId: string;
    /** The member epoch of the assignment (kafkajs' generation). */
    memberEpoch: number;
    /** Partitions by topic this member owns now. */
    memberAssignment: Record<string, number[]>;
    /** ms from the join (or rejoin) to owning this assignment. */
    duration: number;
  };
  "consumer.fetch_start": { nodeId: string };
  "consumer.fetch": { numberOfBatches: number; duration: number; nodeId: string };
  "consumer.start_batch_process": BatchEventPayload;
  "consumer.end_batch_process": BatchEventPayload & { duration: number };
  "consumer.connect": Record<string, never>;
  "consumer.disconnect": Record<string, never>;
  "consumer.stop": Record<string, never>;
  "consumer.crash": { error: Error; groupId: string; restart: boolean };
  "consumer.rebalancing": { groupId: string; memberId: string };
  "consumer.partitions_assigned": { partitions: TopicPartition[] };
  "consumer.partitions_revoked": { partitions: TopicPartition[]; lost: boolean };
}

/** What a listener receives (kafkajs' InstrumentationEvent). */
export interface InstrumentationEvent<P> {
  id: number;
  type: string;
  timestamp: number;
  payload: P;
}

/** A listener of one event. */
export type ConsumerListener<E extends ConsumerEventName> = (event: InstrumentationEvent<ConsumerEventPayloads[E]>) => unknown;

/** Emitter keeps listeners per event. Not shared between consumers. */
export class Emitter {
  private readonly listeners = new Map<string, ((e: InstrumentationEvent<unknown>) => unknown)[]>();
  private seq = 0;

  constructor(private readonly log: Logger) {}

  /** on adds a listener; returns a function that removes it. */
  on<E extends ConsumerEventName>(event: E, listener: ConsumerListener<E>): () => void {
    const l = this.listeners.get(event) ?? [];
    l.push(listener as (e: InstrumentationEvent<unknown>) => unknown);
    this.listeners.set(event, l);
    return () => {
      const cur = this.listeners.get(event) ?? [];
      this.listeners.set(
        event,
        cur.filter((x) => x !== listener),
      );
    };
  }

  /** has reports whether an event has listeners (so hot paths build no payload for nobody). */
  has(event: ConsumerEventName): boolean {
    return (this.listeners.get(event)?.length ?? 0) > 0;
  }

  /** emit calls the listeners one after another and resolves once each has settled; failures are logged. */
  async emit<E extends ConsumerEventName>(event: E, payload: ConsumerEventPayloads[E]): Promise<void> {
    const ls = this.listeners.get(event);
    if (!ls || ls.length === 0) return;
    const ev: InstrumentationEvent<ConsumerEventPayloads[E]> = { id: ++this.seq, type: event, timestamp: Date.now(), payload };
    for (const l of [...ls]) {
      try {
        await l(ev);
      } catch (e) {
        this.log.error(`a ${event} listener failed`, { error: e });
      }
    }
  }
}
