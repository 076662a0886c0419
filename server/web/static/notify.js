// The "Notify me" toggle: subscribes this browser to push notifications for the
// workspace (server/web/static/sw.js shows them), or unsubscribes it.
//
// On: the service worker (/sw.js, scope /) is registered, notifications permitted,
// the browser subscribed with the server's VAPID public key, and the subscription
// registered with the server (POST …/push/subscriptions). Off: the server forgets it
// (DELETE …/push/subscriptions/{id}) and the browser unsubscribes. The button is
// hidden when the browser has no Push API or the server no VAPID key.

import { ROUTES } from "./api.js";

const SW_URL = "/sw.js";

function keyBytes(base64url) {
  const padded = base64url.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (base64url.length % 4)) % 4);
  return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
}

async function currentSubscription() {
  const registration = await navigator.serviceWorker.getRegistration("/");
  return registration ? registration.pushManager.getSubscription() : null;
}

async function subscribe(api) {
  if ((await Notification.requestPermission()) !== "granted") throw new Error("Notifications are blocked for this site.");
  const { publicKey } = await api.json("GET", ROUTES.vapidPublicKey());
  const registration = await navigator.serviceWorker.register(SW_URL, { scope: "/" });
  await navigator.serviceWorker.ready;
  const subscription = await registration.pushManager.subscribe({
    userVisibleOnly: true,
    applicationServerKey: keyBytes(publicKey),
  });
  await api.json("POST", ROUTES.pushSubscriptions(), {
    json: { workspaceId: api.workspaceId, webPush: subscription.toJSON() },
  });
}

async function unsubscribe(api, subscription) {
  const { subscriptions } = await api.json("GET", ROUTES.pushSubscriptions());
  const stored = subscriptions.find((s) => s.address === subscription.endpoint);
  if (stored) await api.json("DELETE", ROUTES.pushSubscription(stored.id));
  await subscription.unsubscribe();
}

/** Wire the toggle `button` to `api` (an Api); `fail` shows an error. */
export async function setUpNotifyToggle(button, api, fail) {
  if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) return;
  try {
    await api.json("GET", ROUTES.vapidPublicKey());
  } catch {
    return; // the server has no VAPID key: Web Push is off
  }
  const draw = async () => {
    const on = (await currentSubscription()) !== null;
    button.textContent = on ? "Notifications on" : "Notify me";
    button.setAttribute("aria-pressed", String(on));
  };
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const subscription = await currentSubscription();
      if (subscription) await unsubscribe(api, subscription);
      else await subscribe(api);
    } catch (error) {
      fail(error);
    } finally {
      button.disabled = false;
      await draw();
    }
  });
  await draw();
  button.hidden = false;
}
