// Follows a Durable Stream live from its start with the official JavaScript client
// (@durable-streams/client), for tests/streams/test_clients.py:
//
//   node follow_client.mjs '{"url": URL, "live": "long-poll"|"sse", "json": BOOL, "token": T}'
//
// Reads from offset -1 with `stream({live})`: bytes (subscribeBytes) or, with json,
// JSON messages (subscribeJson). `token` (optional) is sent as a bearer token. Prints
// one JSON line per event, as it happens:
//   {"request": {"live": L}}      each request the client sends (its `live` parameter)
//   {"ready": true}               the first response is in (the client follows)
//   {"data": BASE64} / {"items": [...]}   each batch delivered, with its upToDate,
//                                 streamClosed and offset
//   {"end": {"streamClosed": B, "offset": O}}   the session ended by itself
// and exits 0; on an error, prints it on stderr and exits 1.

import { stream } from '@durable-streams/client';

const options = JSON.parse(process.argv[2]);
const print = value => process.stdout.write(JSON.stringify(value) + '\n');

const recordingFetch = (input, init) => {
  const url = new URL(typeof input === 'string' ? input : input.url ?? input.href);
  print({ request: { live: url.searchParams.get('live') } });
  return fetch(input, init);
};

const meta = batch => ({
  upToDate: batch.upToDate,
  streamClosed: batch.streamClosed,
  offset: batch.offset,
});

try {
  const response = await stream({
    url: options.url,
    offset: '-1',
    live: options.live,
    headers: options.token ? { Authorization: `Bearer ${options.token}` } : {},
    fetch: recordingFetch,
  });
  print({ ready: true });
  if (options.json) {
    response.subscribeJson(batch => print({ items: batch.items, ...meta(batch) }));
  } else {
    response.subscribeBytes(chunk =>
      print({ data: Buffer.from(chunk.data).toString('base64'), ...meta(chunk) }),
    );
  }
  await response.closed;
  print({ end: { streamClosed: response.streamClosed, offset: response.offset } });
  process.exit(0);
} catch (error) {
  process.stderr.write(`${error?.stack ?? error}\n`);
  process.exit(1);
}
