"""Group commit: concurrent one-at-a-time writes of one process, in one transaction.

An application calls ``notify()`` once per event (a web request, a webhook, a domain
event), often from many tasks at once. Each call on its own pays a whole store
transaction (on PostgreSQL a round trip and a commit flush) for one row. ``GroupCommit``
gathers the drafts of every call that arrives while a write is in flight, or within
``window_s`` of the first one, up to ``max_drafts``, and writes them together. Each
caller is answered only once the write holding its drafts has committed.

A failed group write is retried call by call, so a draft the store refuses fails its
own caller alone, and a caller cancelled before its group was written is left out.
Validation happens before ``submit``: a bad request never reaches a group.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from tidings.clock import Clock
from tidings.model import IntentDraft

log = logging.getLogger("tidings.group_commit")

Write = Callable[[Sequence[IntentDraft], float], Awaitable[None]]
"""Writes drafts durably at ``now`` (e.g. ``intake.admit_drafts``)."""


@dataclass(frozen=True, kw_only=True)
class GroupCommitConfig:
    window_s: float = 0.0
    """How long (on the clock) the first call of a group waits for company when no
    write is in flight. Calls arriving during a write always wait for it and form the
    next group, so under load the window is the write itself, at no extra latency."""
    max_drafts: int = 1000
    """The most drafts one transaction writes; a group is written as soon as it is full."""


@dataclass(kw_only=True)
class _Call:
    drafts: Sequence[IntentDraft]
    done: asyncio.Future[None]


class GroupCommit:
    """Writes the drafts of concurrent calls together (see the module docstring)."""

    def __init__(self, write: Write, *, clock: Clock,
                 config: GroupCommitConfig | None = None) -> None:
        self._write = write
        self._clock = clock
        self.config = config or GroupCommitConfig()
        self._waiting: list[_Call] = []
        self._waiting_drafts = 0
        self._full = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self.groups = 0
        """Group transactions written (for benchmarks and tests)."""

    async def submit(self, drafts: Sequence[IntentDraft]) -> None:
        """Return once ``drafts`` are written; raise what writing them raised."""
        if not drafts:
            return
        call = _Call(drafts=drafts, done=asyncio.get_running_loop().create_future())
        self._waiting.append(call)
        self._waiting_drafts += len(drafts)
        if self._waiting_drafts >= self.config.max_drafts:
            self._full.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_groups())
        await call.done

    async def drain(self) -> None:
        """Wait until every call submitted so far is answered."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _write_groups(self) -> None:
        while self._waiting:
            if self._waiting_drafts < self.config.max_drafts and self.config.window_s > 0:
                await self._linger()
            group = self._take()
            if group:
                await self._write_group(group)

    async def _linger(self) -> None:
        """Wait ``window_s`` for more calls, or until the group is full."""
        self._full.clear()
        if self._waiting_drafts >= self.config.max_drafts:
            return
        sleeping = asyncio.ensure_future(self._clock.sleep(self.config.window_s))
        full = asyncio.ensure_future(self._full.wait())
        try:
            await asyncio.wait({sleeping, full}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeping, full):
                task.cancel()

    def _take(self) -> list[_Call]:
        """The next group: whole calls, oldest first, up to ``max_drafts`` (one call
        alone may hold more); calls whose caller gave up are dropped."""
        group: list[_Call] = []
        count = 0
        while self._waiting:
            call = self._waiting[0]
            if group and count + len(call.drafts) > self.config.max_drafts:
                break
            self._waiting.pop(0)
            self._waiting_drafts -= len(call.drafts)
            if call.done.done():  # cancelled while waiting: not written
                continue
            group.append(call)
            count += len(call.drafts)
        return group

    async def _write_group(self, group: list[_Call]) -> None:
        drafts = [d for call in group for d in call.drafts]
        try:
            await self._write(drafts, self._clock.now())
        except Exception as exc:
            if len(group) == 1:
                _answer(group[0], exc)
                return
            # Which call is it about? Each is written alone and answered for itself.
            log.warning("group write of %d calls failed (%s); writing them one by one",
                        len(group), exc)
            for call in group:
                try:
                    await self._write(call.drafts, self._clock.now())
                except Exception as one:
                    _answer(call, one)
                else:
                    _answer(call, None)
            return
        except BaseException:  # cancelled: nobody may be left waiting
            for call in group:
                if not call.done.done():
                    call.done.cancel()
            raise
        self.groups += 1
        for call in group:
            _answer(call, None)


def _answer(call: _Call, error: BaseException | None) -> None:
    if call.done.done():
        return
    if error is None:
        call.done.set_result(None)
    else:
        call.done.set_exception(error)
