// The browser runtime: Connect over fetch (HTTP/1.1 or HTTP/2, as the
// browser negotiates; the gateway and storage nodes answer CORS), gzip with
// CompressionStream, and plain Uint8Arrays for decoded bytes.

import { createConnectTransport } from "@connectrpc/connect-web";
import type { Transport } from "@connectrpc/connect";
import { CorruptBatchError } from "./errors.js";
import type { Platform } from "./platform.js";

async function pipe(data: Uint8Array, stream: GenericTransformStream, limit: number): Promise<Uint8Array> {
  const writer = stream.writable.getWriter();
  const written = writer.write(new Uint8Array(data)).then(() => writer.close());
  const reader = (stream.readable as ReadableStream<Uint8Array>).getReader();
  const parts: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.length;
      if (total > limit) {
        await reader.cancel();
        throw new CorruptBatchError("too-large", `gzip section inflates past ${limit} bytes`);
      }
      parts.push(value);
    }
  } catch (e) {
    // The write fails with the same error as the read; the read's is the one to report.
    await written.then(
      () => undefined,
      () => undefined,
    );
    throw e;
  }
  await written;
  const out = new Uint8Array(total);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

export const webPlatform: Platform = {
  transport(baseUrl: string): { transport: Transport; close(): void } {
    // connectionTimeout does not apply: fetch opens connections itself.
    // fetch pools connections per origin itself; nothing to release.
    return { transport: createConnectTransport({ baseUrl, useBinaryFormat: true }), close: () => undefined };
  },
  checkTls() {
    return ["tls: not supported in browsers, which use their own TLS and trust store; authenticate with a token"];
  },
  gzip(data) {
    return pipe(data, new CompressionStream("gzip"), Number.MAX_SAFE_INTEGER);
  },
  gunzip(data, limit) {
    return pipe(data, new DecompressionStream("gzip"), limit);
  },
  bytes(b) {
    return b;
  },
};
