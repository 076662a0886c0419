"""Workflow environments in the chat store: the ``workflow_environments`` table.

A workflow's named environment (its variables and setup script), which the runs of
that workflow are given; one row per workspace and workflow, replaced whole.
:class:`Environments` holds the :class:`~..contract.ChatStore` methods on it.
Cancellation: a call that started runs to completion in its worker thread
(:mod:`..database`).
"""

from __future__ import annotations

from typing import Final

import msgspec

from sandstream.server.chat.model import Environment

from ..database import Connection, Database

__all__ = ["Environments"]

_vars_decoder: Final = msgspec.json.Decoder(dict[str, str])


class Environments:
    """The :class:`~..contract.ChatStore` methods on workflow environments."""

    db: Database

    async def get_environment(self, workspace_id: str, workflow_id: str) -> Environment | None:
        def run(conn: Connection) -> Environment | None:
            row = conn.execute(
                "SELECT * FROM workflow_environments WHERE workspace_id = ? AND workflow_id = ?",
                (workspace_id, workflow_id),
            ).fetchone()
            if row is None:
                return None
            return Environment(
                workspace_id=workspace_id,
                workflow_id=workflow_id,
                vars=_vars_decoder.decode(row["vars"]),
                setup_script=row["setup_script"],
                updated_at=row["updated_at"],
            )

        return await self.db.read(run)

    async def put_environment(self, environment: Environment) -> None:
        def run(conn: Connection) -> None:
            conn.execute(
                "INSERT INTO workflow_environments "
                "(workspace_id, workflow_id, vars, setup_script, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (workspace_id, workflow_id) DO UPDATE SET "
                "vars = excluded.vars, setup_script = excluded.setup_script, "
                "updated_at = excluded.updated_at",
                (
                    environment.workspace_id,
                    environment.workflow_id,
                    msgspec.json.encode(environment.vars),
                    environment.setup_script,
                    environment.updated_at,
                ),
            )

        await self.db.write(run)
