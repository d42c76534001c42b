"""cProfile on both threads that do tidings' work: the event loop and the SQLite thread.

A ``SqliteDatabase`` runs every statement on its own one-thread executor, and
cProfile only sees the thread that enabled it, so a second profiler is enabled *on
that thread* by submitting ``enable`` to its executor. The report lists, per thread,
the functions with the most self time ("tottime"), plus the thread's total.

Profiling slows Python code down (roughly 1.5-2x); the measured figures always come
from an unprofiled run, and a profile only says where the time goes.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
from pathlib import Path
from typing import Any

from tidings.stores.sqlite_db import SqliteDatabase

_SRC = str(Path(__file__).resolve().parent.parent / "src") + "/"
#: Where a thread waits rather than works: the event loop's selector (waiting for the
#: database thread or a timer), the executor's work queue (the database thread idle),
#: and lock waits. Their time is reported as ``idle_s``, outside the busy total.
_IDLE = ("<method 'poll' of 'select.epoll' objects>",
         "<method 'get' of '_queue.SimpleQueue' objects>",
         "<method 'acquire' of '_thread.lock' objects>")


class ThreadProfiles:
    """One profiler for the event loop thread and one for the database thread."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db
        self.loop = cProfile.Profile()
        self.db_thread = cProfile.Profile()

    async def start(self) -> None:
        # The executor is private to SqliteDatabase; reaching in is fine for a profiler.
        await asyncio.get_running_loop().run_in_executor(self._db._executor,
                                                         self.db_thread.enable)
        self.loop.enable()

    async def stop(self) -> None:
        self.loop.disable()
        await asyncio.get_running_loop().run_in_executor(self._db._executor,
                                                         self.db_thread.disable)

    def report(self, top: int = 15) -> dict[str, Any]:
        return {"event_loop_thread": top_functions(self.loop, top),
                "sqlite_thread": top_functions(self.db_thread, top)}


def _where(file: str, line: int, name: str) -> str:
    if file == "~":
        return name  # a C function: "<method 'executemany' of 'sqlite3.Connection' ...>"
    if file.startswith(_SRC):
        file = file[len(_SRC):]
    elif "/site-packages/" in file:
        file = file.split("/site-packages/", 1)[1]
    elif "/lib/python3" in file:
        file = "stdlib/" + file.split("/lib/python3", 1)[1].split("/", 1)[1]
    return f"{file}:{line}({name})"


def top_functions(profile: cProfile.Profile, top: int) -> dict[str, Any]:
    """The ``top`` functions by self time, with each one's share of the thread's busy time."""
    stats = pstats.Stats(profile)
    table: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    table = stats.stats  # type: ignore[attr-defined]
    idle = sum(row[2] for func, row in table.items() if func[2] in _IDLE)
    total = sum(row[2] for func, row in table.items() if func[2] not in _IDLE)
    busy = [item for item in table.items() if item[0][2] not in _IDLE]
    rows = sorted(busy, key=lambda item: item[1][2], reverse=True)[:top]
    return {
        "busy_s": round(total, 3),
        "idle_s": round(idle, 3),
        "top": [
            {"function": _where(*func), "calls": calls, "self_s": round(tottime, 3),
             "self_share": round(tottime / total, 3) if total else 0.0,
             "cumulative_s": round(cumtime, 3)}
            for func, (_, calls, tottime, cumtime, _) in rows
        ],
    }


def format_profile(profile: dict[str, Any]) -> str:
    lines: list[str] = []
    for thread, data in profile.items():
        if not isinstance(data, dict) or "top" not in data:
            continue
        lines.append(f"  {thread}: busy {data['busy_s']:.2f} s, idle {data['idle_s']:.2f} s; "
                     "top functions by self time (share of busy):")
        for row in data["top"]:
            lines.append(f"    {row['self_share']:6.1%} {row['self_s']:8.3f} s "
                         f"{row['calls']:>9} calls  {row['function']}")
    return "\n".join(lines)
