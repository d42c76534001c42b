"""Batching: the sends a worker starts together go to the provider in one request.

Each claimed intent still has its own send task: its own pacer slot (pacing counts
messages), its own last checks and lease check, its own start mark, its own outcome.
Only the provider call is shared: where a send would call ``provider.send``, it hands
its request to the channel's ``Batcher`` and waits for its own Outcome. The batcher
sends what has gathered as one ``send_batch`` request when it holds
``max_messages``, or ``linger_s`` after the first of them arrived, whichever comes
first, so a lone message waits at most ``linger_s``. A worker starts a claimed batch's
sends in one turn of the event loop, so they meet here without waiting.

What can go wrong stays per intent:

- the provider's answer is mapped item by item (``BatchProvider.send_batch``): one
  message refused does not touch the others;
- a request whose answer was lost is the same ``Uncertain`` for each of its
  messages, and each intent is then settled by evidence on its own key;
- a request that raises, or answers a count of outcomes other than it was sent,
  raises for each of its sends (the worker makes that uncertain: the request may have
  left);
- a send that stops waiting (its deadline, a worker's stop) before its batch leaves
  is taken out of it and never sent; after, the request is in flight and its outcome
  for that send is the worker's to treat as uncertain, as for a single send cut off.

The whole request is bounded by ``deadline_s`` too: past it the call is cancelled,
which closes its connection, so nothing of it reaches the provider any later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from tidings.core.errors import SendDeadlineExceeded
from tidings.core.model import SendRequest
from tidings.core.outcomes import Outcome
from tidings.providers.base import BatchProvider

log = logging.getLogger("tidings.worker")

#: How long a lone message waits for others by default (``channels.<name>.batch``).
DEFAULT_LINGER_S = 0.02


class BatchAnswerMismatch(RuntimeError):
    """The provider answered a different number of outcomes than it was sent."""


class Batcher:
    """Gathers one channel's concurrent sends into ``send_batch`` requests."""

    def __init__(self, provider: BatchProvider, *, max_messages: int,
                 linger_s: float = DEFAULT_LINGER_S, deadline_s: float = 15.0) -> None:
        if max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        self.provider = provider
        self.max_messages = max_messages
        self.linger_s = max(0.0, linger_s)
        self.deadline_s = deadline_s
        self._pending: list[tuple[SendRequest, asyncio.Future[Outcome]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self.requests = 0
        self.messages = 0

    async def send(self, request: SendRequest) -> Outcome:
        """This request's own Outcome, from the batch it went in."""
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if len(self._pending) >= self.max_messages:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.linger_s, self._flush)
        # A cancelled wait cancels the future: a batch not yet sent leaves it out.
        return await future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting = [(r, f) for r, f in self._pending if not f.done()]
        self._pending = []
        for first in range(0, len(waiting), self.max_messages):
            task = asyncio.create_task(self._request(waiting[first:first + self.max_messages]))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    async def _request(self, batch: Sequence[tuple[SendRequest, asyncio.Future[Outcome]]]
                       ) -> None:
        # Sends that stopped waiting meanwhile are not sent at all.
        batch = [(r, f) for r, f in batch if not f.done()]
        if not batch:
            return
        self.requests += 1
        self.messages += len(batch)
        try:
            async with asyncio.timeout(self.deadline_s):
                outcomes = await self.provider.send_batch([r for r, _ in batch])
            if len(outcomes) != len(batch):
                raise BatchAnswerMismatch(
                    f"the provider answered {len(outcomes)} outcomes for a batch of "
                    f"{len(batch)}")
        except TimeoutError:
            self._fail(batch, SendDeadlineExceeded(
                f"no answer to a batch of {len(batch)} within send_deadline_s "
                f"({self.deadline_s:g} s); the call was cut off"))
            return
        except asyncio.CancelledError:
            self._fail(batch, SendDeadlineExceeded("the batch's request was cancelled"))
            raise
        except Exception as exc:
            self._fail(batch, exc)
            return
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if not future.done():
                future.set_result(outcome)

    @staticmethod
    def _fail(batch: Sequence[tuple[SendRequest, asyncio.Future[Outcome]]],
              exc: BaseException) -> None:
        for _, future in batch:
            if not future.done():
                future.set_exception(exc)

    async def close(self) -> None:
        """Send what is gathered now, and wait for the requests in flight."""
        if self._pending:
            self._flush()
        if self._requests:
            await asyncio.gather(*self._requests, return_exceptions=True)
