// The generated API this package speaks, re-exported from one place so
// the rest of the client does not spell generated paths. src/gen is copied
// from gen/ts by scripts/copy-gen.mjs at build time.
export * as common from "./gen/strata/common/v1/common_pb.js";
export * as gateway from "./gen/strata/gateway/v1/gateway_pb.js";
export * as storage from "./gen/strata/storage/v1/storage_pb.js";
export * as coordinator from "./gen/strata/coordinator/v1/coordinator_pb.js";
export * as controller from "./gen/strata/controller/v1/controller_pb.js";
