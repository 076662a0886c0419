"""Gemini CLI's saved session files get names it never makes: every file it made is
renamed once, keeps its bytes and its short id, never replaces another; anything else in
its chats folders is left as it is."""

from __future__ import annotations

import os
import re
import string
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sandstream.container.agents.acp.gemini_sessions import unpin_sessions

MINUTE = "2026-12-02T05-51"
MADE = re.compile(r"session-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-[0-9A-Za-z_-]{8}\.jsonl")


def _chats(home: Path, project: str = "work") -> Path:
    chats = home / ".gemini" / "tmp" / project / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    return chats


def test_a_made_session_file_is_renamed_with_its_bytes_and_short_id(tmp_path: Path) -> None:
    chats = _chats(tmp_path)
    (chats / f"session-{MINUTE}-4b362968.jsonl").write_bytes(b'{"sessionId":"4b362968-x"}\n')
    assert unpin_sessions(tmp_path) == [chats / f"session-{MINUTE}-kept-4b362968.jsonl"]
    assert os.listdir(chats) == [f"session-{MINUTE}-kept-4b362968.jsonl"]
    kept = chats / f"session-{MINUTE}-kept-4b362968.jsonl"
    assert kept.read_bytes() == b'{"sessionId":"4b362968-x"}\n'
    assert unpin_sessions(tmp_path) == []  # a kept name is never renamed again


def test_a_taken_kept_name_is_never_replaced(tmp_path: Path) -> None:
    chats = _chats(tmp_path)
    (chats / f"session-{MINUTE}-kept-4b362968.jsonl").write_text("the conversation\n")
    (chats / f"session-{MINUTE}-kept2-4b362968.jsonl").write_text("an earlier load\n")
    (chats / f"session-{MINUTE}-4b362968.jsonl").write_text("a later load\n")
    assert unpin_sessions(tmp_path) == [chats / f"session-{MINUTE}-kept3-4b362968.jsonl"]
    assert {p.name: p.read_text() for p in chats.iterdir()} == {
        f"session-{MINUTE}-kept-4b362968.jsonl": "the conversation\n",
        f"session-{MINUTE}-kept2-4b362968.jsonl": "an earlier load\n",
        f"session-{MINUTE}-kept3-4b362968.jsonl": "a later load\n",
    }


def test_only_regular_files_of_gemini_s_own_form_are_touched(tmp_path: Path) -> None:
    chats = _chats(tmp_path, "other-project")
    left = {
        "session-2026-12-02T05-51-4b362968.json": "an old form",
        "session-2026-12-02T05-51-4b36.jsonl": "a short id",
        "notes.jsonl": "not a session",
        f"session-{MINUTE}-4b362968.jsonl.tmp-7": "a temp file",
    }
    for name, text in left.items():
        (chats / name).write_text(text)
    (chats / f"session-{MINUTE}-0000aaaa.jsonl").symlink_to("notes.jsonl")
    (chats / f"session-{MINUTE}-1111bbbb.jsonl").mkdir()
    (chats / "4b362968-subagents").mkdir()
    assert unpin_sessions(tmp_path) == []
    assert (chats / f"session-{MINUTE}-0000aaaa.jsonl").is_symlink()
    assert (chats / f"session-{MINUTE}-1111bbbb.jsonl").is_dir()
    assert {name: (chats / name).read_text() for name in left} == left


def test_a_home_without_gemini_s_folders_is_no_error(tmp_path: Path) -> None:
    assert unpin_sessions(tmp_path / "no-home") == []
    (tmp_path / ".gemini" / "tmp" / "work").mkdir(parents=True)
    (tmp_path / ".gemini" / "tmp" / "work" / "chats").write_text("not a folder")
    assert unpin_sessions(tmp_path) == []


_IDS = st.text(string.hexdigits.lower()[:16], min_size=8, max_size=8)


@given(st.lists(st.tuples(st.sampled_from(["05-50", "05-51"]), _IDS), max_size=12))
def test_every_file_survives_under_a_name_gemini_never_makes(
    made: list[tuple[str, str]],
) -> None:
    """Whatever files Gemini CLI made (some names over again, as a later turn's load
    does), after any number of renames every one is still there, once, with its short
    id at the end, and none has a name of Gemini CLI's form."""
    with tempfile.TemporaryDirectory() as home_name:
        home = Path(home_name)
        chats = _chats(home)
        written: list[tuple[str, bytes]] = []
        for number, (minute, short_id) in enumerate(made):
            body = f"file {number}\n".encode()
            (chats / f"session-2026-12-02T{minute}-{short_id}.jsonl").write_bytes(body)
            written.append((short_id, body))
            unpin_sessions(home)  # each turn's start
        found = sorted((p.name.rsplit("-", 1)[1], p.read_bytes()) for p in chats.iterdir())
        assert found == sorted((short_id + ".jsonl", body) for short_id, body in written)
        assert not any(MADE.fullmatch(p.name) for p in chats.iterdir())
