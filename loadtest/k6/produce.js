// @ts-check
// Produce at a constant arrival rate through the gateway's JSON proxy, in
// two scenarios: plain JSON as curl sends it, and the Connect protocol's
// unary JSON (version header and deadline). Each request carries the ten
// records of fixtures/produce.json.
//
//   k6 run loadtest/k6/produce.js
//   k6 run -e STRATA_GATEWAY=http://localhost:9092 -e RATE=200 -e DURATION=1m loadtest/k6/produce.js
import { Counter } from 'k6/metrics';
import { createTopic, produce, tlsAuth } from './lib/strata.js';

const rate = Number(__ENV.RATE || 50);
const duration = __ENV.DURATION || '30s';
const recordsProduced = new Counter('strata_records_produced');

/** @type {import('k6/options').Options} */
export const options = {
  tlsAuth,
  scenarios: {
    produce_json: {
      executor: 'constant-arrival-rate',
      exec: 'produceJSON',
      rate,
      timeUnit: '1s',
      duration,
      preAllocatedVUs: 20,
      maxVUs: 200,
      tags: { kind: 'produce', protocol: 'json' },
    },
    produce_connect: {
      executor: 'constant-arrival-rate',
      exec: 'produceConnect',
      rate,
      timeUnit: '1s',
      duration,
      preAllocatedVUs: 20,
      maxVUs: 200,
      tags: { kind: 'produce', protocol: 'connect' },
    },
  },
  thresholds: {
    http_req_failed: ['rate<0.01'],
    checks: ['rate>0.99'],
    'http_req_duration{scenario:produce_json}': ['p(95)<250', 'p(99)<500'],
    'http_req_duration{scenario:produce_connect}': ['p(95)<250', 'p(99)<500'],
    dropped_iterations: ['count<10'],
  },
};

export function setup() {
  createTopic();
}

export function produceJSON() {
  recordsProduced.add(produce('json'));
}

export function produceConnect() {
  recordsProduced.add(produce('connect'));
}
