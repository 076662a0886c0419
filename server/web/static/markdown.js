// A small, safe Markdown renderer: text in, DOM nodes out.
//
// It never parses HTML: every piece of the source ends up in a text node, so a
// message holding <script> or <img onerror> shows those characters. Links keep
// only http:, https: and mailto: targets (anything else stays text) and open in a
// new tab without a referrer. Supported: paragraphs, ATX headings, fenced code
// blocks, block quotes, flat bullet and numbered lists, thematic breaks, and
// inline code, **strong**, *emphasis* / _emphasis_, [links](url), hard line breaks
// (two spaces or a backslash at the end of a line).

const SAFE_SCHEMES = ["http:", "https:", "mailto:"];

/** A DocumentFragment rendering `source`. */
export function renderMarkdown(source) {
  const fragment = document.createDocumentFragment();
  renderBlocks(source.replace(/\r\n?/g, "\n").split("\n"), fragment);
  return fragment;
}

function el(tag, ...children) {
  const node = document.createElement(tag);
  node.append(...children);
  return node;
}

const FENCE = /^ {0,3}(`{3,}(?!.*`)|~{3,})\s*(.*?)\s*$/; // a backtick fence's info has no backtick
const CLOSING_FENCE = /^ {0,3}(`{3,}|~{3,})\s*$/;

// A line closes a fence when it is the same character, at least as many, and nothing
// after it: "```<script>" is a line of the code, not its end (its text stays text).
function closesFence(line, fence) {
  const match = CLOSING_FENCE.exec(line);
  return match !== null && match[1][0] === fence[0] && match[1].length >= fence.length;
}

const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const BULLET = /^ {0,3}[-*+]\s+(.*)$/;
const NUMBERED = /^ {0,3}(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;

function renderBlocks(lines, parent) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let match;
    if (!line.trim()) {
      i++;
    } else if ((match = FENCE.exec(line))) {
      const fence = match[1];
      const body = [];
      for (i++; i < lines.length && !closesFence(lines[i], fence); i++) body.push(lines[i]);
      i++; // the closing fence (or the end)
      const code = el("code", body.join("\n"));
      if (match[2]) code.dataset.lang = match[2]; // the info string: kept, not shown
      parent.append(el("pre", code));
    } else if ((match = HEADING.exec(line))) {
      parent.append(inline(el(`h${match[1].length}`), match[2]));
      i++;
    } else if (RULE.test(line)) {
      parent.append(el("hr"));
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      for (; i < lines.length && (match = QUOTE.exec(lines[i])); i++) body.push(match[1]);
      const quote = el("blockquote");
      renderBlocks(body, quote);
      parent.append(quote);
    } else if (BULLET.test(line) || NUMBERED.test(line)) {
      const numbered = !BULLET.test(line);
      const pattern = numbered ? NUMBERED : BULLET;
      const list = el(numbered ? "ol" : "ul");
      if (numbered) {
        const first = Number(NUMBERED.exec(line)[1]);
        if (first !== 1) list.start = first;
      }
      const items = [];
      for (; i < lines.length; i++) {
        const current = lines[i];
        if ((match = pattern.exec(current))) items.push([match[numbered ? 2 : 1]]);
        else if (current.trim() && /^\s+/.test(current) && items.length) items.at(-1).push(current.trim());
        else break; // a continuation line (indented) stays in its item; anything else ends the list
      }
      for (const item of items) list.append(inline(el("li"), item.join("\n")));
      parent.append(list);
    } else {
      const body = [];
      for (; i < lines.length && lines[i].trim() && !startsBlock(lines[i]); i++) body.push(lines[i]);
      parent.append(inline(el("p"), body.join("\n")));
    }
  }
}

function startsBlock(line) {
  return [FENCE, HEADING, RULE, QUOTE, BULLET, NUMBERED].some((pattern) => pattern.test(line));
}

// Inline spans, first match wins at each position: code, link, strong, emphasis, break.
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\[([^\]\n]+)\]\(([^)\s]+)\)|\*\*([\s\S]+?)\*\*|__([\s\S]+?)__|\*([^*\s][\s\S]*?)\*|\b_([^_\s][\s\S]*?)_\b|( {2,}|\\)\n/g;

/** Append the inline content of `text` to `node`; returns `node`. */
function inline(node, text) {
  let last = 0;
  for (const match of text.matchAll(INLINE)) { // matchAll works on a copy: safe to recurse
    node.append(text.slice(last, match.index));
    last = match.index + match[0].length;
    const [, ticks, code, label, href, strong1, strong2, em1, em2, br] = match;
    if (ticks) node.append(el("code", code.replace(/^ (.*) $/s, "$1")));
    else if (label) node.append(link(label, href));
    else if (strong1 || strong2) node.append(inline(el("strong"), strong1 || strong2));
    else if (em1 || em2) node.append(inline(el("em"), em1 || em2));
    else if (br) node.append(el("br"));
  }
  node.append(text.slice(last));
  return node;
}

function link(label, href) {
  let url;
  try {
    url = new URL(href);
  } catch {
    url = null;
  }
  if (!url || !SAFE_SCHEMES.includes(url.protocol)) return `[${label}](${href})`;
  const anchor = inline(el("a"), label);
  anchor.href = url.href;
  anchor.target = "_blank";
  anchor.rel = "noopener noreferrer";
  anchor.referrerPolicy = "no-referrer";
  return anchor;
}
