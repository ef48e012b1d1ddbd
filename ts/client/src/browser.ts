// Browser entry point (the "browser" export condition): Connect over fetch
// (@connectrpc/connect-web), gzip with CompressionStream, Uint8Arrays for
// message bytes. The gateway and storage nodes must allow the page's
// origin (--cors-allowed-origins; `strata dev` allows localhost pages).
import { setPlatform } from "./platform.js";
import { webPlatform } from "./platform-web.js";

setPlatform(webPlatform);

export * from "./exports.js";
