// The Node reference server of Durable Streams (@durable-streams/server), for comparison
// with sandstream's (tests/streams, benchmarks/streams; started by
// benchmarks/support/reference_server.py):
//
//   node reference_server.mjs '{"dataDir": DIR, "port": 0, "longPollTimeout": 500}'
//
// Serves on 127.0.0.1:port (0: a free one) with its data in dataDir (which must exist),
// or in memory without one; longPollTimeout (ms, optional) is how long a live long-poll
// waits for data. Prints {"url": URL} on one line once it listens, then serves until
// SIGTERM or SIGINT, when it stops (closing live connections) and exits 0.

import { DurableStreamTestServer } from '@durable-streams/server';

const options = JSON.parse(process.argv[2] ?? '{}');
const server = new DurableStreamTestServer({
  host: '127.0.0.1',
  port: options.port ?? 0,
  ...(options.dataDir === undefined ? {} : { dataDir: options.dataDir }),
  ...(options.longPollTimeout === undefined ? {} : { longPollTimeout: options.longPollTimeout }),
});
const url = await server.start();
process.stdout.write(JSON.stringify({ url }) + '\n');

const stop = async () => {
  await server.stop();
  process.exit(0);
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
