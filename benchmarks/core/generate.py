"""A deterministic, realistic agent trace as NDJSON bytes, for the core benchmark.

The trace looks like what a sandbox emits during a long agent turn: about 85 % ``step``
lines (a ``running`` line, then a ``succeeded`` or ``failed`` line with the same
``id``, sometimes several steps in flight at once), about 15 % ``log`` lines, and
exactly one ``result`` line at the end. Step lines are 150-400 bytes, with nested
``args`` and ``result`` payloads (dicts, lists, strings, numbers, booleans, some
non-ASCII text); ``ts`` is Unix epoch milliseconds and never decreases; terminal step
lines carry ``durationMs``. The same ``lines`` and ``seed`` always give the same bytes.

Run ``.venv/bin/python -m benchmarks.core.generate --lines 200000`` to print the trace's mix.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = ["DEFAULT_LINES", "DEFAULT_SEED", "TraceStats", "generate_trace", "trace_stats"]

DEFAULT_LINES: Final = 200_000
DEFAULT_SEED: Final = 20_240_601

LOG_SHARE: Final = 0.15
STEP_MIN_BYTES: Final = 150
STEP_MAX_BYTES: Final = 400
_T0: Final = 1_700_000_000_000

_VOCABULARY: Final = (
    "the node graph workflow inference block output input schema value token model "
    "agent tool result file path config option table row column index cache request "
    "response stream chunk buffer retry timeout error warning update create delete "
    "list read write search match line offset limit status pending done running "
    "café naïve résumé déjà-vu Straße größe 東京 日本語 données → ✓ … — «ok»"
)
_WORDS: Final = tuple(_VOCABULARY.split())
_ASCII_WORDS: Final = tuple(w for w in _WORDS if w.isascii())
_FILES: Final = (
    "src/app.py",
    "src/workflows/graph.ts",
    "README.md",
    "docs/guide/intro.md",
    "data/customers.csv",
    "notes/résumé-été.md",
    "lib/assistant-sandbox/envelope.ts",
    "tests/test_api.py",
    "config/settings.yaml",
    "reports/2024/q3/東京-sales.json",
)
_NODE_TYPES: Final = ("inference", "http", "condition", "loop", "code", "memory", "router")
_LANGS: Final = ("en", "fr", "de", "ja", "es")
_ERRORS: Final = (
    "ENOENT: no such file or directory",
    "exit status 1: command failed",
    "HTTP 502 Bad Gateway from upstream",
    "timeout after 30000ms",
    "validation failed: field 'nodeType' is required",
    "permission denied: /workspace/.env",
    "rate limited (429), retry after 2s",
    "KeyError: 'résultat'",
)
_LOG_MESSAGES: Final = (
    "Loaded {n} skills",
    "model claude-sonnet-4 tokens in={n} out={m}",
    "tool call budget {n}/{m}",
    "retrying request ({n}/{m})",
    "cache hit for {w} ({n} bytes)",
    "context window {n} tokens, compacting",
    "MCP server {w} connected in {n}ms",
    "stderr: {w} {w2} …",
    "wrote {n} bytes to {f}",
    "slow tool: {w} took {n}ms",
)
_LEVELS: Final = (("info", 0.60), ("debug", 0.25), ("warn", 0.10), ("error", 0.05))
_FINAL_MESSAGE: Final = (
    "Added an Inference node wired to the HTTP block, updated the README and ran the "
    "tests: 42 passed. Résumé: 3 fichiers modifiés → prêt à déployer ✓"
)

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _text(rng: random.Random, words: int) -> str:
    """Words of filler; about one text in five has some non-ASCII characters."""
    pool = _WORDS if rng.random() < 0.2 else _ASCII_WORDS
    return " ".join(rng.choice(pool) for _ in range(words))


def _ident(rng: random.Random, prefix: str) -> str:
    return f"{prefix}_{rng.getrandbits(48):012x}"


Slot = tuple[dict[str, Any], str]
"""Where a filler string goes to bring a line to its target size: ``(dict, key)``."""


@dataclass
class _Step:
    id: str
    name: str
    args: dict[str, Any]
    args_slot: Slot
    result: dict[str, Any]
    result_slot: Slot
    started: int = 0


def _tool_call(rng: random.Random) -> _Step:
    """A random tool call with realistic nested ``args`` and ``result`` payloads."""
    step_id = _ident(rng, "step")
    kind = rng.randrange(8)
    if kind == 0:
        config = {"model": "gpt-4o-mini", "temperature": round(rng.random(), 2), "label": ""}
        args: dict[str, Any] = {
            "nodeType": rng.choice(_NODE_TYPES),
            "position": {"x": rng.randrange(1200), "y": rng.randrange(800)},
            "config": config,
        }
        result: dict[str, Any] = {"nodeId": _ident(rng, "node"), "ports": ["in", "out"]}
        result["summary"] = ""
        return _Step(
            step_id, "recipes/add-node.sh", args, (config, "label"), result, (result, "summary")
        )
    if kind == 1:
        args = {"path": rng.choice(_FILES), "range": [1, rng.randrange(20, 400)], "why": ""}
        result = {"content": "", "lines": rng.randrange(1, 900), "truncated": rng.random() < 0.2}
        return _Step(step_id, "files/read", args, (args, "why"), result, (result, "content"))
    if kind == 2:
        args = {"path": rng.choice(_FILES), "content": "", "mode": "overwrite"}
        result = {"bytesWritten": rng.randrange(100, 90_000), "created": rng.random() < 0.3}
        result["path"] = args["path"]
        return _Step(step_id, "files/write", args, (args, "content"), result, (result, "path"))
    if kind == 3:
        env = {"CI": "1", "PYTHONHASHSEED": "0", "NOTE": ""}
        args = {"command": ["bash", "-lc", "pytest -q tests/"], "cwd": "/workspace", "env": env}
        result = {"exitCode": rng.choice((0, 0, 0, 1)), "stdout": "", "elapsed": rng.random()}
        return _Step(step_id, "shell/exec", args, (env, "NOTE"), result, (result, "stdout"))
    if kind == 4:
        filters = {"lang": rng.choice(_LANGS), "limit": 5, "site": ""}
        args = {"query": _text(rng, 3), "filters": filters}
        hits = [
            {"title": _text(rng, 2), "score": round(rng.random(), 3)}
            for _ in range(rng.randrange(1, 3))
        ]
        result = {"hits": hits, "total": rng.randrange(1, 5000), "snippet": ""}
        return _Step(step_id, "web/search", args, (filters, "site"), result, (result, "snippet"))
    if kind == 5:
        args = {"pattern": rng.choice(("TODO", "def \\w+", "import .*", "ñ|é")), "glob": "*.py"}
        args["context"] = ""
        match = {"file": rng.choice(_FILES), "line": rng.randrange(1, 500), "text": ""}
        result = {"matches": [match], "count": 1}
        return _Step(step_id, "search/grep", args, (args, "context"), result, (match, "text"))
    if kind == 6:
        blocks = [{"id": _ident(rng, "blk"), "enabled": True, "name": ""} for _ in range(2)]
        args = {"workflowId": _ident(rng, "wf"), "blocks": blocks, "strict": False}
        result = {"ok": True, "warnings": [], "note": None, "detail": ""}
        return _Step(
            step_id, "workflow/validate", args, (blocks[0], "name"), result, (result, "detail")
        )
    args = {"owner": "acme", "repo": "sandstream", "title": "", "labels": ["bug", "p2"]}
    result = {"number": rng.randrange(1, 9999), "url": "https://github.com/acme/sandstream"}
    result["body"] = ""
    return _Step(
        step_id, "mcp/github.create_issue", args, (args, "title"), result, (result, "body")
    )


def _pad_to(rng: random.Random, obj: dict[str, Any], slot: Slot, target: int) -> bytes:
    """Encode ``obj``, appending filler to the string at ``slot`` to near ``target`` bytes."""
    holder, key = slot
    base: str = holder[key]

    def encode() -> bytes:
        return (_dumps(obj) + "\n").encode()

    line = encode()
    room = target - len(line)
    if room <= 0:
        return line
    filler = _text(rng, max(1, room // 5))
    if rng.random() < 0.3:
        filler = filler.replace(" ", "\n", 2)
    filler = filler[:room]
    holder[key] = base + filler
    line = encode()
    while len(line) > target and filler:
        filler = filler[: -max(1, (len(line) - target) // 3)]
        holder[key] = base + filler
        line = encode()
    return line


def generate_trace(lines: int = DEFAULT_LINES, seed: int = DEFAULT_SEED) -> bytes:
    """Return a trace of exactly ``lines`` NDJSON lines (each ending in ``\\n``)."""
    if lines < 1:
        raise ValueError("a trace has at least one line (the result)")
    rng = random.Random(seed)
    out: list[bytes] = []
    ts = _T0
    in_flight: list[_Step] = []
    budget = lines - 1  # the last line is the result

    def step_line(step: _Step, status: str, extra: dict[str, Any], target: int) -> bytes:
        obj: dict[str, Any] = {"type": "step", "id": step.id, "name": step.name}
        obj["status"] = status
        obj.update(extra)
        obj["ts"] = ts
        slot = step.args_slot if status == "running" else step.result_slot
        if status == "failed":
            slot = (obj, "error")
        return _pad_to(rng, obj, slot, target)

    while len(out) < budget:
        remaining = budget - len(out)
        roll = rng.random()
        ts += rng.randrange(1, 40)
        if remaining > len(in_flight) and (roll < LOG_SHARE or (not in_flight and remaining < 2)):
            level = rng.choices([lv for lv, _ in _LEVELS], [w for _, w in _LEVELS])[0]
            message = rng.choice(_LOG_MESSAGES).format(
                n=rng.randrange(1, 20_000),
                m=rng.randrange(1, 20_000),
                w=rng.choice(_WORDS),
                w2=rng.choice(_WORDS),
                f=rng.choice(_FILES),
            )
            obj = {"type": "log", "level": level, "message": message, "ts": ts}
            out.append((_dumps(obj) + "\n").encode())
            continue
        can_start = remaining >= len(in_flight) + 2 and len(in_flight) < 4
        # Mostly one step at a time; now and then the model issues parallel tool calls.
        start = can_start and (not in_flight or (len(in_flight) < 3 and rng.random() < 0.12))
        if start:
            step = _tool_call(rng)
            step.started = ts
            in_flight.append(step)
            target = rng.randrange(STEP_MIN_BYTES, 260)
            out.append(step_line(step, "running", {"args": step.args}, target))
            continue
        step = in_flight.pop(rng.randrange(len(in_flight)))
        target = rng.randrange(STEP_MIN_BYTES + 30, STEP_MAX_BYTES + 1)
        duration = ts - step.started
        if rng.random() < 0.08:
            error = f"{rng.choice(_ERRORS)}: "
            extra: dict[str, Any] = {"error": error, "durationMs": duration}
            line = step_line(step, "failed", extra, target)
        else:
            extra = {"result": step.result, "durationMs": duration}
            line = step_line(step, "succeeded", extra, target)
        out.append(line)
    assert not in_flight
    ts += rng.randrange(1, 40)
    out.append((_dumps({"type": "result", "message": _FINAL_MESSAGE, "ts": ts}) + "\n").encode())
    return b"".join(out)


@dataclass
class TraceStats:
    """The measured mix of a trace."""

    lines: int
    bytes: int
    mean_line_bytes: float
    by_type: dict[str, int]
    by_status: dict[str, int]
    share: dict[str, float]
    step_bytes_min: int
    step_bytes_max: int
    step_bytes_mean: float
    non_ascii_lines: int
    step_names: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        share = ", ".join(f"{k} {v:.1%}" for k, v in self.share.items())
        status = ", ".join(f"{k} {v}" for k, v in sorted(self.by_status.items()))
        return (
            f"{self.lines:,} lines, {self.bytes / 1e6:.1f} MB, mean {self.mean_line_bytes:.0f} B"
            f"/line; {share}; steps {status}; step lines {self.step_bytes_min}-"
            f"{self.step_bytes_max} B (mean {self.step_bytes_mean:.0f}); "
            f"{self.non_ascii_lines / self.lines:.1%} lines non-ASCII"
        )


def trace_stats(data: bytes) -> TraceStats:
    """Measure the type mix and line sizes of an NDJSON trace (line sizes include ``\\n``)."""
    by_type: Counter[str] = Counter()
    by_status: Counter[str] = Counter()
    names: Counter[str] = Counter()
    step_sizes: list[int] = []
    non_ascii = 0
    raw_lines = data.splitlines(keepends=True)
    for raw in raw_lines:
        obj = json.loads(raw)
        by_type[obj["type"]] += 1
        if not raw.isascii():
            non_ascii += 1
        if obj["type"] == "step":
            by_status[obj["status"]] += 1
            names[obj["name"]] += 1
            step_sizes.append(len(raw))
    n = len(raw_lines)
    return TraceStats(
        lines=n,
        bytes=len(data),
        mean_line_bytes=len(data) / n,
        by_type=dict(by_type),
        by_status=dict(by_status),
        share={k: v / n for k, v in sorted(by_type.items())},
        step_bytes_min=min(step_sizes, default=0),
        step_bytes_max=max(step_sizes, default=0),
        step_bytes_mean=sum(step_sizes) / len(step_sizes) if step_sizes else 0.0,
        non_ascii_lines=non_ascii,
        step_names=dict(names.most_common()),
    )


def main(argv: list[str] | None = None) -> None:
    """Print the mix of a generated trace; ``--out`` also writes it to a file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=DEFAULT_LINES)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, help="write the NDJSON trace here")
    parser.add_argument("--json", action="store_true", help="print the stats as JSON")
    args = parser.parse_args(argv)
    data = generate_trace(args.lines, args.seed)
    if args.out:
        args.out.write_bytes(data)
    stats = trace_stats(data)
    if args.json:
        json.dump(stats.to_dict(), sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        print(stats.summary())


if __name__ == "__main__":
    main()
