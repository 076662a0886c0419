"""Fixtures for the container tests: a model server and test skills.

The workspace fixture is in tests/conftest.py.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import trio

from benchmarks.support.model_server import ModelServer, start_model_server


@pytest.fixture
async def model(nursery: trio.Nursery) -> ModelServer:
    """A scriptable OpenAI-compatible model server."""
    return await start_model_server(nursery)


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    """The run's work dir (passed as --work-dir so tests can look inside)."""
    path = tmp_path / "work"
    path.mkdir()
    return path


_TEST_SKILLS = {
    "echo": (
        "Answer the args back.",
        "import json, sys\nprint(json.dumps({'echo': json.load(sys.stdin)}))\n",
        60,
    ),
    "fail": (
        "Fail with a message on stderr.",
        "import sys\nsys.stdin.read()\nprint('partial', flush=True)\n"
        "sys.stderr.write('disk quota exceeded on /work\\n')\nsys.exit(3)\n",
        60,
    ),
    "hang": (
        "Never finish (writes its pid and a grandchild's pid first).",
        textwrap.dedent(
            """\
            import os, subprocess, sys, time
            sys.stdin.read()
            child = subprocess.Popen(["sleep", "300"])
            with open("hang.pids", "w") as f:
                f.write(f"{os.getpid()} {child.pid}")
            time.sleep(300)
            """
        ),
        1.0,
    ),
    "stubborn": (
        "Ignore SIGTERM and never finish (writes its pid first).",
        textwrap.dedent(
            """\
            import os, signal, sys, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            sys.stdin.read()
            with open("stubborn.pid", "w") as f:
                f.write(str(os.getpid()))
            time.sleep(300)
            """
        ),
        600,
    ),
    "garbage": (
        "Print something that is not JSON.",
        "import sys\nsys.stdin.read()\nprint('<html>oops</html>')\n",
        60,
    ),
    "silent": ("Print nothing.", "import sys\nsys.stdin.read()\n", 60),
    "deep": (
        "Print JSON nested 100,000 levels deep (well under the output bound).",
        "import sys\nsys.stdin.read()\nsys.stdout.write('[' * 100000 + ']' * 100000)\n",
        60,
    ),
    "latin1": (
        "Print a JSON string in Latin-1, not UTF-8.",
        'import sys\nsys.stdin.read()\nsys.stdout.buffer.write(b\'{"city": "S\\xe3o Paulo"}\')\n',
        60,
    ),
    "flood": (
        "Print more than the output bound.",
        "import sys\nsys.stdin.read()\nsys.stdout.write('[' + '1,' * 700000 + '1]')\n",
        60,
    ),
}


@pytest.fixture(scope="session")
def test_skills(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A skills folder of misbehaving skills (echo, fail, hang, garbage, deep, latin1, …)."""
    folder = tmp_path_factory.mktemp("skills")
    skills = []
    for name, (description, source, timeout) in _TEST_SKILLS.items():
        (folder / f"{name}.py").write_text(source)
        skills.append(
            {
                "name": name,
                "description": description,
                "run": f"{name}.py",
                "timeout_sec": timeout,
                "parameters": {"type": "object"},
            }
        )
    (folder / "manifest.json").write_text(json.dumps({"skills": skills}))
    return folder
