// The public API, shared by the Node (index.ts) and browser (browser.ts) entry points.
export { Strata } from "./strata.js";
export type { RetryOptions, StrataConfig } from "./config.js";
export type { Pem, TlsOptions, TokenSource } from "./credentials.js";
export { logLevel } from "./logger.js";
export type { LogCreator, LogEntry, Logger, LogLevel } from "./logger.js";
export { Partitioners, Producer } from "./producer.js";
export type {
  Acks,
  HeaderValue,
  Message,
  Partitioner,
  PartitionerArgs,
  PartitionerFactory,
  ProducerConfig,
  ProducerRecord,
  RecordMetadata,
  ResolvedProducerConfig,
} from "./producer.js";
export { Transaction } from "./transaction.js";
export type { TransactionState, TxnOffsets } from "./transaction.js";
export { Consumer, ConsumerEvents } from "./consumer.js";
export type {
  Batch,
  BatchEventPayload,
  ConsumerConfig,
  ConsumerEventName,
  ConsumerEventPayloads,
  ConsumerListener,
  ConsumerRetryOptions,
  ConsumerRunConfig,
  ConsumerSubscribeTopics,
  DeadLetterPayload,
  EachBatchPayload,
  EachMessagePayload,
  InstrumentationEvent,
  KafkaMessage,
  TopicOffsets,
  TopicPartition,
  TopicPartitionOffset,
} from "./consumer.js";
export { Admin, ConfigResourceTypes, ConfigSource, DeleteGroupsError } from "./admin.js";
export type {
  ConfigEntry,
  CreateTopic,
  DeleteGroupResult,
  DescribeConfigResponse,
  GroupDescription,
  GroupListing,
  PartitionDescription,
  PartitionMetadata,
  TopicDescription,
} from "./admin.js";
export {
  ClosedError,
  CorruptBatchError,
  DeliveryTimeoutError,
  FencedError,
  HandlerError,
  InvalidOffsetError,
  NoLeaderError,
  OutcomeUnknownError,
  ProducerFencedError,
  StrataAuthenticationError,
  StrataAuthorizationError,
  StrataConnectionError,
  StrataError,
  UnknownPartitionError,
  UnknownTopicError,
  UnsupportedCodecError,
} from "./errors.js";
export type { CorruptKind, StrataErrorOptions } from "./errors.js";
export { murmur2, partitionForKey } from "./murmur2.js";
export { crc32c } from "./crc32c.js";
export { isTraceparent, traceCarrier, TRACE_HEADERS } from "./tracing.js";
export type { TracePropagator } from "./tracing.js";
export { buildBatch, decodeBatch, parseHeader, peekSize, Codec } from "./recordbatch.js";
export type { BatchHeader, BuildOptions, CodecName, DecodedBatch, DecodedRecord, RecordHeader, RecordInput } from "./recordbatch.js";
/** CompressionTypes as kafkajs names them. */
export const CompressionTypes = { None: "none", GZIP: "gzip", Snappy: "snappy", LZ4: "lz4", ZSTD: "zstd" } as const;
