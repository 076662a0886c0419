// The Durable Streams server conformance suite (@durable-streams/server-conformance-tests)
// against one server, for tests/streams/test_conformance.py (vitest.config.mjs beside
// this file finds it):
//
//   DURABLE_STREAMS_URL=http://127.0.0.1:PORT [DURABLE_STREAMS_TOKEN=T] \
//     npx vitest run --config durable_streams/vitest.config.mjs --reporter=json ...
//
// The suite puts its streams under `${DURABLE_STREAMS_URL}/v1/stream/`. With a token,
// every request to that server (the suite's own fetch calls and the client package's)
// carries `Authorization: Bearer <token>`: global fetch is wrapped before the suite
// runs. The opt-in subscriptions group stays off.

import { runConformanceTests } from '@durable-streams/server-conformance-tests';

const baseUrl = process.env.DURABLE_STREAMS_URL;
const token = process.env.DURABLE_STREAMS_TOKEN;
if (!baseUrl) throw new Error('DURABLE_STREAMS_URL is not set');

if (token) {
  const plainFetch = globalThis.fetch;
  const urlOf = input =>
    typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
  globalThis.fetch = (input, init = {}) => {
    if (!urlOf(input).startsWith(`${baseUrl}/`)) return plainFetch(input, init);
    const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : {}));
    headers.set('Authorization', `Bearer ${token}`);
    return plainFetch(input, { ...init, headers });
  };
}

runConformanceTests({ baseUrl });
