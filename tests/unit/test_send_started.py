"""A send is marked started in the ledger before its request leaves, so that when a
worker dies only what was on the wire is uncertain: its other claims are released and
claimed again. Embedded store, fake clock; the ledger read with plain sqlite3."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.model import SendRequest
from tidings.core.outcomes import Accepted, Outcome
from tidings.core.states import State
from tidings.runtime import build_runtime

T0 = 1_000_000.0


def started(db: Path) -> dict[str, bool]:
    """Per claimed intent: whether a send started under its current lease."""
    with sqlite3.connect(db) as conn:
        return {key: token == lease for key, token, lease in conn.execute(
            "SELECT key, send_started_token, lease_token FROM intents WHERE state = 'claimed'")}


@dataclass
class Wire:
    """A provider whose requests stay on the wire until ``answer`` is set; at each
    request it reads, from the ledger itself, whether that send was marked started."""

    db: Path
    answer: asyncio.Event = field(default_factory=asyncio.Event)
    two_on_wire: asyncio.Event = field(default_factory=asyncio.Event)
    on_wire: list[str] = field(default_factory=list)
    marked_at_send: dict[str, bool] = field(default_factory=dict)
    name: str = "wire"
    supports_lookup: bool = False
    deduplicates: bool = False
    dedupe_window_s: float | None = None
    lookup_settle_s: float = 0.0

    async def send(self, request: SendRequest) -> Outcome:
        self.marked_at_send[request.key] = started(self.db).get(request.key, False)
        self.on_wire.append(request.key)
        if len(self.on_wire) >= 2:
            self.two_on_wire.set()
        await self.answer.wait()
        return Accepted(receipt=f"r-{request.key}")

    async def close(self) -> None:
        return None


async def test_only_sends_on_the_wire_are_uncertain_after_the_worker_is_gone(
        tmp_path: Path) -> None:
    # Given a worker holding 10 claims, 2 of them on the wire (max_in_flight 2)
    db = tmp_path / "started.db"
    clock = FakeClock(T0)
    provider = Wire(db)
    settings = Settings.parse({"store": f"sqlite:///{db}",
                               "channels": {"email": {"max_in_flight": 2,
                                                      "provider": {"kind": "sandbox-twin"}}}})
    rt = await build_runtime(settings, clock=clock, providers={"email": provider})
    try:
        await rt.notify_many([NotifyRequest(
            key=f"k{i}", recipient={"id": f"r{i}", "email": f"k{i}@example.com"},
            channels=["email"], template="t/v1") for i in range(10)])
        worker = rt.worker("email", "w1")
        serving = asyncio.create_task(worker.run())
        await asyncio.wait_for(provider.two_on_wire.wait(), 30)
        await asyncio.sleep(0.05)  # the others wait for a pacer slot, never marked

        # Then every request left marked, and only the two on the wire are marked
        assert provider.marked_at_send == {"k0:email": True, "k1:email": True}
        marks = started(db)
        assert len(marks) == 10 and sorted(k for k, m in marks.items() if m) == [
            "k0:email", "k1:email"]

        # When the worker is gone (its lease runs out) and the reconciler sweeps
        lease = worker.config.lease_s
        swept = await rt.reconciler().run_pass(now=clock.now() + lease + 1)

        # Then the two on the wire are uncertain, the eight others released
        assert (swept.leases_expired, swept.leases_released) == (10, 8)
        states = {}
        for i in range(10):
            intent = await rt.store.intent_get(f"k{i}:email")
            assert intent is not None
            states[intent.key] = intent.state
        assert [k for k, s in states.items() if s is State.UNCERTAIN] == ["k0:email",
                                                                           "k1:email"]
        assert sum(s is State.RETRYABLE for s in states.values()) == 8
    finally:
        worker.stop()
        provider.answer.set()
        await serving
        await rt.close()


async def test_a_send_whose_lease_moved_on_before_its_start_never_leaves(
        tmp_path: Path) -> None:
    # Given a claim released by the reconciler while its send waited for a slot
    db = tmp_path / "moved.db"
    clock = FakeClock(T0)
    provider = Wire(db)
    provider.answer.set()
    settings = Settings.parse({"store": f"sqlite:///{db}",
                               "channels": {"email": {"provider": {"kind": "sandbox-twin"}}}})
    rt = await build_runtime(settings, clock=clock, providers={"email": provider})
    try:
        await rt.notify_many([NotifyRequest(
            key="late", recipient={"id": "r", "email": "late@example.com"},
            channels=["email"], template="t/v1")])
        worker = rt.worker("email", "w1")
        [received] = await rt.transport.receive("email", max_messages=1, visibility_s=60,
                                                now=clock.now())
        [claim] = await rt.store.intent_claim_many(["late:email"], owner="w1", lease_s=1,
                                                   now=clock.now())
        assert claim.token is not None and claim.intent is not None
        released = await rt.reconciler().run_pass(now=clock.now() + 2)
        assert released.leases_released == 1
        worker._held["late:email"] = (claim.token, received, clock.now() + 60, 0)

        # When its send reaches the mark: the store refuses it (the lease is not its own)
        assert await worker._started("late:email") is False
        # Then nothing left
        assert provider.on_wire == []
    finally:
        await rt.close()


async def test_a_claim_marks_its_start_where_every_claim_starts_at_once(
        tmp_path: Path) -> None:
    # Unpaced with an in-flight budget that covers what a worker holds: the claim marks;
    # otherwise (a budget smaller than max_held, or a quota) the start waits for its slot.
    def settings(channel: dict[str, object]) -> Settings:
        return Settings.parse({"store": f"sqlite:///{tmp_path / 'm.db'}",
                               "worker": {"max_held": 400},
                               "channels": {"email": {**channel,
                                                      "provider": {"kind": "sandbox-twin"}}}})
    cases = [({"max_in_flight": 400}, True), ({"max_in_flight": 399}, False),
             ({"max_in_flight": 1000, "quota": "100/s"}, False)]
    for channel, expected in cases:
        rt = await build_runtime(settings(channel), clock=FakeClock(T0))
        try:
            assert rt.worker("email", "w1").marks_at_claim is expected, channel
        finally:
            await rt.close()
