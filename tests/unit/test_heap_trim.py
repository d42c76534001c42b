"""The heap trim of long-running services (``tidings.processes.heap``)."""

from __future__ import annotations

import asyncio
import platform

import pytest

from tidings.processes.heap import find_trim, trim_loop


async def test_the_loop_trims_every_period_until_stopped() -> None:
    stopping = asyncio.Event()
    calls: list[int] = []

    def trim() -> int:
        calls.append(1)
        if len(calls) == 3:
            stopping.set()
        return 1

    assert await trim_loop(stopping, every_s=0.0, trim=trim) == 3


async def test_a_failing_trim_ends_the_loop_and_nothing_else() -> None:
    def broken() -> int:
        raise OSError("no")

    assert await trim_loop(asyncio.Event(), every_s=0.0, trim=broken) == 0


def test_the_c_librarys_trim_is_found_where_there_is_one() -> None:
    trim = find_trim()
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("only glibc has malloc_trim")
    assert trim is not None and trim() in (0, 1)  # 1: memory was given back
