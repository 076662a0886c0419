// The Durable Streams reference server (npm `@durable-streams/server`) for
// benchmarks/streams: `node reference_server.mjs PACKAGE_JSON [DATA_DIR]`.
//
// PACKAGE_JSON is the package.json of the folder whose node_modules holds the package
// (tests/node's). With DATA_DIR the store is file-backed there, without it in memory.
// Serves on 127.0.0.1 at a free port with the package's defaults otherwise, prints
// `listening <url>` on stdout once it accepts connections, and stops (closing its
// store) on SIGTERM or SIGINT.

import { createRequire } from 'node:module';

const [packageJson, dataDir] = process.argv.slice(2);
const { DurableStreamTestServer } = createRequire(packageJson)('@durable-streams/server');

const server = new DurableStreamTestServer({ host: '127.0.0.1', port: 0, dataDir });
const url = await server.start();
process.stdout.write(`listening ${url}\n`);

const stop = async () => {
  await server.stop();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
