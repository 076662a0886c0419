"""docs/configuration.md, rendered from the commands' own argparse parsers.

``render()`` walks the parsers of ``sandstream runner``, ``sandstream serve`` (both
built from their settings' declarations, :mod:`sandstream.server.settings_table`) and
``sandstream container`` (their action groups, in order) for every flag's value,
default and help; the environment variables that set a flag's default come from the
``$NAME`` its help names, the others from the tables below, which follow the code that
reads them. Regenerate the page after changing a flag::

    .venv/bin/python -m tests.docs.configuration > docs/configuration.md
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sandstream.container.cli import build_parser as build_container_parser
from sandstream.container.run import SKILLS_PATH_VAR
from sandstream.core.schemas import HEAP_TUNABLES
from sandstream.server.chat.credentials.api_token import API_TOKEN_ENV, API_TOKEN_FILE
from sandstream.server.chat.model.agent_profile import OPENAI_ENV_VARS
from sandstream.server.cli.runner import build_runner_parser
from sandstream.server.cli.serve import RUNNER_TOKEN_FILE, build_serve_parser
from sandstream.server.http.auth import TOKEN_ENV
from sandstream.server.http.malloc import MMAP_THRESHOLD, TRIM_THRESHOLD
from sandstream.server.runner.launcher import PASSED_ENV
from sandstream.server.runner.procs import TURN_MARKER_ENV

__all__ = ["COMMAND", "render"]

COMMAND: Final = ".venv/bin/python -m tests.docs.configuration > docs/configuration.md"
"""How to regenerate the page, from the checkout."""

RUNNER: Final = "sandstream runner"
SERVE: Final = "sandstream serve"
CONTAINER: Final = "sandstream container"
SERVERS: Final = (RUNNER, SERVE)


@dataclass(frozen=True)
class Variable:
    """Environment variables the ``commands`` read, and what they do there."""

    names: tuple[str, ...]
    commands: tuple[str, ...]
    meaning: str


_HEAP = ", ".join(f"`{value}`" for value in HEAP_TUNABLES.values())
_MIB = 1024 * 1024

# What a command reads besides its flags' defaults, as the code reads it.
SERVICE: Final = (
    Variable(
        (API_TOKEN_ENV,),
        (SERVE,),
        "the chat API token (`Authorization: Bearer`); set but blank: exit status 2. "
        f"Without it, the token saved in `<data dir>/{API_TOKEN_FILE}` (mode 0600), "
        "generated and printed on the first start",
    ),
    Variable(
        (TOKEN_ENV,),
        (SERVE,),
        "the runner token: guards the embedded runner (`POST /stream`, `/sessions`) and is "
        f"sent to remote runners. Without it, the token saved in `<data dir>/{RUNNER_TOKEN_FILE}`,"
        " generated on the first start",
    ),
    Variable(
        ("OPENAI_MODEL",),
        (SERVE,),
        "without `--agent-config`: the OpenAI-compatible agent, with this model; unset, "
        "the offline scripted demo agent",
    ),
    Variable(
        OPENAI_ENV_VARS,
        (SERVE,),
        "given to the sandbox through `/env` when the agent is the OpenAI one (from "
        "`OPENAI_MODEL`, or an `--agent-config` of kind `openai`); the base URL's "
        "default is `https://api.openai.com/v1`",
    ),
    Variable(
        ("SANDSTREAM_SYSTEM_PROMPT",),
        (SERVE,),
        "the system prompt of the built-in agents (not of an `--agent-config` file)",
    ),
    Variable(
        OPENAI_ENV_VARS,
        (CONTAINER,),
        "the `openai` agent's API base URL (default `https://api.openai.com/v1`), key, and "
        "model when `/config` names none; read with the `/env` vars applied",
    ),
    Variable(
        (SKILLS_PATH_VAR,),
        (CONTAINER,),
        "more skill folders, `:`-separated, relative to the work dir; read with the `/env` "
        "vars applied, after the setup script ran (docs/container.md, Skills)",
    ),
    Variable(
        tuple(HEAP_TUNABLES),
        (CONTAINER,),
        f"exactly {_HEAP} (the runner sets it where the host gives huge pages): removed "
        "from the container's environment, so its tools do not inherit it, and the "
        "container's heap is collapsed into huge pages",
    ),
)
PROCESS: Final = (
    Variable(
        ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"),
        SERVERS,
        "when one of the first two is set, or `GLIBC_TUNABLES` sets a "
        "`glibc.malloc.*_threshold`, glibc's malloc is left as configured; otherwise the "
        f"server sets its mmap threshold to {MMAP_THRESHOLD // _MIB} MiB and its trim "
        f"threshold to {TRIM_THRESHOLD // _MIB} MiB",
    ),
    Variable(
        PASSED_ENV,
        SERVERS,
        "`--sandbox local`: the only variables of the server's environment a container "
        "inherits (a bwrap sandbox gets none of them but `LANG`, default `C.UTF-8`)",
    ),
)
# What the commands set for the programs they start.
GIVEN: Final = (
    Variable(
        (TURN_MARKER_ENV,),
        SERVERS,
        "to each container: its turn's id, which marks every process of the turn (the "
        "runner finds and kills stragglers by it)",
    ),
    Variable(
        tuple(HEAP_TUNABLES),
        SERVERS,
        f"{_HEAP}, to a container whose `--container-cmd` runs `-m sandstream.container`, "
        "where the host's transparent huge pages are `madvise` or `always`",
    ),
    Variable(
        ("SANDSTREAM_WORK_DIR", "SANDSTREAM_OUTPUT_DIR", "SANDSTREAM_SKILL_DIR"),
        (CONTAINER,),
        "to each skill: the run's work dir, its `output/` folder (written back), the "
        "skill's own folder",
    ),
)

INTRO: Final = f"""\
# Configuration

Every flag of `{RUNNER}`, `{SERVE}` and
`{CONTAINER}`, and every environment variable they read. This page is
generated by `tests/docs/configuration.py` from the commands' own parsers, which the
server's commands build from each setting's one declaration
(`server/settings_table.py`); a test fails when it is out of date. After changing a
flag, regenerate it from the checkout:

```sh
{COMMAND}
```

A flag wins over its environment variable. A default of — means not set: the
description says what happens then. `<python>` is the interpreter the server runs on.
"""

PROSE: Final = {
    RUNNER: """\
Serves `POST /stream` (and, with `--data-dir`, the durable sessions at `/sessions`)
on Hypercorn's trio worker:

```sh
SANDSTREAM_RUNNER_TOKEN=... sandstream runner --host 0.0.0.0 --port 8765 --data-dir ./data
```

The token comes from `--token` or `$SANDSTREAM_RUNNER_TOKEN` (prefer the environment:
a flag is visible in `ps`); without one the runner refuses to start unless
`--insecure-no-token` is given.
""",
    SERVE: """\
The whole system in one process, on embedded defaults: one Quart-Trio app serves the
chat backend (`/api/assistant/…`, `/api/agents/run`, the sandbox callbacks) and the
runner (`POST /stream`), with SQLite and the chat bag in the data dir and turns run by
the in-process runner ([chat.md](chat.md)):

```sh
sandstream serve --host 127.0.0.1 --port 8080 --data-dir ./sandstream-data
```

The agent is the offline scripted demo with the bundled skills, the OpenAI-compatible
agent when `OPENAI_MODEL` is set, or the `ConfigResponse` of `--agent-config`. The
defaults below are those with none of the environment variables set.

With `--redis-url` several replicas keep the log mover's leases in Redis 6 or newer
([chat.md](chat.md#scale-out-with-redis)). The URL is
`redis://[[user]:password@]host[:port][/db]` (percent-encode `@`, `:` and `/` in a
password; a `user` is a Redis ACL user), or `rediss://` for TLS, with these query
parameters (coredis's names): `ssl_ca_certs` (the CA file, or directory, that verifies
the server; default: the system's), `ssl_certfile` and `ssl_keyfile` (a client
certificate and its key, both or neither), `ssl_cert_reqs` (`required`, the default,
`optional` or `none`) and `ssl_check_hostname` (`true`, the default, or `false`):

```sh
export SANDSTREAM_REDIS_URL='rediss://:pa%40ss@redis.internal:6380/0?ssl_ca_certs=/etc/redis/ca.pem'
sandstream serve --no-embedded-runner --sandbox-url http://runner:8001
```

Prefer `$SANDSTREAM_REDIS_URL` for a URL with a password (a flag is visible in `ps`).
A malformed URL, or TLS files that cannot be read, is exit status 2 with one line; a
Redis that cannot be reached, or refuses the password, is not (it is logged at each
sweep, and turns settle once it answers).
""",
    CONTAINER: """\
Runs one dispatch inside a sandbox and prints its NDJSON envelope
([container.md](container.md)); the runner starts it with `--container-cmd`.
""",
}

BOTH: Final = """\
## Both server commands

Each container runs in a bubblewrap sandbox (`--sandbox bwrap`, the default on Linux
when `bwrap` is installed, with the limits above per sandbox) or, for development
only, as a bare subprocess (`--sandbox local`, announced with a warning: it isolates
nothing).

SIGINT or SIGTERM ends live turns with `error{code:"shutdown"}` (`sandstream serve`
persists them), every container is reaped, then the process exits 0. A bad flag or
setting is one line on stderr and exit status 2; an address that cannot be bound (a
port already in use) is one line and exit status 1. `python -m sandstream.server.cli
runner|serve ...` runs them without the `sandstream` script.

The log goes to stderr in one format, the access log's record of each turn included:
JSON lines (`ts`, `level`, `logger`, `message` and the record's fields) unless stderr
is a terminal, then text; `--log-format json|text` chooses. `GET /metrics` serves
Prometheus metrics ([operations.md](operations.md)) behind the runner token (`sandstream
serve`: the chat API token or the runner token), or, with `--metrics-bind HOST:PORT`,
on that address alone without a token (the main port then answers 404 there).
"""


def render() -> str:
    """The whole of docs/configuration.md."""
    parsers = {
        RUNNER: build_runner_parser(environ={}),
        SERVE: build_serve_parser(environ={}),
        CONTAINER: build_container_parser(),
    }
    parts = [INTRO]
    for command, parser in parsers.items():
        parts.append(f"## `{command}`\n\n{PROSE[command]}")
        parts.extend(_flag_tables(parser))
        if command == SERVE:
            parts.append(BOTH)
    parts.append("## Environment variables\n")
    for command, parser in parsers.items():
        rows = [
            *_rows(SERVICE, command),
            *_flag_variables(parser),
            *_rows(PROCESS, command),
        ]
        parts.append(f"Read by `{command}`:\n\n{_table(('variable', 'what it does'), rows)}")
    for command in (RUNNER, CONTAINER):
        target = f"`{RUNNER}` and `{SERVE}` set" if command == RUNNER else f"`{command}` sets"
        given = _rows(GIVEN, command)
        parts.append(f"What {target}:\n\n{_table(('variable', 'what it is'), given)}")
    return "\n".join(parts)


def _flag_tables(parser: argparse.ArgumentParser) -> Iterator[str]:
    formatter = parser._get_formatter()
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if _documented(a)]
        if not actions:
            continue
        rows = [
            (_flag(a), _value(formatter, a), _default(a), _text(formatter._expand_help(a)))
            for a in actions
        ]
        header = ("flag", "value", "default", "description")
        yield f"**{group.title}**\n\n{_table(header, rows)}"


def _documented(action: argparse.Action) -> bool:
    return not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS


def _flag(action: argparse.Action) -> str:
    return ", ".join(f"`{option}`" for option in action.option_strings) or f"`{action.dest}`"


def _value(formatter: argparse.HelpFormatter, action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    metavar = formatter._get_default_metavar_for_optional(action)
    return f"`{formatter._format_args(action, metavar)}`"


def _default(action: argparse.Action) -> str:
    value: Any = action.default
    if action.nargs == 0:
        return "on" if value else "off"
    if value is None or value == []:
        return "—"
    if action.metavar == "SIZE" and isinstance(value, int):
        value = _size(value)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{_portable(str(value))}`"


def _size(value: int) -> str:
    """Bytes in the units ``--memory-limit`` takes (``2G``)."""
    for unit, factor in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)


def _portable(text: str) -> str:
    """``text`` without this machine's interpreter path (``--container-cmd``)."""
    return text.replace(shlex.quote(sys.executable), "<python>").replace(sys.executable, "<python>")


def _text(help_text: str) -> str:
    """Help for a table cell: the flags and variables it names as code."""
    text = _portable(help_text).replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return re.sub(r"(\$[A-Z][A-Z0-9_]*|--[a-z][a-z-]*)", r"`\1`", text)


def _rows(variables: tuple[Variable, ...], command: str) -> list[tuple[str, str]]:
    return [
        (", ".join(f"`{name}`" for name in variable.names), variable.meaning)
        for variable in variables
        if command in variable.commands
    ]


def _flag_variables(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """The variables a flag's help names: each sets that flag's default."""
    rows = []
    for action in parser._actions:
        for name in re.findall(r"\$([A-Z][A-Z0-9_]*)", action.help or ""):
            rows.append((f"`{name}`", f"the default of {_flag(action)}"))
    return rows


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = [_row(header), _row(tuple("---" for _ in header))]
    lines.extend(_row(row) for row in rows)
    return "\n".join(lines) + "\n"


def _row(cells: tuple[str, ...]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def variables_on_the_page() -> set[str]:
    """Every variable name the rendered page's environment tables list."""
    page = render()
    section = page[page.index("## Environment variables") :]
    return set(re.findall(r"`\$?([A-Z][A-Z0-9_]*)`", section))


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
