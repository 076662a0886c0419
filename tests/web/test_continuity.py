"""A chat going on across sandboxes as the web app shows it, in real Chromium: the Files
panel lists the workspace a turn left (its work dir, saved by a real container after the
turn) and downloads its files; the ``agent_session`` step says whether an acp agent
went on with its own session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.sync_api import BrowserContext

from tests.chat.harness import WORKSPACE
from tests.web.harness import PLAN, WAIT_MS, ServerThread, assistant, chat_id, send, signed_in

EMPTY = "#workspace-empty"
ENTRY = "#workspace-files .workspace-file"

NOTES = """async (messages) => {
  const { renderMessage } = await import("/web/render.js");
  return messages.map((message) => {
    const note = renderMessage(message, { fileChip: () => null }).querySelector(".step-note");
    return note ? note.textContent : null;
  });
}"""


def test_the_files_panel_shows_the_work_dir_a_turn_left(
    context: BrowserContext, server: ServerThread, tmp_path: Path
) -> None:
    page = signed_in(context, server)
    assert page.inner_text(EMPTY) == "No files yet"
    send(page, "keep a plan")
    assistant(page, "complete")

    entry = page.locator(f'{ENTRY}[data-path="src/plan.md"]')
    entry.wait_for()
    assert page.locator(EMPTY).is_hidden()
    assert page.locator(f"{ENTRY} .workspace-path").all_inner_texts() == ["src/plan.md"]
    assert entry.locator(".workspace-meta").inner_text() == f"{len(PLAN.encode())} B"
    with page.expect_download() as download:
        entry.click()
    assert download.value.suggested_filename == "plan.md"
    saved = tmp_path / "plan.md"
    download.value.save_as(saved)
    assert saved.read_text() == PLAN

    # What the panel showed is the chat's workspace as the API lists it.
    with server.api() as client:
        listing = client.get(
            f"/api/assistant/chats/{chat_id(page)}/workspace",
            params={"workspaceId": WORKSPACE},
        ).json()
    assert [f["path"] for f in listing["files"] if f["type"] == "file"] == ["src/plan.md"]
    # Reopened, the chat shows it again; a new chat has none.
    page.reload()
    page.locator(f'{ENTRY}[data-path="src/plan.md"]').wait_for()
    page.click("#new-chat")
    page.wait_for_selector(f"{EMPTY}:visible")
    assert page.locator(ENTRY).count() == 0


def _session_step(status: str, ways: list[str], result: dict[str, Any] | None) -> dict[str, Any]:
    """A stored assistant message whose one step is an ``agent_session``."""
    step = {"id": "step_1", "name": "agent_session", "status": status, "args": {"ways": ways}}
    content: list[dict[str, Any]] = [{"type": "steps", "steps": [step]}]
    if result is not None:
        content.append(
            {"type": "tool_output", "stepId": "step_1", "name": "agent_session", "output": result}
        )
    return {"id": "msg_1", "role": "assistant", "content": content, "createdAt": 0}


def test_the_agent_session_step_says_whether_the_agent_went_on(
    context: BrowserContext, server: ServerThread
) -> None:
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(server.url + "/")
    both = ["session/resume", "session/load", "session/new"]
    messages = [
        _session_step("succeeded", both, {"way": "session/resume", "continued": True}),
        _session_step(
            "succeeded", ["session/load", "session/new"], {"way": "session/load", "continued": True}
        ),
        _session_step("succeeded", ["session/new"], {"way": "session/new", "continued": False}),
        _session_step("succeeded", both, {"way": "session/new", "continued": False}),
        _session_step("running", both, None),
        _session_step("failed", both, None),
    ]
    assert page.evaluate(NOTES, messages) == [
        "Continued its session (session/resume)",
        "Continued its session (session/load)",
        "New session",
        "New session (session/resume, session/load did not work)",
        "Opening its session…",
        None,
    ]
