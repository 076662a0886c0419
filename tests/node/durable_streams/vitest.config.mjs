// vitest settings for conformance.test.mjs (the one test file here). Tests of one file
// run one at a time, as the suite expects; a case that hangs fails after testTimeout.
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    root: fileURLToPath(new URL('.', import.meta.url)),
    include: ['conformance.test.mjs'],
    testTimeout: 15_000,
    hookTimeout: 15_000,
  },
});
