// The public API, shared by the Node (index.ts) and browser (browser.ts) entry points.
export { Strata } from "./strata.js";
export type { StrataConfig } from "./config.js";
export type { Pem, TlsOptions, TokenSource } from "./credentials.js";
export { Producer } from "./producer.js";
export type { Acks, HeaderValue, Message, ProducerConfig, ProducerRecord, RecordMetadata } from "./producer.js";
export { Consumer, ConsumerEvents } from "./consumer.js";
export type {
  Batch,
  ConsumerConfig,
  ConsumerRunConfig,
  EachBatchPayload,
  EachMessagePayload,
  KafkaMessage,
  TopicPartition,
} from "./consumer.js";
export { Admin } from "./admin.js";
export type { CreateTopic, GroupDescription, GroupListing, PartitionDescription, TopicDescription } from "./admin.js";
export {
  ClosedError,
  CorruptBatchError,
  DeliveryTimeoutError,
  FencedError,
  NoLeaderError,
  StrataAuthenticationError,
  StrataAuthorizationError,
  StrataError,
  UnknownTopicError,
  UnsupportedCodecError,
} from "./errors.js";
export type { CorruptKind } from "./errors.js";
export { murmur2, partitionForKey } from "./murmur2.js";
export { crc32c } from "./crc32c.js";
export { isTraceparent, traceCarrier, TRACE_HEADERS } from "./tracing.js";
export type { TracePropagator } from "./tracing.js";
export { buildBatch, decodeBatch, parseHeader, peekSize, Codec } from "./recordbatch.js";
export type { BatchHeader, BuildOptions, CodecName, DecodedBatch, DecodedRecord, RecordHeader, RecordInput } from "./recordbatch.js";
/** CompressionTypes as kafkajs names them. */
export const CompressionTypes = { None: "none", GZIP: "gzip" } as const;
