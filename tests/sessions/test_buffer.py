"""The SQLite buffer: any split into appends reads back as the same chunks, by cursor."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from sandstream.server.sessions.buffer import SessionBuffer

runs = st.lists(
    st.lists(
        st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"") + b"\n"), min_size=1, max_size=6
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40)
@given(runs, st.data())
async def test_reads_after_any_cursor_return_exactly_the_chunks_after_it(
    appends: list[list[bytes]], data: st.DataObject
) -> None:
    everything = [chunk for run in appends for chunk in run]
    with tempfile.TemporaryDirectory() as name:
        buffer = await SessionBuffer.open(Path(name))
        try:
            key = await buffer.create("ses_a", 0)
            other = await buffer.create("ses_b", 0)
            last = 0
            for run in appends:
                assert await buffer.append(key, last, b"".join(run), len(run), 0, 1) == 1
                await buffer.append(other, last, b"x\n" * len(run), len(run), 0, 1)
                last += len(run)
            after = data.draw(st.integers(0, last))
            upto = data.draw(st.integers(after, last))
            budget = data.draw(st.integers(1, 200))
            got: list[bytes] = []
            cursor = after
            while cursor < upto:
                batch = await buffer.read(key, cursor, upto, budget)
                assert batch, "a read with chunks left returns at least one"
                assert len(b"".join(batch)) <= budget or len(batch) == 1
                got += batch
                cursor += len(batch)
            assert got == everything[after:upto]
            # retention drops whole runs below the cursor asked to be kept
            keep_from = data.draw(st.integers(1, last))
            first = await buffer.append(key, last, b"end\n", 1, 0, keep_from)
            assert first <= keep_from
            assert await buffer.read(key, first - 1, last + 1, 10**6) == [
                *everything[first - 1 :],
                b"end\n",
            ]
            if first > 1:
                assert await buffer.read(key, first - 2, last + 1, 10**6) == []
        finally:
            await buffer.close()
