"""The fold of the ``live`` envelope extension: message parts and permission requests.

:class:`LiveFold` is what a :class:`~sandstream.core.turn.Turn` keeps of ``delta`` and
``permission`` lines (docs/protocol.md, "The live extension"). It never raises on
bad input: a ``permission`` line that breaks a rule is returned as a
:class:`~sandstream.core.turn.Diagnostic` and changes nothing. Memory is bounded:
delta text beyond ``max_text_chars`` and requests beyond ``max_permissions`` are
counted, not kept. Pure state; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from io import StringIO
from types import MappingProxyType
from typing import Final, Literal, TypeAlias

import msgspec

from .envelope import (
    Delta,
    DeltaKind,
    Permission,
    PermissionAnsweredBy,
    PermissionOption,
    PermissionReply,
    PermissionStatus,
)

__all__ = [
    "DEFAULT_MAX_PERMISSIONS",
    "DEFAULT_MAX_TEXT_CHARS",
    "LiveDiagnosticCode",
    "LiveFold",
    "MessagePart",
    "PermissionRow",
]

DEFAULT_MAX_TEXT_CHARS: Final = 4 * 1024 * 1024
"""Characters of delta text (text and reasoning together) a turn keeps; beyond them
the characters are counted only."""
DEFAULT_MAX_PERMISSIONS: Final = 1000
"""Permission requests a turn keeps; a ``pending`` line for one more is rejected."""

LiveDiagnosticCode: TypeAlias = Literal[
    "permission_invalid",
    "permission_unknown",
    "permission_pending",
    "permission_resolved",
    "permission_limit",
]
"""Why a ``permission`` line was rejected: its fields do not fit its status; it
resolves a request never asked; it asks again a request still pending; it follows
the request's resolution; it asks one request more than the turn keeps."""


class MessagePart:
    """A run of consecutive deltas of one message ``id`` and ``kind``: their text joined.

    A message's text and reasoning pieces that alternate make alternating parts, in
    the order they arrived (as the AI SDK builds a message's parts).
    """

    __slots__ = ("_buffer", "id", "kind")

    def __init__(self, message_id: str, kind: DeltaKind) -> None:
        self.id = message_id
        self.kind: DeltaKind = kind
        self._buffer = StringIO()  # appends in amortized O(len), whatever the piece count

    @property
    def text(self) -> str:
        return self._buffer.getvalue()

    def _append(self, text: str) -> None:
        self._buffer.write(text)

    def __repr__(self) -> str:
        return f"MessagePart({self.id!r}, {self.kind!r}, {self.text!r})"


class PermissionRow(msgspec.Struct, omit_defaults=True, gc=False):
    """One permission request, folded from its ``pending`` and ``resolved`` lines.

    ``options``, ``step``, ``title`` and ``tool_kind`` are the ``pending`` line's;
    ``reply`` and ``by`` the ``resolved`` line's (``None`` while pending).
    """

    id: str
    status: PermissionStatus
    options: list[PermissionOption]
    step: str | None = None
    title: str | None = None
    reply: PermissionReply | None = None
    first_ts: int | None = None
    last_ts: int | None = None
    tool_kind: str | None = None
    by: PermissionAnsweredBy | None = None


_Violation: TypeAlias = tuple[LiveDiagnosticCode, str]


class LiveFold:
    """Message parts in arrival order and permission requests by id, bounded."""

    __slots__ = (
        "_permissions",
        "_text_parts",
        "max_permissions",
        "max_text_chars",
        "omitted_text_chars",
        "parts",
        "text_chars",
    )

    def __init__(
        self,
        *,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
        max_permissions: int = DEFAULT_MAX_PERMISSIONS,
    ) -> None:
        if max_text_chars < 0 or max_permissions < 0:
            raise ValueError("max_text_chars and max_permissions must be >= 0")
        self.max_text_chars = max_text_chars
        self.max_permissions = max_permissions
        self.parts: list[MessagePart] = []
        """The message parts in arrival order (live objects)."""
        self.text_chars = 0
        """Characters of delta text kept in the parts."""
        self.omitted_text_chars = 0
        """Characters of delta text beyond ``max_text_chars``: counted, not kept."""
        self._permissions: dict[str, PermissionRow] = {}

    @property
    def permissions(self) -> Mapping[str, PermissionRow]:
        """The requests by id, in the order they were asked (a read-only view)."""
        return MappingProxyType(self._permissions)

    def text(self, kind: DeltaKind = "text") -> str:
        """The kept pieces of ``kind``, every message in order, concatenated."""
        return "".join([part.text for part in self.parts if part.kind == kind])

    def fold_delta(self, delta: Delta) -> None:
        """Append a delta to the last part, or a new one if its id or kind differ.
        Beyond ``max_text_chars`` the text is cut there and the rest counted."""
        text = delta.text
        room = self.max_text_chars - self.text_chars
        if len(text) > room:
            self.omitted_text_chars += len(text) - max(room, 0)
            if room <= 0:
                return
            text = text[:room]
        self.text_chars += len(text)
        parts = self.parts
        if not parts or parts[-1].id != delta.id or parts[-1].kind != delta.kind:
            parts.append(MessagePart(delta.id, delta.kind))
        parts[-1]._append(text)

    def fold_permission(self, line: Permission) -> _Violation | None:
        """Apply one ``permission`` line; return the violation instead if it breaks a
        rule (then nothing changes)."""
        row = self._permissions.get(line.id)
        if line.status == "pending":
            if not line.options or line.reply is not None or line.by is not None:
                return "permission_invalid", "a pending request needs options and no reply"
            if row is not None:
                if row.status == "resolved":
                    return "permission_resolved", f"request {line.id!r} is already resolved"
                return "permission_pending", f"request {line.id!r} is already pending"
            if len(self._permissions) >= self.max_permissions:
                return "permission_limit", f"more than {self.max_permissions} requests"
            self._permissions[line.id] = PermissionRow(
                line.id,
                "pending",
                line.options,
                line.step,
                line.title,
                None,
                line.ts,
                line.ts,
                line.tool_kind,
            )
            return None
        if line.reply is None or line.options is not None:
            return "permission_invalid", "a resolved request needs a reply and no options"
        if row is None:
            return "permission_unknown", f"request {line.id!r} was never pending"
        if row.status == "resolved":
            return "permission_resolved", f"request {line.id!r} is already resolved"
        row.status = "resolved"
        row.reply = line.reply
        row.by = line.by
        if line.ts is not None:
            if row.first_ts is None:
                row.first_ts = line.ts
            row.last_ts = line.ts
        return None
