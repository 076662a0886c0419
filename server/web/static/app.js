// The chat web app: sign-in, the chat list, a thread, the composer, and live turns.
//
// A turn is read from its SSE stream and folded into the message shape history
// holds (fold.js); the same render function (render.js) draws live and stored
// messages. The token lives in sessionStorage (this tab only). Other tabs of the
// browser hear about turns (and follow-ups) on a BroadcastChannel and join them.
//
// A turn runs on the server whoever watches it: a reload, a second tab or a dropped
// connection joins it again (GET …/stream, after the last frame id seen), stop
// interrupts it (POST …/interrupt), and a message sent while it runs goes to its
// agent (POST …/messages). Its text streams in as it is written; a permission request
// shows a card whose buttons answer it (POST …/permissions/{requestId}); every viewer
// sees the outcome when the request's resolved line arrives. The Files panel shows
// the chat's workspace (workspace.js), drawn when the chat opens and when its turn ends.

import { Api, ApiError, readFrames } from "./api.js";
import { LiveTurn } from "./fold.js";
import { setUpNotifyToggle } from "./notify.js";
import { describeUsage, formatSize, renderMessage } from "./render.js";
import { drawWorkspace } from "./workspace.js";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "sandstream.token";
const WORKSPACE_KEY = "sandstream.workspace";
const POLL_MS = 1000;

const state = {
  api: null,
  chatId: null, // the open chat (null: a new chat not created yet)
  pending: [], // files uploaded for the next message: {file} while uploading, then {attachment}
  turns: new Map(), // chatId → the Turn this tab follows
  chatUsage: null, // the open chat's stored total (its settled turns): {chatId, usage}
  channel: "BroadcastChannel" in window ? new BroadcastChannel("sandstream-chat") : null,
};

// -- sign-in -------------------------------------------------------------------------------

async function signIn(token, workspace) {
  const api = new Api(token, workspace);
  await api.listChats(); // checks the token
  state.api = api;
  sessionStorage.setItem(TOKEN_KEY, token);
  sessionStorage.setItem(WORKSPACE_KEY, workspace);
  $("workspace-name").textContent = workspace;
  setUpNotifyToggle($("notify"), api, fail).catch(fail);
  await refreshChats();
  await route();
  // Shown only now: a file attached before the first route ran would be dropped by it.
  $("signin").hidden = true;
  $("app").hidden = false;
}

function showSignIn(message = "") {
  state.api = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message;
  $("workspace").value = sessionStorage.getItem(WORKSPACE_KEY) || $("workspace").value;
  $("token").focus();
}

$("signin-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("signin-error").textContent = "";
  try {
    await signIn($("token").value.trim(), $("workspace").value.trim());
  } catch (error) {
    showSignIn(error instanceof ApiError && error.status === 401 ? "That token was refused." : error.message);
  }
});

$("signout").addEventListener("click", () => {
  sessionStorage.clear();
  location.hash = "";
  location.reload();
});

/** Show an API failure; a refused token goes back to the sign-in form. */
function fail(error) {
  if (error instanceof ApiError && error.status === 401) {
    showSignIn("The token was refused; sign in again.");
    return;
  }
  $("alert").textContent = error.message;
}

function say(text) {
  $("status").textContent = text;
}

// -- the chat list ------------------------------------------------------------------------

async function refreshChats() {
  const { chats } = await state.api.listChats();
  const list = $("chat-list");
  list.replaceChildren(
    ...chats.map((chat) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "chat-link";
      button.dataset.chatId = chat.id;
      if (chat.id === state.chatId) button.setAttribute("aria-current", "page");
      const title = document.createElement("span");
      title.className = "chat-title";
      title.textContent = chat.title || "Untitled chat";
      const meta = document.createElement("span");
      meta.className = "chat-meta";
      const when = new Date(chat.updatedAt).toLocaleString();
      meta.textContent = `${chat.messageCount} ${chat.messageCount === 1 ? "message" : "messages"} · ${when}${chat.activeMessageId ? " · running" : ""}`;
      button.append(title, meta);
      button.addEventListener("click", () => {
        location.hash = `#chat=${encodeURIComponent(chat.id)}`;
        document.body.classList.remove("chats-open");
        $("toggle-chats").setAttribute("aria-expanded", "false");
      });
      const item = document.createElement("li");
      item.append(button);
      return item;
    }),
  );
}

$("new-chat").addEventListener("click", () => {
  location.hash = "";
  openNewChat();
  $("message").focus();
});

$("toggle-chats").addEventListener("click", () => {
  const open = document.body.classList.toggle("chats-open");
  $("toggle-chats").setAttribute("aria-expanded", String(open));
});

$("toggle-files").addEventListener("click", () => {
  const open = document.body.classList.toggle("files-open");
  $("toggle-files").setAttribute("aria-expanded", String(open));
});

// -- the thread ---------------------------------------------------------------------------

function fileChip(file) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "chip";
  button.dataset.fileId = file.id;
  button.title = `Download ${file.name}`;
  const name = document.createElement("span");
  name.className = "chip-name";
  name.textContent = file.name;
  const size = document.createElement("span");
  size.className = "chip-size";
  size.textContent = formatSize(file.size);
  button.append(name, size);
  button.addEventListener("click", () => download(file.name, () => state.api.download(state.chatId, file.id)));
  return button;
}

/** Save the blob `fetchBlob()` gives as the file `name` (its last path component). */
async function download(name, fetchBlob) {
  try {
    const blob = await fetchBlob();
    const url = URL.createObjectURL(blob);
    const anchor = document.createElement("a");
    anchor.href = url;
    anchor.download = name.split("/").pop();
    anchor.click();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  } catch (error) {
    fail(error);
  }
}

/** Draw the Files panel: the workspace of `chatId` (none for a new chat). */
async function refreshWorkspace(chatId) {
  const listing = chatId ? await state.api.getWorkspace(chatId) : null;
  if (state.chatId !== chatId) return; // another chat was opened meanwhile
  drawWorkspace($("workspace-files"), $("workspace-empty"), listing, (file) =>
    download(file.path, () => state.api.downloadWorkspaceFile(chatId, file.path)),
  );
}

function render(message) {
  return renderMessage(message, { fileChip });
}

function openNewChat() {
  state.chatId = null;
  $("grants").hidden = true;
  $("messages").replaceChildren();
  clearPending();
  $("alert").textContent = "";
  say("");
  updateControls();
  markCurrentChat();
  refreshWorkspace(null);
}

function markCurrentChat() {
  for (const button of $("chat-list").querySelectorAll(".chat-link")) {
    if (button.dataset.chatId === state.chatId) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
}

/** Render the chat from history; follow its live turn if it has one. */
async function openChat(chatId) {
  const opened = chatId !== state.chatId;
  state.chatId = chatId;
  $("alert").textContent = "";
  if (opened) {
    clearPending();
    $("grants").hidden = true;
  }
  markCurrentChat();
  let chat;
  try {
    chat = await state.api.getChat(chatId);
  } catch (error) {
    fail(error);
    return;
  }
  if (state.chatId !== chatId) return; // another chat was opened meanwhile
  const turn = state.turns.get(chatId);
  const live = turn ? turn.live.id : chat.activeMessageId;
  const shown = chat.messages.filter((message) => !(live && message.id === live));
  $("messages").replaceChildren(...shown.map(render));
  showChatUsage(chatId, chat);
  showGrants(chatId).catch(fail);
  refreshWorkspace(chatId).catch(fail);
  if (turn) {
    $("messages").append(turn.element);
  } else if (chat.activeMessageId) {
    follow(new Turn(chatId, chat.activeMessageId), () => state.api.joinTurn(chatId, ""));
  } else {
    say("");
  }
  updateControls();
  scrollToEnd();
}

function atEnd() {
  const messages = $("messages");
  return messages.scrollHeight - messages.scrollTop - messages.clientHeight < 48;
}

function scrollToEnd() {
  $("messages").scrollTop = $("messages").scrollHeight;
}

// -- live turns ----------------------------------------------------------------------------

/** One turn this tab follows: its fold, its element, the last frame id it saw. */
class Turn {
  constructor(chatId, assistantMessageId) {
    this.chatId = chatId;
    this.live = new LiveTurn(assistantMessageId);
    this.answered = new Set(); // permission requests this tab answered (their buttons stay disabled)
    this.element = this.render();
    this.cursor = ""; // the last frame's id (a session cursor): where a rejoin resumes
    this.stopping = false;
    this.timer = null;
  }

  fold(frame) {
    this.live.fold(frame);
    if (frame.id) this.cursor = frame.id;
    if (frame.type === "start") {
      announce("turn-started", this.chatId);
      refreshChats().catch(fail);
    }
    this.timer ??= setTimeout(() => this.draw(), 0); // one redraw per burst of frames
  }

  render() {
    const article = renderMessage(this.live.message(), {
      fileChip,
      answer: (requestId, reply) => this.answer(requestId, reply),
      answered: this.answered,
    });
    const notice = this.live.notice;
    if (notice && !this.live.ended) {
      const answered = notice.status == null ? "did not answer" : `answered ${notice.status}`;
      const note = document.createElement("p");
      note.className = "provider-notice";
      note.setAttribute("role", "alert");
      note.textContent = `The model provider ${answered}; the agent is retrying. (${notice.error})`;
      article.append(note);
    }
    return article;
  }

  /** Answer a permission request once; the outcome arrives on the stream. */
  async answer(requestId, reply) {
    if (this.answered.has(requestId)) return;
    this.answered.add(requestId);
    this.draw();
    try {
      await state.api.answerPermission(this.chatId, requestId, reply);
    } catch (error) {
      if (error instanceof ApiError && error.status === 409) return; // answered first elsewhere: its outcome comes
      this.answered.delete(requestId);
      this.draw();
      fail(error);
    }
  }

  /** Redraw the message, keeping which steps (and the reasoning) are open and where the focus is. */
  draw() {
    clearTimeout(this.timer);
    this.timer = null;
    const old = this.element;
    const open = new Set([...old.querySelectorAll(".step details[open]")].map((d) => d.closest(".step").dataset.stepId));
    const reasoningOpen = old.querySelector("details.reasoning")?.open;
    const focused = old.contains(document.activeElement) ? document.activeElement.closest(".step")?.dataset.stepId : null;
    const follow = atEnd(); // a reader who scrolled up is left where they are
    const fresh = this.render();
    for (const step of fresh.querySelectorAll(".step")) {
      if (open.has(step.dataset.stepId)) step.querySelector("details").open = true;
    }
    if (reasoningOpen) fresh.querySelector("details.reasoning").open = true;
    old.replaceWith(fresh);
    this.element = fresh;
    if (focused) fresh.querySelector(`.step[data-step-id="${CSS.escape(focused)}"] summary`)?.focus();
    if (state.chatId === this.chatId) {
      drawChatUsage();
      const steps = this.live.steps.size;
      const asking = [...this.live.permissions.values()].some((row) => row.status === "pending");
      say(this.live.ended ? "" : asking ? "Waiting for your answer…" : `Running… ${steps} step${steps === 1 ? "" : "s"}`);
      if (follow) scrollToEnd();
    }
  }
}

/**
 * Follow `turn` through the stream `open()` gives until its terminal. When the
 * connection drops, join the turn again after the last frame id seen; a join
 * answered 204 (nothing after that id is live) shows the turn as stored.
 */
async function follow(turn, open) {
  state.turns.set(turn.chatId, turn);
  if (state.chatId === turn.chatId) $("messages").append(turn.element);
  updateControls();
  try {
    let response = await open();
    while (response) {
      const before = turn.cursor;
      try {
        await readFrames(response, (frame) => turn.fold(frame));
      } catch (error) {
        if (!(error instanceof TypeError)) throw error; // TypeError: the connection dropped
      }
      if (turn.live.ended) break;
      if (turn.cursor === before) await sleep(POLL_MS); // no progress: do not spin
      response = await state.api.joinTurn(turn.chatId, turn.cursor);
    }
    turn.draw();
    if (!turn.live.ended) await showStored(turn); // 204: it settled before we joined
  } catch (error) {
    fail(error); // refused (409 busy, 422, 503: nothing of it was kept), or unreachable
    if (turn.live.id) await showStored(turn).catch(fail);
  } finally {
    if (state.turns.get(turn.chatId) === turn) state.turns.delete(turn.chatId);
    announce("turn-ended", turn.chatId);
    updateControls();
    await refreshChats().catch(fail);
    if (state.chatId === turn.chatId) {
      await refreshChatUsage(turn.chatId).catch(fail);
      await showGrants(turn.chatId).catch(fail);
      await refreshWorkspace(turn.chatId).catch(fail);
    }
  }
}

/** The chat's total again (a turn of it settled). */
async function refreshChatUsage(chatId) {
  const chat = await state.api.getChat(chatId);
  if (state.chatId === chatId) showChatUsage(chatId, chat);
}

/** Keep the chat's stored total (its settled turns: a running turn is added when it settles) and draw it. */
function showChatUsage(chatId, chat) {
  state.chatUsage = { chatId, usage: chat.usage || null };
  drawChatUsage();
}

/**
 * The tokens the chat's turns spent, above its messages: the stored total plus the
 * calls of the turn this tab follows in it so far, so it grows with each `usage`
 * frame; hidden before its first metered call.
 */
function drawChatUsage() {
  const stored = state.chatUsage?.chatId === state.chatId ? state.chatUsage.usage : null;
  const live = state.turns.get(state.chatId)?.live.usage;
  const usage = {};
  for (const key of ["inputTokens", "outputTokens", "cachedInputTokens", "cacheWriteTokens", "modelCalls"]) {
    usage[key] = (stored?.[key] ?? 0) + (live?.[key] ?? 0);
  }
  $("chat-usage").textContent = usage.modelCalls ? `This chat: ${describeUsage(usage)}` : "";
  $("chat-usage").hidden = !usage.modelCalls;
}

/** The chat's grants (its kept "always" answers), each with a Revoke button; hidden when none. */
async function showGrants(chatId) {
  const { grants } = await state.api.listGrants(chatId);
  if (state.chatId !== chatId) return;
  $("grant-list").replaceChildren(...grants.map((grant) => grantItem(chatId, grant)));
  $("grants").hidden = grants.length === 0;
}

function grantItem(chatId, grant) {
  const item = document.createElement("li");
  const title = document.createElement("span");
  title.className = "grant-title";
  title.textContent = grant.title;
  title.title = grant.kind;
  const revoke = document.createElement("button");
  revoke.type = "button";
  revoke.className = "quiet";
  revoke.textContent = "Revoke";
  revoke.setAttribute("aria-label", `Revoke: ${grant.title}`);
  revoke.addEventListener("click", async () => {
    revoke.disabled = true;
    try {
      await state.api.revokeGrant(chatId, grant.id);
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 404)) fail(error); // 404: revoked already
    }
    await showGrants(chatId).catch(fail);
  });
  item.append(title, " ", revoke);
  return item;
}

/**
 * Wait until the chat's turn has settled (its lock released; the message is stored
 * in the same transaction), then draw the stored message.
 */
async function showStored(turn) {
  if (state.chatId === turn.chatId) say("Waiting for the turn to be saved…");
  let chat = await state.api.getChat(turn.chatId);
  while (chat.activeMessageId) {
    await sleep(POLL_MS);
    chat = await state.api.getChat(turn.chatId);
  }
  const stored = chat.messages.find((message) => message.id === turn.live.id);
  if (stored) {
    const fresh = render(stored);
    turn.element.replaceWith(fresh);
    turn.element = fresh;
  }
  if (state.chatId === turn.chatId) say("");
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function announce(kind, chatId, message = null) {
  state.channel?.postMessage({ kind, chatId, message, workspaceId: state.api?.workspaceId });
}

state.channel?.addEventListener("message", async ({ data }) => {
  if (!state.api || data.workspaceId !== state.api.workspaceId) return;
  if (data.kind === "follow-up") {
    state.turns.get(data.chatId)?.element.before(render(data.message)); // where this tab shows it
    return;
  }
  await refreshChats().catch(fail);
  if (data.chatId === state.chatId && !state.turns.has(data.chatId)) await openChat(data.chatId);
});

// -- the composer ---------------------------------------------------------------------------

async function ensureChat(title) {
  if (state.chatId) return state.chatId;
  const clean = title.replace(/[\u0000-\u001f\u007f-\u009f]+/g, " ").trim().slice(0, 80);
  const chat = await state.api.createChat(clean);
  state.chatId = chat.id;
  history.replaceState(null, "", `#chat=${encodeURIComponent(chat.id)}`);
  return chat.id;
}

async function send() {
  const text = $("message").value;
  if (!text.trim()) return;
  if (state.pending.some((item) => !item.attachment)) {
    say("Waiting for the uploads to finish…");
    return;
  }
  $("alert").textContent = "";
  if (state.turns.has(state.chatId)) await followUp(text);
  else await startTurn(text);
}

async function startTurn(text) {
  let chatId;
  try {
    chatId = await ensureChat(text);
  } catch (error) {
    fail(error);
    return;
  }
  const attachments = state.pending.map((item) => item.attachment);
  const user = render({
    id: "",
    role: "user",
    content: [{ type: "text", text }],
    createdAt: Date.now(),
    fileAttachments: attachments,
  });
  $("messages").append(user);
  scrollToEnd();
  $("message").value = "";
  clearPending();
  const turn = new Turn(chatId, "");
  const frames = turn.fold.bind(turn);
  turn.fold = (frame) => {
    if (frame.type === "start") user.dataset.messageId = frame.data.userMessageId;
    frames(frame);
  };
  const open = async () => {
    try {
      return await state.api.startTurn({ chatId, message: text, attachmentIds: attachments.map((a) => a.id) });
    } catch (error) {
      user.remove(); // refused or unreachable: nothing of the turn was kept
      turn.element.remove();
      $("message").value = text;
      state.pending = attachments.map((attachment) => ({ attachment }));
      drawPending();
      throw error;
    }
  };
  await follow(turn, open);
}

/**
 * A message for the running turn's agent, shown (as stored) before the turn's
 * answer, where history puts it. A turn that ended meanwhile (409) gets the message
 * as a new turn.
 */
async function followUp(text) {
  const turn = state.turns.get(state.chatId);
  let answer;
  try {
    answer = await state.api.followUp(state.chatId, text);
  } catch (error) {
    if (error instanceof ApiError && error.status === 409) await startTurn(text);
    else fail(error);
    return;
  }
  turn.element.before(render(answer.message));
  announce("follow-up", turn.chatId, answer.message);
  $("message").value = "";
  scrollToEnd();
}

/** Interrupt the running turn; it ends on its stream, stored as interrupted. */
async function stop() {
  const turn = state.turns.get(state.chatId);
  if (!turn || turn.stopping) return;
  turn.stopping = true;
  say("Stopping…");
  try {
    await state.api.interrupt(turn.chatId); // answers once the turn is stored
  } catch (error) {
    turn.stopping = false;
    say("");
    if (!(error instanceof ApiError && error.status === 409)) fail(error); // 409: it had ended
  }
}

function updateControls() {
  const running = state.turns.has(state.chatId);
  $("stop").hidden = !running;
  $("send").textContent = running ? "Send follow-up" : "Send";
  $("thread").setAttribute("aria-busy", String(running));
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});

$("message").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  } else if (event.key === "Escape" && state.turns.has(state.chatId)) {
    event.preventDefault();
    stop();
  }
});

$("stop").addEventListener("click", stop);
$("attach").addEventListener("click", () => $("file-input").click());

$("file-input").addEventListener("change", async () => {
  const files = [...$("file-input").files];
  $("file-input").value = "";
  if (!files.length) return;
  const uploading = files.map((file) => ({ file }));
  state.pending.push(...uploading);
  drawPending();
  try {
    const chatId = await ensureChat($("message").value || files[0].name);
    const attachments = await state.api.upload(chatId, files);
    uploading.forEach((item, index) => (item.attachment = attachments[index]));
  } catch (error) {
    state.pending = state.pending.filter((item) => !uploading.includes(item));
    fail(error);
  }
  drawPending();
});

function clearPending() {
  state.pending = [];
  drawPending();
}

function drawPending() {
  $("pending-files").replaceChildren(
    ...state.pending.map((item) => {
      const chip = document.createElement("li");
      chip.className = item.attachment ? "chip pending" : "chip pending uploading";
      const name = document.createElement("span");
      name.className = "chip-name";
      name.textContent = item.attachment ? item.attachment.name : item.file.name;
      const size = document.createElement("span");
      size.className = "chip-size";
      size.textContent = item.attachment ? formatSize(item.attachment.size) : "uploading…";
      const remove = document.createElement("button");
      remove.type = "button";
      remove.className = "chip-remove";
      remove.textContent = "×";
      remove.setAttribute("aria-label", `Remove ${name.textContent}`);
      remove.addEventListener("click", () => {
        state.pending = state.pending.filter((other) => other !== item);
        drawPending();
        $("message").focus();
      });
      chip.append(name, size, remove);
      return chip;
    }),
  );
}

// -- routing -------------------------------------------------------------------------------

async function route() {
  const match = /^#chat=(.+)$/.exec(location.hash);
  if (match) await openChat(decodeURIComponent(match[1]));
  else openNewChat();
}

window.addEventListener("hashchange", () => {
  if (state.api) route().catch(fail);
});

const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) signIn(saved, sessionStorage.getItem(WORKSPACE_KEY) || "ws1").catch((error) => showSignIn(error.message));
else showSignIn();
