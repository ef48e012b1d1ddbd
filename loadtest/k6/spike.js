// @ts-check
// A spike: a steady produce rate, ten times that for a short while, and
// back. The thresholds say how much the spike may cost.
//
//   k6 run loadtest/k6/spike.js
//   k6 run -e STRATA_GATEWAY=http://localhost:9092 -e RATE=20 loadtest/k6/spike.js
import { Counter } from 'k6/metrics';
import { createTopic, produce, tlsAuth } from './lib/strata.js';

const base = Number(__ENV.RATE || 20);
const recordsProduced = new Counter('strata_records_produced');

/** @type {import('k6/options').Options} */
export const options = {
  tlsAuth,
  scenarios: {
    spike: {
      executor: 'ramping-arrival-rate',
      exec: 'producer',
      startRate: base,
      timeUnit: '1s',
      preAllocatedVUs: 20,
      maxVUs: 500,
      stages: [
        { target: base, duration: '20s' },
        { target: base * 10, duration: '5s' },
        { target: base * 10, duration: '15s' },
        { target: base, duration: '5s' },
        { target: base, duration: '20s' },
      ],
      tags: { kind: 'produce', shape: 'spike' },
    },
  },
  thresholds: {
    http_req_failed: ['rate<0.02'],
    checks: ['rate>0.98'],
    'http_req_duration{scenario:spike}': ['p(95)<500', 'p(99)<2000'],
    dropped_iterations: ['count<100'],
  },
};

export function setup() {
  createTopic();
}

export function producer() {
  recordsProduced.add(produce('json'));
}
