"""The chat backend's HTTP routes, a module per route group, and what they share.

- :mod:`.chat` — the Assistant API (turn, join, stop, follow-up, chats, files);
  :mod:`.ui_stream` — the same turn as the AI SDK's UI message stream;
  :mod:`.agents` — the Agents block and workflow environments;
  :mod:`.callbacks` — the sandbox callbacks (one-time tokens);
- :mod:`.guard` (the service and the API-token check), :mod:`.bodies` (request
  bodies), :mod:`.cors`, :mod:`.multipart` (uploads into the blob store),
  :mod:`.downloads` (a bag file's bytes).

A chat error a route lets out answers for itself (:mod:`..errors`).
"""

__all__: list[str] = []
