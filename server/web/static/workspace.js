// The Files panel: the chat's workspace, the work dir its latest turn left (GET
// …/workspace), each regular file a download button, each link shown with its
// target; "No files yet" while the chat has none. Paths are drawn as text nodes.

import { formatSize } from "./render.js";

function el(tag, className, ...children) {
  const node = document.createElement(tag);
  node.className = className;
  node.append(...children);
  return node;
}

/**
 * Draw `listing` ({files: [{path, type, size, target?}]}, or null for no chat) into
 * `list`, showing `empty` when it has no file; `download(file)` saves one.
 */
export function drawWorkspace(list, empty, listing, download) {
  const shown = (listing?.files || [])
    .filter((file) => file.type !== "dir")
    .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  list.replaceChildren(
    ...shown.map((file) => {
      const item = el("li", "workspace-entry");
      const path = el("span", "workspace-path", file.path);
      if (file.type === "symlink") {
        item.append(el("span", "workspace-link", path, el("span", "workspace-meta", `→ ${file.target}`)));
        return item;
      }
      const button = el("button", "workspace-file", path, el("span", "workspace-meta", formatSize(file.size)));
      button.type = "button";
      button.dataset.path = file.path;
      button.title = `Download ${file.path}`;
      button.addEventListener("click", () => download(file));
      item.append(button);
      return item;
    }),
  );
  empty.hidden = shown.length > 0;
}
