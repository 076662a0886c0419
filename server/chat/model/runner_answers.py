"""What a remote runner said when it did not answer as asked: :func:`answer_detail`.

Reads at most :data:`ERROR_BODY_LIMIT` bytes of the answer's body; a body that is not
problem JSON is quoted, clipped, as text. Cancellation: the read stops; nothing is held.
"""

from __future__ import annotations

from typing import Final

import httpx

from sandstream.core import JSONInputError, decode_json

__all__ = ["ERROR_BODY_LIMIT", "answer_detail"]

ERROR_BODY_LIMIT: Final = 16 * 1024
"""The most of an error answer's body that is read."""
_QUOTED: Final = 200
"""The most characters of a body that is not problem JSON that are quoted."""


async def answer_detail(response: httpx.Response) -> str:
    """The problem JSON's ``detail`` (else ``title``) of a streamed ``response``, the
    start of its body when it is not problem JSON, or ``""`` when there is none."""
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= ERROR_BODY_LIMIT:
            break
    body = body[:ERROR_BODY_LIMIT]
    try:
        problem = decode_json(body)
    except JSONInputError:
        return body[:_QUOTED].decode("utf-8", "replace")
    if isinstance(problem, dict):
        return str(problem.get("detail") or problem.get("title") or "")
    return ""
