// An SSE reader in Node, for tests/chat/test_eventsource_clients.py: the npm
// `eventsource` package (a WHATWG EventSource) reads a stream and resumes it by itself.
//
//   node eventsource_client.mjs '{"url":URL,"events":["step",...],"authorization":A}'
//
// Listens to `message` and to each named event of `events`; `authorization` (optional)
// is sent as the Authorization header of every request (a custom fetch). Prints one
// JSON line per event as it arrives, {"event","id","data"}, one per opened connection,
// {"open": N}, and, once the EventSource has stopped for good (readyState CLOSED),
// {"closed": true, "status": S} (S: the HTTP status that stopped it), then exits.

import { EventSource } from 'eventsource';

const options = JSON.parse(process.argv[2]);
const print = value => process.stdout.write(JSON.stringify(value) + '\n');

const authorized = (input, init) =>
  fetch(input, { ...init, headers: { ...init.headers, Authorization: options.authorization } });
const source = new EventSource(
  options.url,
  options.authorization ? { fetch: authorized } : {},
);

let opens = 0;
source.addEventListener('open', () => print({ open: ++opens }));
for (const name of ['message', ...options.events]) {
  source.addEventListener(name, event => {
    if (event.data !== undefined) print({ event: name, id: event.lastEventId, data: event.data });
  });
}
source.addEventListener('error', event => {
  if (source.readyState === EventSource.CLOSED) {
    print({ closed: true, status: event.code ?? null });
    process.exit(0);
  }
});
