"""The sandbox-side program: one dispatch in, one NDJSON envelope stream out.

Run it as ``python -m sandstream.container`` (or ``sandstream container``) with the
dispatch JSON on stdin; see ``docs/container.md``. Entry point:
:func:`sandstream.container.cli.main`. The wire schemas (dispatch, ``/env``,
``/config``, ``/results``, skills manifest) are in :mod:`sandstream.core.schemas`.

This module imports nothing on purpose: the CLI installs its signal handlers before
the heavy imports (trio, httpx) happen.
"""

__all__: list[str] = []
