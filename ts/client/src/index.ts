// Node entry point: Connect over HTTP/2 (@connectrpc/connect-node), gzip
// from node:zlib, Buffers for message bytes.
import { setPlatform } from "./platform.js";
import { nodePlatform } from "./platform-node.js";

setPlatform(nodePlatform);

export * from "./exports.js";
