// Produce and ProducePartitions as Connect unary calls written straight
// onto Node's HTTP/2 session: the request's pieces (producewire.ts) go to
// the stream one after another, so no record batch is copied into a
// request buffer, and the answer is read in one piece. Connect's general
// unary path (createTransport with connect-node's HTTP client) costs a
// producer a fifth of its CPU when its calls are many: per call it links an
// AbortController to a deadline signal and aborts it when the call succeeds
// (a DOMException), constructs a ConnectError with its stack for the HTTP
// client's internal race, converts headers to and from the Fetch API's
// Headers, and passes one body chunk each way through several async
// iterables. The wire is the same: the Connect protocol's unary POST with
// the headers Connect writes (request-header.ts of @connectrpc/connect),
// on the session manager's connection, and the same errors for the caller
// (a Connect error from a JSON error body, from the HTTP status, from an
// HTTP/2 reset code or from Node's error) as connect-node gives.

import { fromBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeFromHttpStatus, errorFromJsonBytes, trailerDemux } from "@connectrpc/connect/protocol-connect";
import type { Http2SessionManager } from "@connectrpc/connect-node";
import { constants, type IncomingHttpHeaders, type OutgoingHttpHeaders } from "node:http2";

/** The user agent Connect's transport sends: connect-es and its version in package.json (a unit test checks they agree). */
const USER_AGENT = "connect-es/2.2.0";

/**
 * What a produce call answers: the message, and the response's headers as
 * Node gives them (responseHeaders makes them a Connect unary response's
 * header and trailer, on demand: nothing in the producer reads them, and
 * the Fetch API's Headers cost more to build than the message to parse).
 */
export interface CallAnswer<O extends DescMessage> {
  message: MessageShape<O>;
  headers: IncomingHttpHeaders;
}

/**
 * produceCall makes one unary call of a produce method at path on sm's
 * connection: the request body is pieces, written in order; output parses
 * the answer. timeoutMs, when set, is the call's deadline (sent as
 * connect-timeout-ms, and the call fails with DeadlineExceeded when it
 * passes); signal cancels it (Canceled, with the signal's reason as the
 * cause). header holds the caller's request headers (a token, say).
 */
export function produceCall<O extends DescMessage>(
  sm: Http2SessionManager,
  path: string,
  output: O,
  pieces: Uint8Array[],
  header: HeadersInit | undefined,
  timeoutMs: number | undefined,
  signal: AbortSignal | undefined,
): Promise<CallAnswer<O>> {
  if (signal?.aborted) return Promise.reject(ConnectError.from(signal.reason, Code.Canceled));
  const h: OutgoingHttpHeaders = {};
  if (header instanceof Headers) header.forEach((v, k) => (h[k] = v));
  else if (Array.isArray(header)) for (const [k, v] of header) h[k!.toLowerCase()] = v!;
  else if (header) for (const [k, v] of Object.entries(header)) h[k.toLowerCase()] = v;
  if (timeoutMs !== undefined) h["connect-timeout-ms"] = String(timeoutMs);
  h["content-type"] = "application/proto";
  h["connect-protocol-version"] = "1";
  if (h["user-agent"] === undefined) h["user-agent"] = USER_AGENT;

  return new Promise((resolve, reject) => {
    let settled = false;
    let stream: import("node:http2").ClientHttp2Stream | undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const onAbort = () => fail(ConnectError.from(signal!.reason, Code.Canceled), constants.NGHTTP2_CANCEL);
    const end = () => {
      settled = true;
      if (timer !== undefined) clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    };
    /** fail ends the call with e, and resets the stream (with rst) when it is still open. */
    function fail(e: ConnectError, rst = constants.NGHTTP2_CANCEL): void {
      if (settled) return;
      end();
      if (stream && !stream.closed) stream.close(rst);
      reject(e);
    }
    if (timeoutMs !== undefined) {
      timer = setTimeout(() => fail(new ConnectError("the operation timed out", Code.DeadlineExceeded)), timeoutMs);
    }
    signal?.addEventListener("abort", onAbort);

    sm.request("POST", path, h, {}).then(
      (s) => {
        stream = s;
        if (settled) {
          s.close(constants.NGHTTP2_CANCEL);
          return;
        }
        let status = 0;
        let respHeaders: IncomingHttpHeaders | undefined;
        const chunks: Buffer[] = [];
        let size = 0;
        s.on("response", (rh) => {
          respHeaders = rh;
          status = Number(rh[":status"] ?? 0);
        });
        s.on("data", (c: Buffer) => {
          chunks.push(c);
          size += c.length;
          sm.notifyResponseByteRead(s);
        });
        s.on("end", () => {
          if (settled) return;
          if (respHeaders === undefined) return fail(new ConnectError("http/2 stream ended without a response", Code.Internal));
          const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
          let answer: CallAnswer<O>;
          try {
            answer = answerOf(output, status, respHeaders, body);
          } catch (e) {
            return fail(ConnectError.from(e, Code.Internal));
          }
          end();
          resolve(answer);
        });
        s.on("error", (e: Error) => {
          // The server answered and closed the stream before the whole
          // request was written: its answer, not this, is the outcome.
          if (s.writableEnded && chainHas(e, "ERR_STREAM_WRITE_AFTER_END")) return;
          fail(fromNodeReason(e));
        });
        s.on("close", () => {
          const e = fromResetCode(s.rstCode);
          if (e) fail(e);
          else if (!settled) fail(new ConnectError("http/2 stream closed before the response ended", Code.Internal));
        });
        s.cork();
        for (const p of pieces) s.write(p);
        s.end();
        s.uncork();
      },
      (e: unknown) => fail(e instanceof ConnectError ? e : fromNodeReason(e)),
    );
  });
}

/** answerOf reads a Connect unary answer: the message of a 200 with binary protobuf, or the error the answer carries. */
function answerOf<O extends DescMessage>(output: O, status: number, rh: IncomingHttpHeaders, body: Buffer): CallAnswer<O> {
  const type = String(rh["content-type"] ?? "");
  const encoding = rh["content-encoding"];
  if (encoding !== undefined && String(encoding).toLowerCase() !== "identity") {
    // The call accepts no compression (as the transport's createTransport is made).
    throw new ConnectError(`unsupported response encoding "${String(encoding)}"`, Code.Internal, metadataOf(rh));
  }
  if (status !== 200) {
    const all = metadataOf(rh);
    const fromStatus = new ConnectError(`HTTP ${status}`, codeFromHttpStatus(status), all);
    // A unary error is JSON (the Connect protocol's error body).
    if (/^application\/json(?:;\s?charset=utf-?8)?$/i.test(type)) throw errorFromJsonBytes(body, all, fromStatus);
    throw fromStatus;
  }
  if (!/^application\/proto$/i.test(type)) {
    throw new ConnectError(`unsupported content type ${type}`, type === "" ? Code.Unknown : Code.Internal, metadataOf(rh));
  }
  return { message: fromBinary(output, body), headers: rh };
}

/** metadataOf is every response header but HTTP/2's pseudo-headers, as the Fetch API's Headers. */
function metadataOf(rh: IncomingHttpHeaders): Headers {
  const all = new Headers();
  for (const [k, v] of Object.entries(rh)) {
    if (k.startsWith(":") || v === undefined) continue;
    if (Array.isArray(v)) for (const x of v) all.append(k, x);
    else all.set(k, String(v));
  }
  return all;
}

/** responseHeaders splits a unary answer's headers into the header and the trailer (Connect's "trailer-" prefix), as Connect's transport does. */
export function responseHeaders(rh: IncomingHttpHeaders): [header: Headers, trailer: Headers] {
  return trailerDemux(metadataOf(rh));
}

/** chainHas reports whether e or one of its causes carries Node's error code. */
function chainHas(e: unknown, code: string): boolean {
  for (let i = 0; i < 16 && e instanceof Error; i++, e = (e as { cause?: unknown }).cause) {
    if ((e as { code?: unknown }).code === code) return true;
  }
  return false;
}

/**
 * fromNodeReason makes a Connect error of Node's error, with the code
 * connect-node gives it (connectErrorFromNodeReason in its node-error.ts):
 * Unavailable for a host that cannot be reached, Aborted for a stream
 * destroyed under the call, Internal otherwise; the Node error is the cause.
 */
function fromNodeReason(reason: unknown): ConnectError {
  let code = Code.Internal;
  if (chainHas(reason, "ERR_STREAM_WRITE_AFTER_END") || chainHas(reason, "ERR_STREAM_DESTROYED") || chainHas(reason, "ERR_HTTP2_INVALID_STREAM") || chainHas(reason, "ECONNRESET")) {
    code = Code.Aborted;
  } else if (chainHas(reason, "ETIMEDOUT") || chainHas(reason, "ENOTFOUND") || chainHas(reason, "EAI_AGAIN") || chainHas(reason, "ECONNREFUSED")) {
    code = Code.Unavailable;
  }
  const ce = ConnectError.from(reason, code);
  if (ce !== reason) ce.cause = reason;
  return ce;
}

/** fromResetCode is the Connect error of an HTTP/2 reset, as connect-node maps it (connectErrorFromH2ResetCode); undefined for none and for STREAM_CLOSED. */
function fromResetCode(rst: number | undefined): ConnectError | undefined {
  const c = constants;
  const say = (name: string) => `http/2 stream closed with error code ${name} (0x${rst!.toString(16)})`;
  switch (rst) {
    case c.NGHTTP2_PROTOCOL_ERROR:
      return new ConnectError(say("PROTOCOL_ERROR"), Code.Internal);
    case c.NGHTTP2_INTERNAL_ERROR:
      return new ConnectError(say("INTERNAL_ERROR"), Code.Internal);
    case c.NGHTTP2_FLOW_CONTROL_ERROR:
      return new ConnectError(say("FLOW_CONTROL_ERROR"), Code.Internal);
    case c.NGHTTP2_SETTINGS_TIMEOUT:
      return new ConnectError(say("SETTINGS_TIMEOUT"), Code.Internal);
    case c.NGHTTP2_FRAME_SIZE_ERROR:
      return new ConnectError(say("FRAME_SIZE_ERROR"), Code.Internal);
    case c.NGHTTP2_COMPRESSION_ERROR:
      return new ConnectError(say("COMPRESSION_ERROR"), Code.Internal);
    case c.NGHTTP2_CONNECT_ERROR:
      return new ConnectError(say("CONNECT_ERROR"), Code.Internal);
    case c.NGHTTP2_REFUSED_STREAM:
      return new ConnectError(say("REFUSED_STREAM"), Code.Unavailable);
    case c.NGHTTP2_CANCEL:
      return new ConnectError(say("CANCEL"), Code.Canceled);
    case c.NGHTTP2_ENHANCE_YOUR_CALM:
      return new ConnectError(say("ENHANCE_YOUR_CALM"), Code.ResourceExhausted);
    case c.NGHTTP2_INADEQUATE_SECURITY:
      return new ConnectError(say("INADEQUATE_SECURITY"), Code.PermissionDenied);
    case c.NGHTTP2_HTTP_1_1_REQUIRED:
      return new ConnectError(say("HTTP_1_1_REQUIRED"), Code.PermissionDenied);
  }
  return undefined;
}
