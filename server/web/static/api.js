// The chat API as the app uses it: every URL in ROUTES, one request helper that
// adds the token and turns a problem-JSON answer into an ApiError, and the SSE
// reader for a turn's stream (fetch streaming + the event-stream parser).

import { SSEParser } from "./sse.js";

const enc = encodeURIComponent;

/** Every URL the app calls, in one place. */
export const ROUTES = {
  chats: () => "/api/assistant/chats",
  chat: (chatId) => `/api/assistant/chats/${enc(chatId)}`,
  files: (chatId) => `/api/assistant/chats/${enc(chatId)}/files`,
  file: (chatId, fileId) => `/api/assistant/chats/${enc(chatId)}/files/${enc(fileId)}`,
  // The chat's workspace: the work dir its latest turn left, and one of its files.
  workspace: (chatId) => `/api/assistant/chats/${enc(chatId)}/workspace`,
  workspaceFile: (chatId) => `/api/assistant/chats/${enc(chatId)}/workspace/file`,
  turn: () => "/api/assistant/chat/stream",
  // A running turn: join it (after a frame id), stop it, send its agent a message.
  join: (chatId) => `/api/assistant/chats/${enc(chatId)}/stream`,
  interrupt: (chatId) => `/api/assistant/chats/${enc(chatId)}/interrupt`,
  followUp: (chatId) => `/api/assistant/chats/${enc(chatId)}/messages`,
  permission: (chatId, requestId) => `/api/assistant/chats/${enc(chatId)}/permissions/${enc(requestId)}`,
  // The chat's grants: its kept "always" answers.
  grants: (chatId) => `/api/assistant/chats/${enc(chatId)}/grants`,
  grant: (chatId, grantId) => `/api/assistant/chats/${enc(chatId)}/grants/${enc(grantId)}`,
  // Push notifications (notify.js, sw.js).
  vapidPublicKey: () => "/api/assistant/push/vapid-public-key",
  pushSubscriptions: () => "/api/assistant/push/subscriptions",
  pushSubscription: (id) => `/api/assistant/push/subscriptions/${enc(id)}`,
};

/** A non-2xx answer: `status`, and the problem's `title`, `detail`, `type`. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export class Api {
  constructor(token, workspaceId) {
    this.token = token;
    this.workspaceId = workspaceId;
  }

  /** fetch() with the token and `workspaceId` in the query; throws ApiError unless 2xx. */
  async request(method, url, { json, body, query = {}, headers = {} } = {}) {
    const params = new URLSearchParams({ workspaceId: this.workspaceId, ...query });
    const init = { method, headers: { Authorization: `Bearer ${this.token}`, ...headers } };
    if (json !== undefined) {
      init.body = JSON.stringify(json);
      init.headers["Content-Type"] = "application/json";
    } else if (body !== undefined) {
      init.body = body;
    }
    const response = await fetch(`${url}?${params}`, init);
    if (!response.ok) throw new ApiError(response.status, await problemOf(response));
    return response;
  }

  async json(method, url, options) {
    const response = await this.request(method, url, options);
    return response.status === 204 ? null : response.json();
  }

  listChats() {
    return this.json("GET", ROUTES.chats(), { query: { limit: "100" } });
  }

  createChat(title) {
    const json = { workspaceId: this.workspaceId };
    if (title) json.title = title;
    return this.json("POST", ROUTES.chats(), { json });
  }

  getChat(chatId) {
    return this.json("GET", ROUTES.chat(chatId));
  }

  async upload(chatId, files) {
    const form = new FormData();
    for (const file of files) form.append("file", file, file.name);
    return (await this.json("POST", ROUTES.files(chatId), { body: form })).files;
  }

  async download(chatId, fileId) {
    return (await this.request("GET", ROUTES.file(chatId, fileId))).blob();
  }

  /** The chat's workspace: {snapshotId, createdAt, messageId, files} (snapshotId null: none yet). */
  getWorkspace(chatId) {
    return this.json("GET", ROUTES.workspace(chatId));
  }

  async downloadWorkspaceFile(chatId, path) {
    return (await this.request("GET", ROUTES.workspaceFile(chatId), { query: { path } })).blob();
  }

  /**
   * Start a turn: the streamed response (read it with readFrames). The turn runs on
   * whether or not this response is read to its end (`onDisconnect` "continue").
   */
  startTurn({ chatId, message, attachmentIds }) {
    const json = { workspaceId: this.workspaceId, message };
    if (chatId) json.chatId = chatId;
    if (attachmentIds && attachmentIds.length) json.attachmentIds = attachmentIds;
    return this.request("POST", ROUTES.turn(), { json, headers: { Accept: "text/event-stream" } });
  }

  /**
   * Join the chat's turn: with `cursor` (a frame id seen) the frames after it, else
   * the whole running turn from its start. The response, or null (204: nothing
   * after that id, or nothing running).
   */
  async joinTurn(chatId, cursor) {
    const query = cursor === "" ? {} : { cursor };
    const response = await this.request("GET", ROUTES.join(chatId), {
      query,
      headers: { Accept: "text/event-stream" },
    });
    return response.status === 204 ? null : response;
  }

  /** Stop the running turn → {chatId, message} once it is stored (409: none runs). */
  interrupt(chatId) {
    return this.json("POST", ROUTES.interrupt(chatId));
  }

  /**
   * Answer the running turn's permission request ("once", "always" or "reject"); the
   * outcome reaches every viewer on the stream. 409: answered before (first wins).
   */
  answerPermission(chatId, requestId, reply) {
    return this.json("POST", ROUTES.permission(chatId, requestId), { json: { reply } });
  }

  /** The chat's grants → {grants: [{id, kind, title, createdAt, messageId}]}. */
  listGrants(chatId) {
    return this.json("GET", ROUTES.grants(chatId));
  }

  /** Revoke one: the chat's next turns ask again (404: revoked already). */
  revokeGrant(chatId, grantId) {
    return this.json("DELETE", ROUTES.grant(chatId, grantId));
  }

  /** A message for the running turn's agent → {chatId, message} as stored (409: none runs). */
  followUp(chatId, message) {
    return this.json("POST", ROUTES.followUp(chatId), {
      json: { workspaceId: this.workspaceId, message },
    });
  }
}

async function problemOf(response) {
  const text = await response.text();
  try {
    const parsed = JSON.parse(text);
    if (parsed && typeof parsed === "object") return parsed;
  } catch {
    // not JSON: a proxy's page, say
  }
  return { title: `HTTP ${response.status}`, detail: text.slice(0, 200) || response.statusText };
}

/**
 * Read a turn's SSE response, calling onFrame({type, data, raw, id}) per event (data
 * is the parsed JSON, id the last event id so far); resolves when the body ends.
 * Rejects with a TypeError when the connection drops.
 */
export async function readFrames(response, onFrame) {
  const parser = new SSEParser();
  const reader = response.body.getReader();
  const dispatch = (events) => {
    for (const event of events) onFrame({ type: event.type, id: event.id, raw: event.data, data: JSON.parse(event.data) });
  };
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    dispatch(parser.feed(value));
  }
  dispatch(parser.close());
}
