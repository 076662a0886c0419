"""The stream benchmark's results as one Markdown table: a row per figure, a column per
server, and sandstream ÷ reference when both ran (above 1: sandstream's figure is the
larger, which is better for rates and worse for latencies and memory; none for the
CPU rows, which say what limited a figure rather than being one). Results missing a
part leave its rows out; nothing here does I/O."""

from __future__ import annotations

from typing import Any

__all__ = ["render"]

Row = tuple[str, dict[str, float], str]
"""A figure's label, its value per server, and its format."""


def _rows(results: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    if "append" in results:
        append = results["append"]
        label = f"append {append['size']} B to {append['streams']} streams"
        for mode in ("plain", "producer"):
            by = append[mode]
            what = "" if mode == "plain" else ", producer headers"
            rows += [
                (f"{label}{what}: appends/s", _pick(by, "appends_per_s"), ",.0f"),
                (f"{label}{what}: MB/s", _pick(by, "mb_per_s"), ",.2f"),
                (f"  server CPU %{what}", _pick(by, "server_cpu_percent"), ".0f"),
                (f"  clients' CPU %{what}", _pick(by, "client_cpu_percent"), ".0f"),
            ]
    if "fanout" in results:
        for count, by in results["fanout"]["levels"].items():
            label = f"fan-out to {count} SSE subscriber{'s' if count != '1' else ''}"
            rows += [
                (f"{label}: p50 ms", _pick(by, "p50_ms"), ",.2f"),
                (f"{label}: p99 ms", _pick(by, "p99_ms"), ",.2f"),
                ("  appends/s the writer made", _pick(by, "appends_per_s"), ",.1f"),
                ("  server CPU %", _pick(by, "server_cpu_percent"), ".0f"),
                ("  subscribers' CPU %", _pick(by, "client_cpu_percent"), ".0f"),
            ]
    if "catchup" in results:
        catchup = results["catchup"]
        label = f"catch-up read of {catchup['bytes'] / 1e6:,.0f} MB"
        by = catchup["read"]
        rows += [
            (f"{label}: MB/s", _pick(by, "mb_per_s"), ",.1f"),
            ("  requests per read", _pick(by, "requests"), ",.0f"),
            ("  server CPU %", _pick(by, "server_cpu_percent"), ".0f"),
            ("  reader's CPU %", _pick(by, "client_cpu_percent"), ".0f"),
            (
                f"  its writing in {catchup['size'] // 1024} KiB appends: MB/s",
                catchup["write_mb_per_s"],
                ",.1f",
            ),
        ]
    if "memory" in results:
        by = results["memory"]
        count = next(iter(by.values()))["subscribers"]
        rows += [
            (f"memory per idle SSE subscriber ({count}): KiB", _pick(by, "kib_per_subscriber"),
             ",.1f"),
            ("  server RSS without them: MiB", _pick(by, "rss_mib"), ",.1f"),
        ]  # fmt: skip
    return rows


def _pick(by_server: dict[str, dict[str, float]], key: str) -> dict[str, float]:
    return {name: values[key] for name, values in by_server.items()}


def render(results: dict[str, Any], targets: list[str]) -> str:
    both = "reference" in targets and "sandstream" in targets
    header = ["measure", *targets] + (["sandstream ÷ reference"] if both else [])
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    for label, values, spec in _rows(results):
        cells = [label] + [format(values[name], spec) if name in values else "" for name in targets]
        if both:
            base = values.get("reference")
            ratio = values["sandstream"] / base if base and "CPU" not in label else None
            cells.append(f"{ratio:.2f}" if ratio is not None else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
