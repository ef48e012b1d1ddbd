// The consumer's public shapes, as kafkajs names them: messages, batches,
// what the handlers receive, and the options of strata.consumer() and
// consumer.run().

import type { RetryOptions } from "../config.js";

/** A consumed message, as kafkajs' KafkaMessage. Bytes are Buffers in Node, Uint8Arrays in browsers. */
export interface KafkaMessage {
  key: Uint8Array | null;
  value: Uint8Array | null;
  /** Unix ms as a decimal string (the log append time when the topic uses it). */
  timestamp: string;
  /** Offset as a decimal string. */
  offset: string;
  /** Headers by key; a key that repeats gives an array. */
  headers: Record<string, Uint8Array | null | (Uint8Array | null)[]>;
  /** Leader epoch of the batch the message came from. */
  leaderEpoch: number;
  /** Size of key and value in bytes. */
  size: number;
  attributes: number;
}

/** A batch of one partition's messages, as kafkajs' Batch. */
export interface Batch {
  topic: string;
  partition: number;
  highWatermark: string;
  messages: KafkaMessage[];
  isEmpty(): boolean;
  firstOffset(): string | null;
  lastOffset(): string;
  /** High watermark minus one minus the last offset of the batch. */
  offsetLag(): string;
  /** High watermark minus one minus the first offset of the batch. */
  offsetLagLow(): string;
}

/** A topic and partition. */
export interface TopicPartition {
  topic: string;
  partition: number;
}

/** A topic and partition with an offset as a decimal string. */
export interface TopicPartitionOffset extends TopicPartition {
  offset: string;
}

/** What eachMessage receives. */
export interface EachMessagePayload {
  topic: string;
  partition: number;
  message: KafkaMessage;
  /** Heartbeats now (the background heartbeat runs anyway). */
  heartbeat(): Promise<void>;
  /** Pauses this partition; returns a function that resumes it. */
  pause(): () => void;
}

/** What eachBatch receives. */
export interface EachBatchPayload {
  batch: Batch;
  /** Marks messages up to and including offset processed (committed by autoCommit or commitOffsetsIfNecessary). */
  resolveOffset(offset: string): void;
  heartbeat(): Promise<void>;
  /** Commits processed offsets now when autoCommit's interval has passed (always when autoCommit is off). */
  commitOffsetsIfNecessary(): Promise<void>;
  /** The processed offsets not committed yet (kafkajs' uncommittedOffsets). */
  uncommittedOffsets(): { topics: { topic: string; partitions: { partition: number; offset: string }[] }[] };
  /** False once the consumer is stopping or crashed. */
  isRunning(): boolean;
  /** True once this partition was revoked, lost, or moved by seek: stop processing the batch. */
  isStale(): boolean;
  pause(): () => void;
}

/** What the dead-letter callback receives: the message no handler call could process, and the last error. */
export interface DeadLetterPayload {
  topic: string;
  partition: number;
  message: KafkaMessage;
  /** The handler's last error. */
  error: unknown;
  /** How many times the handler was called for it. */
  attempts: number;
}

/** Options of consumer.run. Durations in ms. */
export interface ConsumerRunConfig {
  /** Commit processed offsets every autoCommitInterval, before a revocation and on disconnect. Default true. */
  autoCommit?: boolean;
  /** Default 5000. */
  autoCommitInterval?: number;
  /** eachBatch: resolve the batch's last offset when the handler returns. Default true. */
  eachBatchAutoResolve?: boolean;
  /**
   * How many partitions' handlers run at once (kafkajs' name). Messages of
   * one partition are always handled one at a time, in offset order.
   * Default 1.
   */
  partitionsConsumedConcurrently?: number;
  /**
   * Called for each message, in offset order per partition. A throw
   * retries the same message after a backoff (the consumer's `retry`),
   * while other partitions keep flowing; past the retries the message goes
   * to deadLetter, or the consumer crashes (see ConsumerConfig.retry).
   */
  eachMessage?: (payload: EachMessagePayload) => Promise<void>;
  /** Called for each fetched batch of one partition. A throw retries from the first unresolved offset, as eachMessage. */
  eachBatch?: (payload: EachBatchPayload) => Promise<void>;
  /**
   * Called with a message whose handler failed past its retries. When it
   * resolves, the message counts as processed and the partition goes on;
   * when it throws, the consumer crashes. Default none: the consumer
   * crashes (a crash event, then restartOnFailure decides).
   */
  deadLetter?: (payload: DeadLetterPayload) => Promise<void>;
}

/** The consumer's retry options: the client's, plus restartOnFailure (kafkajs' names). */
export interface ConsumerRetryOptions extends RetryOptions {
  /**
   * Asked after a crash whose error a restart may cure (a handler that
   * failed past its retries, and its dead-letter callback if any): true
   * rejoins the group after a backoff and consumes on from the last
   * commit. Never asked for refusals, corrupt batches or unknown topics,
   * which crash for good. Default: always true, as kafkajs.
   */
  restartOnFailure?: (error: Error) => Promise<boolean>;
}

/** Options of `strata.consumer(...)`. Durations in ms. */
export interface ConsumerConfig {
  /** Group id. Required. */
  groupId: string;
  /**
   * Static membership id (KIP-345; the protocol's instance_id): stable
   * across restarts of the same application instance. Sent on every
   * heartbeat and shown by describeGroup; on disconnect the member leaves
   * with epoch -2 ("will come back"). See the README for what the
   * coordinator does with it today. Default none (a dynamic member).
   */
  groupInstanceId?: string;
  /** How long the member may take to give up revoked partitions before the coordinator removes it. Default 300000. */
  rebalanceTimeout?: number;
  /**
   * The coordinator's assignor to ask for (Kafka's group.remote.assignor):
   * "uniform" (sticky and balanced) or "range" (each topic's partitions in
   * contiguous ranges in member order, so members of co-partitioned topics
   * get the same partition numbers of each, which joins need). The group
   * uses the one most of its members ask for. Default none: the group's
   * choice.
   */
  serverAssignor?: "uniform" | "range";
  /** Longest a fetch waits for minBytes. Default 500. */
  maxWaitTimeInMs?: number;
  /** Bytes a fetch waits for before it answers. Default 1. */
  minBytes?: number;
  /** Bytes per fetch response. Default 50 MiB. */
  maxBytes?: number;
  /** Bytes per partition per fetch. Default 1 MiB. */
  maxBytesPerPartition?: number;
  /**
   * Read every record up to the high watermark, those of open and aborted
   * transactions too (Kafka's isolation.level=read_uncommitted). Default
   * false: the consumer reads committed records only (read_committed, the
   * default of a group consumer as in the Go client): each partition up to
   * its last stable offset (the first offset of its oldest open
   * transaction), without the records of aborted transactions, and a
   * partition with no committed offset that starts at the end starts at
   * the last stable offset. Transaction markers are never messages either
   * way.
   */
  readUncommitted?: boolean;
  /** Handler retries and restartOnFailure; defaults to the client's retry options. */
  retry?: ConsumerRetryOptions;
}

/** What subscribe takes: names or regular expressions (matched against the topic list when subscribe runs). */
export interface ConsumerSubscribeTopics {
  topics?: (string | RegExp)[];
  topic?: string | RegExp;
  /**
   * Where a partition of these topics starts when the group has no
   * committed offset for it: true, the log start; false (the default, as
   * kafkajs), the end. Per subscribe call, so topics may differ.
   */
  fromBeginning?: boolean;
}
