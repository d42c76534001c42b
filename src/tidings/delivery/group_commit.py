"""Group commit: concurrent one-at-a-time writes of one process, in one transaction.

An application calls ``notify()`` once per event (a web request, a webhook, a domain
event), often from many tasks at once. Each call on its own pays a whole store
transaction (on PostgreSQL a round trip and a commit flush) for one row. ``GroupCommit``
gathers the drafts of every call that arrives while a write is in flight, or within
``window_s`` of the first one, up to ``max_drafts``, and writes them together. Each
caller is answered only once the write holding its drafts has committed.

A failed group write is retried call by call, so a draft the store refuses fails its
own caller alone, and a caller cancelled before its group was written is left out.
When the error says which call it is about (``culprit``: a notify under a key already
used for another request, ``KeyConflict.index``), only that call is set aside: the
others are written together again at once, and it is written alone after them,
answered by its own write, so one conflict costs its group two more transactions, not
one per call (past ``MAX_SET_ASIDE`` such calls, the rest are written one by one).
Validation happens before ``submit``: a bad request never reaches a group.

``Coalescer`` is the same machinery for any item with an answer of its own: ``POST
/v1/queue/publish`` coalesces whole requests (reservation, intents and answer of each
in one transaction for all of them, ``api.publish``) with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from tidings.core.clock import Clock
from tidings.core.model import IntentDraft

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
    settle_turns: int = 0
    """Event-loop turns the first call of a group lets pass before it is written when no
    write is in flight (no clock time passes): calls that tasks already running are
    about to make join it, instead of each waiting for the write before it. For
    callers that come in a burst from one batch (a worker's sends reaching their start
    mark), not for calls that come one by one."""


T = TypeVar("T")
R = TypeVar("R")

WriteMany = Callable[[Sequence[T], float], Awaitable[Sequence[R]]]
"""Writes items durably at ``now`` in one transaction; one answer per item, in order."""


@dataclass(kw_only=True)
class _Call(Generic[T, R]):
    item: T
    size: int
    done: asyncio.Future[R]


#: The most calls of a group set aside by name before the rest are written one by one
#: (each set-aside writes the others again: many conflicts cost no more than one each).
MAX_SET_ASIDE = 4


class Coalescer(Generic[T, R]):
    """Writes the items of concurrent calls together and answers each call with its own
    item's answer (see the module docstring). ``size`` counts an item against
    ``max_drafts`` (the intents it writes)."""

    def __init__(self, write: WriteMany[T, R], *, clock: Clock,
                 config: GroupCommitConfig | None = None,
                 size: Callable[[T], int] = lambda _item: 1,
                 culprit: Callable[[Exception], int | None] | None = None) -> None:
        self._write = write
        self._clock = clock
        self._size = size
        self._culprit = culprit
        """Which item of a failed group write an error is about (its index in the
        items written), or None: unknown, every item is written again alone."""
        self.config = config or GroupCommitConfig()
        self._waiting: list[_Call[T, R]] = []
        self._waiting_drafts = 0
        self._full = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self.groups = 0
        """Group transactions written (for benchmarks and tests)."""

    async def submit(self, item: T) -> R:
        """Return ``item``'s answer once it is written; raise what writing it raised."""
        size = max(1, self._size(item))
        call: _Call[T, R] = _Call(item=item, size=size,
                                  done=asyncio.get_running_loop().create_future())
        self._waiting.append(call)
        self._waiting_drafts += size
        if self._waiting_drafts >= self.config.max_drafts:
            self._full.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_groups())
        return await call.done

    async def drain(self) -> None:
        """Wait until every call submitted so far is answered."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _write_groups(self) -> None:
        for _ in range(self.config.settle_turns):
            if self._waiting_drafts >= self.config.max_drafts:
                break
            await asyncio.sleep(0)
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

    def _take(self) -> list[_Call[T, R]]:
        """The next group: whole calls, oldest first, up to ``max_drafts`` (one call
        alone may hold more); calls whose caller gave up are dropped."""
        group: list[_Call[T, R]] = []
        count = 0
        while self._waiting:
            call = self._waiting[0]
            if group and count + call.size > self.config.max_drafts:
                break
            self._waiting.pop(0)
            self._waiting_drafts -= call.size
            if call.done.done():  # cancelled while waiting: not written
                continue
            group.append(call)
            count += call.size
        return group

    async def _write_group(self, group: list[_Call[T, R]]) -> None:
        aside: list[_Call[T, R]] = []  # calls to write alone, after the group
        place = {id(call): n for n, call in enumerate(group)}
        try:
            while group:
                try:
                    answers = await self._write_items(group)
                except Exception as exc:
                    index = self._culprit_of(exc, len(group))
                    if index is not None and len(aside) < MAX_SET_ASIDE:
                        # The others again, together; this one after them, alone.
                        aside.append(group.pop(index))
                        continue
                    if len(group) == 1:
                        _answer(group[0], error=exc)
                    else:
                        # Which call is it about? Each is written alone, answered for itself.
                        log.warning("group write of %d calls failed (%s); writing them one "
                                    "by one", len(group), exc)
                        aside[:0] = group
                    break
                self.groups += 1
                for call, answer in zip(group, answers, strict=True):
                    _answer(call, answer)
                break
            group = []
            aside.sort(key=lambda call: place[id(call)])  # in the order the calls came
            while aside:
                await self._write_alone(aside[0])
                aside.pop(0)
        except BaseException:  # cancelled: nobody may be left waiting
            for call in (*group, *aside):
                if not call.done.done():
                    call.done.cancel()
            raise

    async def _write_items(self, group: Sequence[_Call[T, R]]) -> Sequence[R]:
        answers = await self._write([call.item for call in group], self._clock.now())
        if len(answers) != len(group):
            raise RuntimeError(f"a group write answered {len(answers)} of "
                               f"{len(group)} items")
        return answers

    def _culprit_of(self, error: Exception, size: int) -> int | None:
        """The index of the call a failed write of ``size`` calls names, if it names
        one and others are left to write together."""
        if self._culprit is None or size < 2:
            return None
        index = self._culprit(error)
        return index if index is not None and 0 <= index < size else None

    async def _write_alone(self, call: _Call[T, R]) -> None:
        if call.done.done():  # its caller gave up meanwhile: not written
            return
        try:
            (one,) = await self._write_items([call])
        except Exception as error:
            _answer(call, error=error)
        else:
            _answer(call, one)


class GroupCommit:
    """Writes the drafts of concurrent calls together (see the module docstring)."""

    def __init__(self, write: Write, *, clock: Clock,
                 config: GroupCommitConfig | None = None) -> None:
        async def write_many(calls: Sequence[Sequence[IntentDraft]],
                             now: float) -> list[None]:
            await write([d for drafts in calls for d in drafts], now)
            return [None] * len(calls)

        self._calls: Coalescer[Sequence[IntentDraft], None] = Coalescer(
            write_many, clock=clock, config=config, size=len)
        self.config = self._calls.config

    @property
    def groups(self) -> int:
        """Group transactions written (for benchmarks and tests)."""
        return self._calls.groups

    async def submit(self, drafts: Sequence[IntentDraft]) -> None:
        """Return once ``drafts`` are written; raise what writing them raised."""
        if drafts:
            await self._calls.submit(drafts)

    async def drain(self) -> None:
        """Wait until every call submitted so far is answered."""
        await self._calls.drain()


def _answer(call: _Call[T, R], answer: R | None = None, *,
            error: BaseException | None = None) -> None:
    if call.done.done():
        return
    if error is None:
        call.done.set_result(answer)  # type: ignore[arg-type]
    else:
        call.done.set_exception(error)
