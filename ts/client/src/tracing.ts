// Trace context in record headers (W3C Trace Context), as the Go client
// writes and reads it (client/tracing.go), without a dependency on an
// OpenTelemetry SDK: the application hands the producer a propagator, which
// @opentelemetry/api's `propagation` fits in one line, and reads a consumed
// message's context with traceCarrier. An application without tracing pays
// nothing and its records carry no extra headers.
//
//   import { context, propagation, trace } from "@opentelemetry/api";
//   const producer = strata.producer({
//     propagator: { inject: (carrier) => propagation.inject(context.active(), carrier) },
//   });
//   // consumer side:
//   const parent = propagation.extract(context.active(), traceCarrier(message.headers));
//   tracer.startActiveSpan("process orders", { kind: SpanKind.CONSUMER }, parent, (span) => { ... });

/** Header keys of W3C Trace Context. */
export const TRACE_HEADERS = ["traceparent", "tracestate"] as const;

/**
 * Writes the caller's trace context into a carrier of text headers, as
 * OpenTelemetry's `propagation.inject(context.active(), carrier)` does. It is
 * called once per `send()`, in the caller's context, and what it writes is
 * added to each message of that call that does not set its own traceparent
 * (such a message keeps its trace context whole).
 */
export interface TracePropagator {
  inject(carrier: Record<string, string>): void;
}

const traceparentRE = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/** Reports whether s is a well-formed W3C traceparent value (an all-zero trace or span id is not). */
export function isTraceparent(s: string): boolean {
  if (!traceparentRE.test(s) || s.startsWith("ff")) return false;
  const [, traceId, spanId] = s.split("-");
  return !/^0+$/.test(traceId!) && !/^0+$/.test(spanId!);
}

/**
 * traceHeaders asks the propagator for the caller's trace context and
 * returns the headers to add to each message: a well-formed traceparent and
 * any tracestate, or none.
 */
export function traceHeaders(propagator: TracePropagator | undefined): [string, string][] {
  if (!propagator) return [];
  const carrier: Record<string, string> = {};
  propagator.inject(carrier);
  const tp = carrier["traceparent"];
  if (tp === undefined || !isTraceparent(tp)) return [];
  const out: [string, string][] = [["traceparent", tp]];
  const ts = carrier["tracestate"];
  if (ts) out.push(["tracestate", ts]);
  return out;
}

const textDecoder = new TextDecoder();

/**
 * traceCarrier returns a consumed message's trace context headers as text,
 * for `propagation.extract(context.active(), traceCarrier(message.headers))`:
 * the producer's send span becomes the parent (or a link) of the process
 * span. It is empty when the producer wrote no well-formed traceparent.
 */
export function traceCarrier(headers: Record<string, Uint8Array | null | (Uint8Array | null)[]>): Record<string, string> {
  const first = (v: Uint8Array | null | (Uint8Array | null)[] | undefined): string | undefined => {
    const b = Array.isArray(v) ? v[0] : v;
    return b ? textDecoder.decode(b) : undefined;
  };
  const tp = first(headers["traceparent"]);
  if (tp === undefined || !isTraceparent(tp)) return {};
  const out: Record<string, string> = { traceparent: tp };
  const ts = first(headers["tracestate"]);
  if (ts) out["tracestate"] = ts;
  return out;
}
