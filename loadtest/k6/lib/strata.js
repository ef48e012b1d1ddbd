// @ts-check
// Shared by the k6 scripts: where the gateway is, the credentials for a
// secure cluster, the request bodies (read from ../fixtures, which
// tests/k6_test.go sends too), and the calls with the checks the Go test
// mirrors. Change a check's name here and there together: the Go test looks
// for each name in these files.
import http from 'k6/http';
import { check } from 'k6';

/** Gateway base URL: STRATA_GATEWAY, as the CLI reads it. */
export const gateway = (__ENV.STRATA_GATEWAY || 'http://127.0.0.1:9092').replace(/\/+$/, '');

/**
 * Bearer token: STRATA_TOKEN, as the CLI reads it (`strata user create`
 * prints it). When set, every request carries `Authorization: Bearer
 * <token>`; the token is never printed.
 */
/** @type {Record<string, string>} */
const auth = __ENV.STRATA_TOKEN ? { Authorization: `Bearer ${__ENV.STRATA_TOKEN}` } : {};

/** The gateway's host as TLS sees it (no port, no IPv6 brackets). */
const gatewayHost = (/^https?:\/\/(?:\[([^\]]+)\]|([^:/]+))/.exec(gateway) || []).slice(1).find(Boolean) || '';

/**
 * A client certificate for the gateway (mutual TLS, principal User:<CN>)
 * when STRATA_TLS_CERT and STRATA_TLS_KEY name PEM files, as admin.env of
 * `strata dev --secure` exports them; each script passes it as its tlsAuth
 * option. k6 has no option for a private CA: point SSL_CERT_FILE at it
 * (k6 reads the trust store as Go does).
 * @type {import('k6/options').Certificate[] | undefined}
 */
export const tlsAuth =
  __ENV.STRATA_TLS_CERT && __ENV.STRATA_TLS_KEY
    ? [{ domains: [gatewayHost], cert: open(__ENV.STRATA_TLS_CERT), key: open(__ENV.STRATA_TLS_KEY) }]
    : undefined;

/** @param {string} name @returns {any} a fixture, parsed (k6 `open` runs in the init context). */
function fixture(name) {
  return JSON.parse(open(`../fixtures/${name}`));
}

const topicFixture = fixture('create-topic.json');
const produceFixture = fixture('produce.json');
const fetchFixture = fixture('fetch.json');

/** Topic every script uses: STRATA_TOPIC, else the fixtures' own. */
export const topic = __ENV.STRATA_TOPIC || topicFixture.name;
/** Partitions of the topic the setup creates. */
export const partitions = Number(topicFixture.partitions);

const rpc = (/** @type {string} */ method) => `${gateway}/strata.gateway.v1.GatewayService/${method}`;

/** A plain JSON POST, as curl sends it (with the token when there is one). */
const jsonHeaders = { 'Content-Type': 'application/json', ...auth };
/** The Connect protocol's unary JSON: the same POST with its version and a deadline. */
const connectHeaders = { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1', 'Connect-Timeout-Ms': '10000', ...auth };

/**
 * Creates the topic unless it exists (setup of every script).
 * @returns {void}
 */
export function createTopic() {
  const body = JSON.stringify({ ...topicFixture, name: topic });
  const res = http.post(rpc('CreateTopic'), body, { headers: jsonHeaders, tags: { rpc: 'CreateTopic' } });
  const ok = check(res, {
    'setup: topic exists': (r) => r.status === 200 || (r.status === 409 && /already_exists/.test(String(r.body))),
  });
  if (!ok) {
    throw new Error(`cannot create topic ${topic} at ${gateway}: ${res.status} ${res.body}`);
  }
}

/**
 * Produces the fixture's records through ProduceJSON.
 * @param {'json' | 'connect'} protocol plain JSON or the Connect protocol's headers
 * @returns {number} records acknowledged
 */
export function produce(protocol) {
  const body = JSON.stringify({ ...produceFixture, topic });
  const res = http.post(rpc('ProduceJSON'), body, {
    headers: protocol === 'connect' ? connectHeaders : jsonHeaders,
    tags: { rpc: 'ProduceJSON', protocol },
  });
  /** @type {Array<{partition?: number, offset?: string, error?: unknown}>} */
  let results = [];
  if (res.status === 200) {
    results = /** @type {any} */ (res.json()).results || [];
  }
  check(res, {
    'produce: status is 200': (r) => r.status === 200,
    'produce: one result per record': () => results.length === produceFixture.records.length,
    // Connect's JSON leaves zero values out: no "offset" means offset 0.
    'produce: every record has an offset': () => results.every((x) => !x.error && /^\d+$/.test(String(x.offset ?? '0'))),
  });
  return results.filter((x) => !x.error).length;
}

/**
 * Fetches one partition from an offset through FetchJSON.
 * @param {number} partition
 * @param {number} offset -2 for the earliest, -1 for the latest
 * @returns {{next: number, records: Array<{offset?: string, timestampMs: string}>}}
 */
export function fetch(partition, offset) {
  const body = JSON.stringify({ ...fetchFixture, topic, partition, offset: String(offset) });
  const res = http.post(rpc('FetchJSON'), body, { headers: jsonHeaders, tags: { rpc: 'FetchJSON' } });
  /** @type {any} */
  const m = res.status === 200 ? res.json() : {};
  /** @type {Array<{offset?: string, timestampMs: string}>} Connect's JSON leaves offset 0 out. */
  const records = m.records || [];
  const next = Number(m.nextOffset ?? (records.length > 0 ? 0 : offset));
  const first = offset < 0 ? -Infinity : offset;
  check(res, {
    'fetch: status is 200': (r) => r.status === 200,
    'fetch: records are in offset order from the requested offset': () =>
      records.every((r, i) => Number(r.offset ?? 0) >= first && (i === 0 || Number(r.offset ?? 0) > Number(records[i - 1].offset ?? 0))),
    'fetch: nextOffset is past the last record': () =>
      records.length === 0 || next === Number(records[records.length - 1].offset ?? 0) + 1,
  });
  return { next, records };
}
