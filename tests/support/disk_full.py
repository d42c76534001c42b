"""The second half of a full-disk test, on either store: a worker started on the full
disk waits (its writes fail) and does not end; once the disk is grown the page refused
earlier is admitted and everything is delivered."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tidings.admission.intake import NotifyRequest


async def worker_waits_then_resumes(runtime: Any, disk: Path, refused: list[NotifyRequest],
                                    total: int, *, guard_s: float) -> dict[str, int]:
    """Run the email worker on the full disk, grow ``disk`` (a tmpfs) to 256 MiB, admit
    ``refused`` again and wait until ``total`` sends are accepted; the channel's counts."""
    worker = runtime.worker("email")
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(1.0)
    assert not running.done(), running

    grown = await asyncio.create_subprocess_exec(
        "mount", "-o", "remount,size=256m", str(disk), stderr=asyncio.subprocess.PIPE)
    _, said = await grown.communicate()
    assert grown.returncode == 0, said
    await runtime.notify_many(refused)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + guard_s
    while worker.stats.accepted < total:
        assert not running.done(), running
        assert loop.time() < deadline, worker.stats
        await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(running, guard_s)
    counts: dict[str, int] = (await runtime.store.intent_counts())["email"]
    return counts
