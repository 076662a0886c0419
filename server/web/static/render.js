// One render function for a message, live or from history: a PersistedMessage in
// (docs/protocol.md), an <article> out. The live turn folds its frames into that
// same shape (fold.js), so a reopened chat draws exactly what the stream drew.
// Every string of the message goes into text nodes or the safe Markdown renderer;
// text still streaming goes into a text node as it is (Markdown once it is complete).

import { renderMarkdown } from "./markdown.js";

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-") || key.startsWith("aria-") || key === "role") node.setAttribute(key, value);
    else node[key] = value;
  }
  node.append(...children);
  return node;
}

/** "18 B", "2.0 KiB", "3.4 MiB". */
/** A turn's (or a chat's) tokens in words: "123 tokens (100 in, 23 out) · 2 model calls". */
export function describeUsage(usage) {
  const input = usage.inputTokens ?? 0;
  const output = usage.outputTokens ?? 0;
  const cached = usage.cachedInputTokens ?? 0;
  const written = usage.cacheWriteTokens ?? 0;
  const calls = usage.modelCalls ?? 0;
  const parts = [`${input} in`, `${output} out`];
  if (cached) parts.push(`${cached} cached`);
  if (written) parts.push(`${written} written to cache`);
  const total = input + output + cached + written;
  return `${total} tokens (${parts.join(", ")}) · ${calls} model call${calls === 1 ? "" : "s"}`;
}

export function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KiB", "MiB", "GiB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

/** "412 ms", "1.2 s", "2 min 5 s". */
function formatDuration(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const seconds = Math.round(ms / 1000);
  return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

const REPLIES = [
  ["once", "Allow once", ["allow_once"]],
  ["always", "Always allow", ["allow_always"]],
  ["reject", "Reject", ["reject_once", "reject_always"]],
];
const GRANTED = "Allowed by an earlier 'always'";
const OUTCOMES = { once: "Allowed once", always: "Always allowed", reject: "Rejected", cancelled: "Cancelled" };

/**
 * The <article> of `message`. `fileChip(file)` makes the element of an attached
 * file (the app's download button). `answer(requestId, reply)`, when given, answers
 * a pending permission request (its buttons are disabled without it, and for the
 * request ids in `answered`).
 */
export function renderMessage(message, { fileChip, answer = null, answered = new Set() }) {
  const article = el("article", {
    class: `message message-${message.role}`,
    "data-message-id": message.id,
    "data-status": message.status || (message.role === "assistant" ? "running" : "sent"),
  });
  const label = message.role === "user" ? "You" : "Assistant";
  article.append(el("h2", { class: "visually-hidden" }, label));
  if (message.role === "user") {
    for (const block of message.content) {
      if (block.type === "text") article.append(el("p", { class: "user-text" }, block.text));
    }
  } else {
    renderAssistant(message, article, answer, answered);
  }
  const files = message.fileAttachments || [];
  if (files.length) {
    const title = message.role === "user" ? "Attached" : "Files written";
    article.append(
      el("div", { class: "files", role: "group", "aria-label": title },
        el("span", { class: "files-title" }, title),
        el("ul", { class: "chips" }, ...files.map((file) => el("li", {}, fileChip(file))))),
    );
  }
  return article;
}

function renderAssistant(message, article, answer, answered) {
  const outputs = new Map();
  for (const block of message.content) if (block.type === "tool_output") outputs.set(block.stepId, block);
  for (const block of message.content) {
    if (block.type === "reasoning") {
      article.append(el("details", { class: "reasoning" }, el("summary", {}, "Reasoning"),
        el("p", { class: "reasoning-text" }, block.text)));
    }
  }
  for (const block of message.content) {
    if (block.type === "steps") {
      article.append(el("ol", { class: "steps", "aria-label": "Steps" },
        ...block.steps.map((step) => renderStep(step, outputs.get(step.id)))));
    } else if (block.type === "steps_omitted") {
      article.append(el("p", { class: "steps-omitted" }, block.message));
    }
  }
  for (const block of message.content) {
    if (block.type === "permission") article.append(renderPermission(block, answer, answered));
  }
  for (const block of message.content) {
    if (block.type !== "text") continue;
    if (block.streaming) article.append(el("div", { class: "answer streaming", "aria-live": "polite" }, block.text));
    else article.append(el("div", { class: "answer markdown" }, renderMarkdown(block.text)));
  }
  if (message.usage) article.append(el("p", { class: "usage" }, describeUsage(message.usage)));
  for (const block of message.content) {
    if (block.type === "error") {
      article.append(el("p", { class: "turn-error", role: "alert" },
        el("strong", {}, message.status === "failed" ? "Error" : "Stopped"),
        ` [${block.code}] `, block.message));
    }
  }
}

function renderStep(step, output) {
  const summary = el("summary", {},
    el("span", { class: "step-icon", "aria-hidden": "true" }),
    el("span", { class: "step-name" }, step.name),
    el("span", { class: "step-status" }, step.status),
  );
  const note = stepNote(step, output);
  if (note) summary.append(el("span", { class: "step-note" }, note));
  if (step.durationMs !== undefined && step.durationMs !== null) {
    summary.append(el("span", { class: "step-duration" }, formatDuration(step.durationMs)));
  }
  const details = el("details", { class: "step-details" }, summary);
  if (step.args !== undefined) {
    details.append(payload("Arguments", step.args, step.argsTruncated, step.argsSize));
  }
  if (output) details.append(payload("Result", output.output, output.truncated, output.size));
  if (step.error) details.append(el("p", { class: "step-error" }, step.error));
  if (step.omittedBytes) {
    details.append(el("p", { class: "step-omitted" }, `${formatSize(step.omittedBytes)} of later output not kept`));
  }
  return el("li", { class: `step step-${step.status}`, "data-step-id": step.id }, details);
}

/**
 * What a step did, in words, for the steps that say it in their result: an acp turn's
 * `agent_session` (result {way, continued}) went on with the agent's own session from
 * the chat's last turn, or opened a new one (after the ways of going on failed, if
 * its args.ways tried any).
 */
function stepNote(step, output) {
  if (step.name !== "agent_session") return "";
  if (step.status === "running") return "Opening its session…";
  const result = output && !output.truncated ? output.output : null;
  if (step.status !== "succeeded" || !result || typeof result !== "object") return "";
  if (result.continued) return `Continued its session (${result.way})`;
  const tried = Array.isArray(step.args?.ways) ? step.args.ways.filter((way) => way !== result.way) : [];
  return tried.length ? `New session (${tried.join(", ")} did not work)` : "New session";
}

/** A permission request: its question, then its buttons while pending, else its outcome. */
function renderPermission(block, answer, answered) {
  const card = el("section", {
    class: `permission permission-${block.status}`,
    "data-request-id": block.id,
    "aria-label": "Permission request",
  }, el("p", { class: "permission-title" }, block.title || "The agent asks for permission"));
  if (block.status !== "pending") {
    const outcome = block.by === "grant" ? GRANTED : OUTCOMES[block.reply] || block.reply || "";
    card.append(el("p", { class: "permission-outcome", "data-reply": block.reply || "" }, outcome));
    return card;
  }
  const kinds = new Set((block.options || []).map((option) => option.kind));
  const actions = el("div", { class: "permission-actions", role: "group" });
  for (const [reply, label, offered] of REPLIES) {
    if (kinds.size && !offered.some((kind) => kinds.has(kind))) continue;
    const button = el("button", { type: "button", class: reply === "reject" ? "quiet" : "", "data-reply": reply,
                                  disabled: answer === null || answered.has(block.id) }, label);
    if (answer !== null) button.addEventListener("click", () => answer(block.id, reply));
    actions.append(button);
  }
  card.append(actions);
  return card;
}

function payload(title, value, truncated, size) {
  const text = truncated || typeof value === "string" ? String(value) : JSON.stringify(value, null, 2);
  const heading = el("h3", {}, title);
  if (truncated) heading.append(el("span", { class: "truncated" }, ` truncated, ${formatSize(size)} in full`));
  return el("section", { class: "payload" }, heading, el("pre", {}, el("code", {}, text)));
}
