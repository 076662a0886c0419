// The live turn folded into the message shape history returns (a PersistedMessage,
// docs/protocol.md "Persisted messages"), so one render function draws both.
//
// It follows the core's fold (core/turn.py, core/persistence.py): steps keyed by id
// in first-seen order, each line overwriting the fields it carries; args and results
// whose JSON is over the display bound become a UTF-8-safe preview string with
// their full size; at the terminal, a step still running is closed as the server
// stores it. Sizes are those of the JSON as the sandbox sent it, read from the
// frame's own text (rawMembers), not of a re-encoding. Live text and reasoning
// (delta frames) and permission requests are folded as core/live.py folds them: the
// text streams until the result replaces it, the reasoning is one block, a request
// still pending when the turn ends is shown resolved, "cancelled".

const DISPLAY_BYTES = 16 * 1024;
const STOPPED = ["cancelled", "interrupted"]; // the error codes of a turn someone stopped

const utf8 = new TextEncoder();

export class LiveTurn {
  constructor(assistantMessageId) {
    this.id = assistantMessageId;
    this.steps = new Map();
    this.result = null;
    this.error = null;
    this.files = [];
    this.parts = []; // runs of deltas of one message id and kind: {id, kind, text}
    this.permissions = new Map(); // request id → {id, status, options, step, title, reply, toolKind, by}
    this.usage = { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, cacheWriteTokens: 0, modelCalls: 0 };
    this.notice = null; // the last model call's failure ({status, error}) until one succeeds
    this.createdAt = Date.now();
  }

  get ended() {
    return this.result !== null || this.error !== null;
  }

  /** Fold one frame ({type, data, raw}); frames the fold does not use are ignored. */
  fold(frame) {
    const { type, data } = frame;
    if (type === "start" && data.assistantMessageId) this.id = data.assistantMessageId;
    else if (type === "step") this.foldStep(data, rawMembers(frame.raw));
    else if (type === "delta") this.foldDelta(data);
    else if (type === "permission") this.foldPermission(data);
    else if (type === "usage") this.foldUsage(data);
    else if (type === "files") this.files = data.files || [];
    else if (type === "result" && !this.ended) this.result = data;
    else if (type === "error" && !this.ended) this.error = data;
  }

  /** One model call's tokens (the usage extension), summed as core/turn.py sums them. */
  foldUsage(call) {
    const usage = this.usage;
    usage.inputTokens += call.input_tokens;
    usage.outputTokens += call.output_tokens;
    usage.cachedInputTokens += call.cached_input_tokens;
    usage.cacheWriteTokens += call.cache_write_tokens;
    usage.modelCalls += 1;
    if (call.error) this.notice = { status: call.status ?? null, error: call.error };
    else if (call.status != null && call.status < 400) this.notice = null;
  }

  foldStep(step, raw) {
    let row = this.steps.get(step.id);
    if (row === undefined) {
      row = { id: step.id, name: step.name, status: step.status, args: null, result: null, error: null,
              durationMs: null, firstTs: step.ts ?? null, lastTs: step.ts ?? null };
      this.steps.set(step.id, row);
    } else {
      if (row.status !== "running" || row.name !== step.name) return; // the server drops these
      row.status = step.status;
      if (step.ts != null) {
        if (row.firstTs === null) row.firstTs = step.ts;
        row.lastTs = step.ts;
      }
    }
    if ("args" in step) row.args = raw.args;
    if ("result" in step) row.result = raw.result;
    if (step.error != null) row.error = step.error;
    if (step.durationMs != null) row.durationMs = step.durationMs;
  }

  foldDelta(delta) {
    if (this.ended) return;
    const last = this.parts[this.parts.length - 1];
    if (last && last.id === delta.id && last.kind === delta.kind) last.text += delta.text;
    else this.parts.push({ id: delta.id, kind: delta.kind, text: delta.text });
  }

  foldPermission(line) {
    const row = this.permissions.get(line.id);
    if (line.status === "pending" && row === undefined) {
      this.permissions.set(line.id, { id: line.id, status: "pending", options: line.options || [],
                                      step: line.step ?? null, title: line.title ?? null, reply: null,
                                      toolKind: line.tool_kind ?? null, by: null });
    } else if (line.status === "resolved" && row !== undefined && row.status === "pending") {
      row.status = "resolved";
      row.reply = line.reply;
      row.by = line.by ?? null;
    } // anything else breaks a rule: the server drops it too
  }

  /** The deltas of `kind` joined, all messages in order. */
  text(kind) {
    return this.parts.filter((part) => part.kind === kind).map((part) => part.text).join("");
  }

  /**
   * The message as history will hold it (`status` unset while the turn runs). While
   * it runs, the text streamed so far is a text block marked `streaming`.
   */
  message() {
    const content = [];
    const reasoning = this.text("reasoning");
    if (reasoning) content.push({ type: "reasoning", text: reasoning });
    const streamed = this.text("text");
    if (this.result) content.push({ type: "text", text: this.result.message });
    else if (streamed) content.push(this.ended ? { type: "text", text: streamed } : { type: "text", text: streamed, streaming: true });
    const rows = [...this.steps.values()];
    if (rows.length) {
      content.push({ type: "steps", steps: rows.map((row) => this.trace(row)) });
      for (const row of rows) {
        if (row.result === null) continue;
        const [output, truncated, size] = bounded(row.result);
        const block = { type: "tool_output", stepId: row.id, name: row.name, output, size };
        if (truncated) block.truncated = true;
        content.push(block);
      }
    }
    for (const row of this.permissions.values()) content.push(this.permission(row));
    if (this.error) content.push({ type: "error", code: this.error.code, message: this.error.message });
    const message = { id: this.id, role: "assistant", content, createdAt: this.createdAt };
    if (this.files.length) message.fileAttachments = this.files;
    if (this.ended) message.status = this.result ? "complete" : STOPPED.includes(this.error.code) ? this.error.code : "failed";
    if (this.usage.modelCalls) {
      // as stored: the counts that are not 0 (core/persistence.py MessageUsage)
      message.usage = Object.fromEntries(Object.entries(this.usage).filter(([, count]) => count));
    }
    return message;
  }

  permission(row) {
    const block = { type: "permission", id: row.id, status: row.status, options: row.options };
    if (row.step !== null) block.step = row.step;
    if (row.title !== null) block.title = row.title;
    if (row.reply !== null) block.reply = row.reply;
    if (row.toolKind !== null) block.toolKind = row.toolKind;
    if (row.by !== null) block.by = row.by;
    if (this.ended && block.status === "pending") {
      block.status = "resolved";
      block.reply = "cancelled";
    }
    return block;
  }

  trace(row) {
    const trace = { id: row.id, name: row.name, status: row.status };
    if (row.args !== null) {
      const [args, truncated, size] = bounded(row.args);
      trace.args = args;
      if (truncated) trace.argsTruncated = true;
      trace.argsSize = size;
    }
    if (row.error !== null) trace.error = row.error;
    if (row.durationMs !== null) trace.durationMs = row.durationMs;
    if (row.firstTs !== null) trace.firstTs = row.firstTs;
    if (row.lastTs !== null) trace.lastTs = row.lastTs;
    if (this.ended && trace.status === "running") closeStep(trace, this.error);
    return trace;
  }
}

/** A step the turn left running, closed as core/persistence.py `_closed_step` does. */
function closeStep(trace, error) {
  if (error === null) {
    trace.status = "failed";
    trace.error = "the turn ended before this step finished";
  } else if (STOPPED.includes(error.code)) {
    trace.status = "cancelled";
    trace.error = `the turn was ${error.code}: ${error.message}`;
  } else {
    trace.status = "failed";
    trace.error = `the turn ended before this step finished: [${error.code}] ${error.message}`;
  }
}

/** [value, truncated, size] of a raw JSON text: the value, or its first bytes as a string. */
function bounded(rawText) {
  const bytes = utf8.encode(rawText);
  if (bytes.length <= DISPLAY_BYTES) return [JSON.parse(rawText), false, bytes.length];
  let end = DISPLAY_BYTES;
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--; // not inside a UTF-8 sequence
  return [new TextDecoder().decode(bytes.subarray(0, end)), true, bytes.length];
}

/**
 * The members of a JSON object text as raw value texts: {"a": 1, "b": [2]} gives
 * {a: "1", b: "[2]"}. The text is valid JSON (the server validated the line).
 */
function rawMembers(text) {
  const members = {};
  let i = skipSpace(text, text.indexOf("{") + 1);
  while (i < text.length && text[i] !== "}") {
    const keyEnd = skipValue(text, i);
    const key = JSON.parse(text.slice(i, keyEnd));
    const valueStart = skipSpace(text, skipSpace(text, keyEnd) + 1); // past the colon
    const valueEnd = skipValue(text, valueStart);
    members[key] = text.slice(valueStart, valueEnd);
    i = skipSpace(text, valueEnd);
    if (text[i] === ",") i = skipSpace(text, i + 1);
  }
  return members;
}

function skipSpace(text, i) {
  while (i < text.length && " \t\n\r".includes(text[i])) i++;
  return i;
}

/** The index just past the JSON value starting at `i`. */
function skipValue(text, i) {
  let depth = 0;
  for (; i < text.length; i++) {
    const ch = text[i];
    if (ch === '"') {
      for (i++; text[i] !== '"'; i++) if (text[i] === "\\") i++;
      if (depth === 0) return i + 1;
    } else if (ch === "{" || ch === "[") {
      depth++;
    } else if (ch === "}" || ch === "]") {
      depth--;
      if (depth === 0) return i + 1;
      if (depth < 0) return i;
    } else if (depth === 0 && (ch === "," || " \t\n\r".includes(ch))) {
      return i;
    }
  }
  return i;
}
