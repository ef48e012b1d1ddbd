// @ts-check
// Consume while producing: producers at a constant arrival rate, and one
// consumer per partition long-polling FetchJSON from the start of its
// partition, following nextOffset. The end-to-end latency (now minus the
// record's timestamp) is a Trend.
//
//   k6 run loadtest/k6/consume.js
//   k6 run -e STRATA_GATEWAY=http://localhost:9092 -e RATE=100 loadtest/k6/consume.js
import { Counter, Trend } from 'k6/metrics';
import { createTopic, fetch, partitions, produce, tlsAuth } from './lib/strata.js';

const rate = Number(__ENV.RATE || 50);
const duration = __ENV.DURATION || '30s';
const recordsProduced = new Counter('strata_records_produced');
const recordsConsumed = new Counter('strata_records_consumed');
const endToEnd = new Trend('strata_end_to_end_ms', true);

/** @type {import('k6/options').Options} */
export const options = {
  tlsAuth,
  scenarios: {
    producers: {
      executor: 'constant-arrival-rate',
      exec: 'producer',
      rate,
      timeUnit: '1s',
      duration,
      preAllocatedVUs: 20,
      maxVUs: 200,
      tags: { kind: 'produce' },
    },
    consumers: {
      executor: 'constant-vus',
      exec: 'consumer',
      vus: partitions,
      duration,
      tags: { kind: 'consume' },
    },
  },
  thresholds: {
    http_req_failed: ['rate<0.01'],
    checks: ['rate>0.99'],
    'http_req_duration{scenario:producers}': ['p(95)<250', 'p(99)<500'],
    // A fetch waits up to maxWaitMs (500) when the partition has nothing new.
    'http_req_duration{scenario:consumers}': ['p(95)<800', 'p(99)<1200'],
    strata_end_to_end_ms: ['p(95)<1000'],
    strata_records_consumed: ['count>0'],
  },
};

export function setup() {
  createTopic();
}

export function producer() {
  recordsProduced.add(produce('json'));
}

// Each consumer VU owns one partition and keeps its position across
// iterations (module state is per VU).
let position = -2;

export function consumer() {
  const partition = (__VU - 1) % partitions;
  const { next, records } = fetch(partition, position);
  const now = Date.now();
  for (const r of records) {
    endToEnd.add(now - Number(r.timestampMs));
  }
  recordsConsumed.add(records.length);
  position = next;
}
