// An incremental text/event-stream parser (the WHATWG event-stream format), for
// reading a fetch() response body chunk by chunk: bytes in, events out.
//
//   const parser = new SSEParser();
//   for (const event of parser.feed(chunk)) handle(event);   // {type, data, id}
//   parser.lastEventId                                       // for a resume
//
// CR, LF and CRLF end lines, also when a CRLF is split across chunks; a UTF-8
// sequence split across chunks is decoded once whole; comments (": ping") are
// skipped; an event is dispatched at a blank line only if a data: line came.

export class SSEParser {
  constructor() {
    this.decoder = new TextDecoder("utf-8");
    this.buffer = "";
    this.skipLF = false;
    this.type = "";
    this.data = [];
    this.lastEventId = "";
  }

  /** Feed one chunk (Uint8Array); returns the events it completed. */
  feed(chunk) {
    return this.lines(this.decoder.decode(chunk, { stream: true }));
  }

  /** The end of the stream: an unfinished event is dropped (as EventSource does). */
  close() {
    const tail = this.lines(this.decoder.decode());
    this.buffer = "";
    this.type = "";
    this.data = [];
    return tail;
  }

  lines(text) {
    const events = [];
    let start = 0;
    if (this.skipLF && text.startsWith("\n")) start = 1;
    this.skipLF = false;
    for (let i = start; i < text.length; i++) {
      const ch = text[i];
      if (ch !== "\n" && ch !== "\r") continue;
      const line = this.buffer + text.slice(start, i);
      this.buffer = "";
      if (ch === "\r") {
        if (i + 1 < text.length) {
          if (text[i + 1] === "\n") i++;
        } else {
          this.skipLF = true;
        }
      }
      start = i + 1;
      const event = this.line(line);
      if (event) events.push(event);
    }
    this.buffer += text.slice(start);
    return events;
  }

  line(line) {
    if (line === "") {
      if (this.data.length === 0) {
        this.type = "";
        return null;
      }
      const event = { type: this.type || "message", data: this.data.join("\n"), id: this.lastEventId };
      this.type = "";
      this.data = [];
      return event;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.type = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.lastEventId = value;
    return null;
  }
}
