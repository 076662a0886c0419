// The web app's service worker: push notifications.
//
// A push message is the JSON the server's push outbox sends (server/chat/push):
// {title, body, tag, silent, data: {kind, pushId, chatId, workspaceId, subscriptionId,
// ackToken}}. An alert is shown with `tag` = its collapse key, so a newer alert of the
// same chat replaces the older one; a silent push (a dismiss: another device opened
// that alert) closes the notifications of its tag. A click opens the chat (focusing a
// window of the app if one is open) and acks the alert as opened, with the ack token
// it carries (this worker has no API token), so the other devices are told to dismiss
// it. A message that is not JSON is ignored. Push messages are handled one at a time,
// in the order they came: Chromium forgets a notification being shown while
// getNotifications runs, so a dismiss must not look while an alert is being shown.

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("push", (event) => {
  let message = null;
  try {
    message = event.data ? event.data.json() : null;
  } catch {
    return;
  }
  if (message && typeof message === "object") event.waitUntil(inOrder(() => handle(message)));
});

let handling = Promise.resolve();

function inOrder(task) {
  const run = handling.then(task);
  handling = run.catch(() => {});
  return run;
}

async function handle(message) {
  const tag = typeof message.tag === "string" ? message.tag : undefined;
  if (message.silent) {
    if (tag === undefined) return;
    for (const shown of await self.registration.getNotifications({ tag })) shown.close();
    return;
  }
  await self.registration.showNotification(String(message.title || "sandstream"), {
    body: String(message.body || ""),
    tag,
    data: message.data || {},
  });
}

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const data = event.notification.data || {};
  event.waitUntil(Promise.all([openChat(data.chatId), ack(data)]));
});

async function openChat(chatId) {
  const url = chatId ? `/#chat=${encodeURIComponent(chatId)}` : "/";
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const client of windows) {
    if (new URL(client.url).origin === self.location.origin && "navigate" in client) {
      await client.focus();
      return client.navigate(url);
    }
  }
  return self.clients.openWindow(url);
}

async function ack(data) {
  if (!data.pushId || !data.ackToken) return;
  await fetch("/api/assistant/push/ack", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({
      workspaceId: data.workspaceId,
      chatId: data.chatId,
      pushId: data.pushId,
      subscriptionId: data.subscriptionId,
      opened: true,
      token: data.ackToken,
    }),
  });
}
