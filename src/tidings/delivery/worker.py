"""The channel worker: receive -> claim -> check -> pace -> send -> record -> ack.

One worker serves one channel. Messages stream through: new batches are received
while earlier sends are in flight, and outcomes are committed in batches as they
arrive, so one slow request never holds up the rest. Every outcome and its audit
event are committed before the message is acked (on the store's own queue, in the same
transaction as the ack), so a crash at any point leads to a redelivery that the ledger
turns into a duplicate acked with no provider call, or,
until the reconciler has ended the crashed worker's lease, a busy claim retried later
(an expired lease too is busy: no claimer takes it over). The reconciler makes the
intent uncertain and its channel's policy settles it: a lookup by key (retryable only
when the provider does not find the send), held for evidence and an operator where
there is no lookup, or resent under the same key only where the policy is ``resend``;
so a send that happened is never repeated blindly.

No exception strands a delivery: whatever the composer, the pacer, the last checks,
the provider or the mapping of its answer raises becomes the intent's outcome
(``states.decide_raised``): before the request could have left, a transient failure;
once it may have left, uncertain, for the reconciler to settle. The worker goes on.

The steps live in modules of their own, layered in this order: ``worker_state`` (the
settings, counts and shared state), ``settle`` (outcomes, commits, acks), ``sending``
(pacing, the provider call) and ``claiming`` (receive, claim, compose, leases). This
module runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from tidings.core.errors import StoreError, TransportError
from tidings.core.model import Received
from tidings.delivery.claiming import Claiming, request_for
from tidings.delivery.outage import Outage
from tidings.delivery.sending import CHECKS_LEAD_S
from tidings.delivery.settle import COMMIT_APART_AFTER, PLAIN_REASON
from tidings.delivery.worker_state import WorkerConfig, WorkerStats

__all__ = ["CHECKS_LEAD_S", "COMMIT_APART_AFTER", "PLAIN_REASON", "Worker", "WorkerConfig",
           "WorkerStats", "request_for"]


class Worker(Claiming):
    """Delivers one channel's messages; several may run per channel, in any process."""

    def stop(self) -> None:
        """Stop taking messages; work in hand is finished or released."""
        self._stopping.set()
        self._room.set()
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)
        for task in self._acquiring - self._stop_cancelled:
            # Waiting for a pacer slot: released unsent (see ``_acquire``).
            self._stop_cancelled.add(task)
            task.cancel()

    async def run(self) -> None:
        """Serve the channel until ``stop()``, then finish or release what is held."""
        committer = asyncio.create_task(self._commit_loop())
        renewer = asyncio.create_task(self._renew_loop())
        await self._pacer_call("announce this worker", self.pacer.announce)
        idle = self.config.idle_poll_s
        outage = Outage(self.channel, self.worker_id, self.clock)
        try:
            while not self._stopping.is_set():
                try:
                    idle = await self._turn(idle)
                except (StoreError, TransportError) as exc:
                    # The store or the queue is out of reach (down, restarting, no free
                    # connection, a full disk): a batch received but not claimed was
                    # handed back (``_take``). Wait and try again, telling it now and
                    # then, not once a turn; never end the worker for it.
                    await self._pause(outage.failed(exc))
                    continue
                outage.over()
            if self._sends:
                await asyncio.gather(*self._sends, return_exceptions=True)
        finally:
            committer.cancel()
            renewer.cancel()
            for task in (committer, renewer):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.flush()
            await self.pacer.flush()

    async def _turn(self, idle: float) -> float:
        """Receive and take one batch, or wait while there is none; the next idle wait."""
        await self._refresh_claim_depth()
        room = self._room_for_claims()
        limit = self.config.max_held if self._claim_depth is None else self._claim_depth
        if room < max(1, min(self.config.batch_size, limit) // 2):
            self._room.clear()
            await self._room.wait()
            return idle
        batch = await self._receive(min(room, self.config.batch_size))
        if batch:
            await self._take(batch)
            return self.config.idle_poll_s
        await self.pacer.flush()
        await self._idle(idle)
        return min(idle * 2, self.config.max_idle_wait_s if self.transport.notifies
                   else self.config.max_idle_poll_s)

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds`` on the clock, or until ``stop()``."""
        sleeping = asyncio.ensure_future(self.clock.sleep(seconds))
        done, _ = await asyncio.wait({sleeping, self._stop_future()},
                                     return_when=asyncio.FIRST_COMPLETED)
        if sleeping not in done:
            sleeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sleeping

    async def _idle(self, timeout_s: float) -> None:
        """Wait for the queue (see ``Transport.wait``), or for ``stop()``."""
        waiting = asyncio.ensure_future(self.transport.wait(
            self.channel, timeout_s=timeout_s, now=self.clock.now()))
        done, _ = await asyncio.wait({waiting, self._stop_future()},
                                     return_when=asyncio.FIRST_COMPLETED)
        if waiting not in done:
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
        else:
            waiting.result()  # a transport error surfaces here, as from receive

    def _stop_future(self) -> asyncio.Future[None]:
        """One future, done at ``stop()``, that every wait races against."""
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_future()
            if self._stopping.is_set():
                self._stopped.set_result(None)
        return self._stopped

    async def run_once(self) -> int:
        """Receive one batch and handle it completely; return how many messages it held."""
        batch = await self._receive(self.config.batch_size)
        if batch:
            await self.handle(batch)
        return len(batch)

    async def _receive(self, limit: int) -> list[Received]:
        """Up to ``limit`` messages, lane by lane as ``lane_share`` plans: a lower lane
        owed its share is asked alone first, for what it is owed."""
        batch: list[Received] = []
        for lanes, most in self.lane_share.plan(limit):
            got = await self.transport.receive(
                self.channel, max_messages=most, visibility_s=self.config.visibility_s,
                now=self.clock.now(), lanes=lanes, fair=self.fair)
            self.lane_share.took(lanes, [m.lane for m in got], limit=most)
            batch += got
        return batch

    async def handle(self, batch: Sequence[Received]) -> None:
        """Take a batch, wait for its sends, commit and ack (tests cut into this)."""
        await self._take(batch)
        while self._sends:
            await asyncio.gather(*list(self._sends), return_exceptions=True)
        await self.flush()
        await self.pacer.flush()  # hand finished slots back for other processes now
