"""The core stands alone: importing it loads no async runtime or HTTP stack."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("trio", "quart", "quart_trio", "hypercorn", "httpx", "anyio", "asyncio", "threading")


def test_importing_the_core_loads_none_of_the_server_stack() -> None:
    code = (
        "import sys, sandstream.core, sandstream.core.persistence, "
        "sandstream.core.sse_parser, sandstream.core.translators.claude_code\n"
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
