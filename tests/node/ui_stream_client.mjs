// A useChat client in Node, for tests/chat/test_ui_message_stream.py: the real `ai`
// package reads sandstream's AI SDK UI message stream and prints what it built.
//
//   node ui_stream_client.mjs '{"mode":"send","api":URL,"token":T,"chatId":C,
//                               "text":"hi","fileUrls":[...]}'
//   node ui_stream_client.mjs '{"mode":"resume","api":URL,"token":T,"chatId":C}'
//
// `send` posts one user message through DefaultChatTransport (useChat's transport: the
// same request body, the SDK's own SSE parsing and chunk schema) and reads the answer
// with readUIMessageStream. The response body is also read, through a tee, by ai 5.0.0,
// whose chunk schema is made of strict objects: a key it does not know fails there.
// `resume` calls the transport's reconnectToStream (GET {api}/{chatId}/stream).
//
//   node ui_stream_client.mjs '{"mode":"read","file":PATH}'
//
// `read` reads the UI message stream bytes in PATH with each installed `ai` version
// (5.0.0, the latest 5, 6 and 7), each through its own transport's SSE parsing and
// chunk schema and its own readUIMessageStream, and prints
// {"5.0.0": {"message", "errors"}, "5": {...}, "6": {...}, "7": {...}}.
//
// Prints one JSON object: {"message": UIMessage|null, "errors": [...],
// "message500": UIMessage|null, "errors500": [...]} ("message": null: 204, nothing live).
// A failed request prints {"requestError": "..."}.

import * as ai from 'ai';
import * as ai500 from 'ai-5.0.0';
import * as ai6 from 'ai-6';
import * as ai7 from 'ai-7';
import { readFile } from 'node:fs/promises';

const options = JSON.parse(process.argv[2]);

async function readMessage(sdk, stream) {
  const errors = [];
  let message = null;
  for await (const snapshot of sdk.readUIMessageStream({
    stream,
    onError: error => errors.push(String(error.message ?? error)),
  })) {
    message = snapshot;
  }
  return { message, errors };
}

async function readFileWithEach(path) {
  const bytes = await readFile(path);
  const versions = { '5.0.0': ai500, 5: ai, 6: ai6, 7: ai7 };
  const read = Object.entries(versions).map(async ([name, sdk]) => {
    const body = new Response(bytes).body;
    const chunks = new sdk.DefaultChatTransport({}).processResponseStream(body);
    return [name, await readMessage(sdk, chunks)];
  });
  console.log(JSON.stringify(Object.fromEntries(await Promise.all(read))));
}

async function main() {
  if (options.mode === 'read') {
    await readFileWithEach(options.file);
    return;
  }
  let tee = null;
  const transport = new ai.DefaultChatTransport({
    api: options.api,
    headers: { Authorization: `Bearer ${options.token}` },
    fetch: async (url, init) => {
      const response = await fetch(url, init);
      if (!response.ok || !response.body) return response;
      const [mine, theirs] = response.body.tee();
      tee = theirs;
      return new Response(mine, response);
    },
  });
  let stream;
  try {
    if (options.mode === 'resume') {
      stream = await transport.reconnectToStream({ chatId: options.chatId });
    } else {
      const parts = [{ type: 'text', text: options.text }];
      for (const url of options.fileUrls ?? []) {
        parts.push({ type: 'file', mediaType: 'text/plain', url });
      }
      stream = await transport.sendMessages({
        chatId: options.chatId,
        trigger: 'submit-message',
        messageId: undefined,
        messages: [{ id: 'user-1', role: 'user', parts }],
        abortSignal: undefined,
      });
    }
  } catch (error) {
    console.log(JSON.stringify({ requestError: String(error.message ?? error) }));
    return;
  }
  if (stream === null) {
    console.log(JSON.stringify({ message: null, errors: [], message500: null, errors500: [] }));
    return;
  }
  const old = new ai500.DefaultChatTransport({}).processResponseStream(tee);
  const [latest, strict] = await Promise.all([
    readMessage(ai, stream),
    readMessage(ai500, old),
  ]);
  console.log(
    JSON.stringify({
      message: latest.message,
      errors: latest.errors,
      message500: strict.message,
      errors500: strict.errors,
    }),
  );
}

await main();
