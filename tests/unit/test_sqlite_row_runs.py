"""``row_runs``: the multi-row statements' sizes, a few texts whatever the counts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidings.stores.sqlite_db import row_runs


@given(st.integers(min_value=0, max_value=20_000), st.integers(min_value=2, max_value=5_000))
def test_runs_cover_every_row_once_in_order(count: int, most: int) -> None:
    at = 0
    for start, size in row_runs(count, most):
        assert start == at and 0 < size <= most
        at += size
    assert at == count


def test_every_count_up_to_a_chunk_uses_a_handful_of_statement_texts() -> None:
    # Before, each remainder size was a statement text of its own (1,000 of them here).
    sizes = {size for count in range(1, 3_001) for _, size in row_runs(count, 1_000)}
    assert sizes == {1_000} | {2**k for k in range(10)}  # 1 .. 512, and the full chunk
