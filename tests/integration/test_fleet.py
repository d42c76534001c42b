"""A fleet on one store: many claimers racing for leases, two schedulers on one campaign.

Every test runs against a SQLite file and a PostgreSQL schema of its own (the
``pg_url`` fixture of ``tests/conftest.py``: skips on a laptop without a server, fails
under ``CI``). The children are spawned processes; their entry points are module-level
functions so they pickle, and they open the store themselves with
``tidings.runtime.open_store`` (each claimer task opens its own).

Leases use real time (processes share no fake clock), so they are short: 0.2–1 s.

On PostgreSQL, concurrent ``intent_claim_many`` / ``intent_apply_many`` batches (the
claimers' and the lease sweep's) can deadlock: ``intent_apply_many`` updates rows in
the caller's order, not in key order, and the store's own conflict retries run out
under this load, so the call fails with ``StoreError: deadlock detected``. The
transaction rolled back, so the claimers and the sweep here retry such a call and the
test counts them (printed); the guarantees are asserted regardless.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import multiprocessing
import os
import random
import signal
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tidings.admission.audience import GeneratorAudience
from tidings.admission.campaign import Campaign
from tidings.admission.scheduler import Scheduler, SchedulerConfig, occurrence_id
from tidings.core.cron import Schedule
from tidings.core.errors import StoreError
from tidings.core.keys import campaign_key_maker
from tidings.core.model import IntentDraft, Recipient
from tidings.core.states import State
from tidings.runtime import open_store
from tidings.stores.base import Change, ClaimKind, Store

pytestmark = pytest.mark.slow

T = TypeVar("T")
SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture(params=["sqlite", "postgres"])
def fleet_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleet.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def fleet_store(fleet_url: str) -> AsyncIterator[Store]:
    """The parent's view of the migrated, empty store."""
    store, transport = await open_store(fleet_url)
    await store.migrate(now=NOW)
    yield store
    await transport.close()
    await store.close()


def _join(procs: list[Any], timeout: float = 30) -> list[int | None]:
    for p in procs:
        p.join(timeout=timeout)
        if p.is_alive():
            p.kill()
            p.join()
    return [p.exitcode for p in procs]


# ====================================================================== claim race

CLAIM_KEYS = 10_000
CLAIM_PROCESSES = 4
CLAIM_TASKS = 8
CLAIM_BATCH = 16
ABANDON_P = 0.03  # claim, then never commit: the lease expires, the reconciler frees it
SLOW_P = 0.05  # "send" only after the lease has expired: a stale send, must be fenced off


@dataclass(frozen=True)
class ClaimRecord:
    key: str
    token: int
    claimed_at: float  # the ``now`` passed to intent_claim_many
    lease_until: float


@dataclass(frozen=True)
class SendRecord:
    key: str
    token: int
    lease_until: float
    valid_at_send: bool  # the lease was still live by the sender's clock when it sent
    committed_at: float  # the ``now`` passed to intent_apply_many
    after_commit: float  # the clock when intent_apply_many returned
    applied: bool  # the guarded commit (from claimed, lease token) applied


def _claim_key(i: int) -> str:
    return f"race/{i:05d}"


DEADLOCKS = Counter[str]()


async def _retry_deadlocks(call: Callable[[], Awaitable[T]]) -> T:
    """Retry a store call that failed with a deadlock (its transaction rolled back, so
    nothing was written); counted, and reported by the test. See the module docstring."""
    while True:
        try:
            return await call()
        except StoreError as exc:
            if "deadlock" not in str(exc):
                raise
            DEADLOCKS["store errors"] += 1
            await asyncio.sleep(random.uniform(0.0, 0.02))


async def _open_small(url: str) -> Store:
    """A store of its own; on PostgreSQL a pool of two connections, so that 32
    claimers (with their late sends in flight) stay under the server's 100 clients."""
    if url.startswith("sqlite:"):
        from tidings.stores.sqlite import SqliteStore

        return await SqliteStore.open(url)
    from tidings.stores.postgres import PostgresStore
    from tidings.stores.postgres_db import PostgresDatabase

    db = PostgresDatabase.from_url(url, max_size=2)
    await db.open()
    return PostgresStore(db)


async def _claimer(url: str, owner: str, seed: int, accepted: Any, deadline: float,
                   claims: list[ClaimRecord], sends: list[SendRecord]) -> int:
    """One claimer with its own store: claim random batches, send or abandon each."""
    store = await _open_small(url)
    rng = random.Random(seed)
    pending = list(range(CLAIM_KEYS))
    abandoned = 0
    slow: list[asyncio.Task[None]] = []

    async def send(batch: list[ClaimRecord]) -> None:
        at = time.time()
        valid = {c.key: at < c.lease_until for c in batch}
        applied = set(await _retry_deadlocks(lambda: store.intent_apply_many([
            Change(key=c.key, from_state=State.CLAIMED, to_state=State.ACCEPTED,
                   event="accepted", lease_token=c.token, receipt=f"r-{c.key}-{c.token}",
                   worker=owner) for c in batch], now=at)))
        after = time.time()
        for c in batch:
            sends.append(SendRecord(key=c.key, token=c.token, lease_until=c.lease_until,
                                    valid_at_send=valid[c.key], committed_at=at,
                                    after_commit=after, applied=c.key in applied))
            if c.key in applied:
                accepted[int(c.key.rsplit("/", 1)[1])] = 1

    async def send_late(c: ClaimRecord) -> None:
        await asyncio.sleep(max(0.0, c.lease_until - time.time()) + rng.uniform(0.2, 0.5))
        await send([c])

    try:
        while time.time() < deadline:
            pending = [i for i in pending if not accepted[i]]
            if not pending:
                break
            picked = rng.sample(pending, min(CLAIM_BATCH, len(pending)))
            now = time.time()
            lease_s = rng.uniform(0.2, 1.0)
            result = await _retry_deadlocks(functools.partial(
                store.intent_claim_many, [_claim_key(i) for i in picked], owner=owner,
                lease_s=lease_s, now=now))
            won = []
            for claim in result:
                if claim.kind is ClaimKind.CLAIMED:
                    assert claim.token is not None
                    won.append(ClaimRecord(key=claim.key, token=claim.token, claimed_at=now,
                                           lease_until=now + lease_s))
                elif claim.kind is ClaimKind.DONE:
                    accepted[int(claim.key.rsplit("/", 1)[1])] = 1
            claims.extend(won)
            fast = []
            for c in won:
                roll = rng.random()
                if roll < ABANDON_P:
                    abandoned += 1
                elif roll < ABANDON_P + SLOW_P:
                    slow.append(asyncio.create_task(send_late(c)))
                else:
                    fast.append(c)
            if fast:
                await send(fast)
            if not won:
                await asyncio.sleep(0.02)  # only busy or not-due keys left: let leases run out
        await asyncio.gather(*slow)
        return abandoned
    finally:
        for task in slow:
            task.cancel()
        await store.close()


def _claim_process(url: str, name: str, accepted: Any, start: Any, deadline: float,
                   results: Any) -> None:
    async def run() -> tuple[list[ClaimRecord], list[SendRecord], int]:
        claims: list[ClaimRecord] = []
        sends: list[SendRecord] = []
        start.wait()
        abandoned = await asyncio.gather(*(
            _claimer(url, f"{name}.{t}", hash((name, t)), accepted, deadline, claims, sends)
            for t in range(CLAIM_TASKS)))
        return claims, sends, sum(abandoned)

    results.put((name, (*asyncio.run(run()), DEADLOCKS["store errors"])))


async def _reconcile_expired(store: Store, stop: asyncio.Event) -> int:
    """The reconciler's lease sweep: expired leases become retryable, due at once."""
    moved = 0
    while not stop.is_set():
        now = time.time()
        expired = await store.intent_find(states=[State.CLAIMED], lease_expired_at=now,
                                          limit=1000)
        if expired:
            changes = [Change(
                key=i.key, from_state=State.CLAIMED, to_state=State.RETRYABLE,
                event="lease_expired", lease_token=i.lease_token, lease_expired_by=now,
                next_attempt_at=now, worker="reconciler") for i in expired]
            moved += len(await _retry_deadlocks(
                lambda: store.intent_apply_many(changes, now=now)))  # noqa: B023
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.05)
    return moved


async def test_32_claimers_race_over_10000_intents(fleet_store: Store, fleet_url: str) -> None:
    store = fleet_store
    keys = [_claim_key(i) for i in range(CLAIM_KEYS)]
    for i in range(0, CLAIM_KEYS, 2_000):
        chunk = keys[i:i + 2_000]
        await store.intent_admit([IntentDraft(
            key=k, channel="email", recipient_id=k.replace("/", "-"),
            address=f"{i}@example.com", template="race@v1", data="{}", due_at=0.0,
            expires_at=None, campaign=None, occurrence=None) for k in chunk], now=time.time())
        await store.intent_mark_enqueued(chunk, now=time.time())

    accepted = SPAWN.Array("b", CLAIM_KEYS, lock=False)  # a hint to stop early, no more
    start, results = SPAWN.Barrier(CLAIM_PROCESSES + 1), SPAWN.Queue()
    deadline = time.time() + 60  # the children stop by then even if keys are left
    procs = [SPAWN.Process(target=_claim_process,
                           args=(fleet_url, f"p{n}", accepted, start, deadline, results))
             for n in range(CLAIM_PROCESSES)]
    for p in procs:
        p.start()
    stop = asyncio.Event()
    started = time.monotonic()
    await asyncio.to_thread(start.wait)
    reconciler = asyncio.create_task(_reconcile_expired(store, stop))
    try:
        out = dict(await asyncio.to_thread(
            lambda: [results.get(timeout=90) for _ in procs]))
    finally:
        stop.set()
        moved = await reconciler
    elapsed = time.monotonic() - started
    assert _join(procs) == [0] * CLAIM_PROCESSES

    claims = [c for cs, _, _, _ in out.values() for c in cs]
    sends = [s for _, ss, _, _ in out.values() for s in ss]
    abandoned = sum(a for _, _, a, _ in out.values())
    deadlocks = sum(d for _, _, _, d in out.values()) + DEADLOCKS["store errors"]
    applied = [s for s in sends if s.applied]
    rejected = [s for s in sends if not s.applied]
    stale_at_send = [s for s in sends if not s.valid_at_send]
    print(f"\nclaim race ({fleet_url.split(':', 1)[0]}): {elapsed:.1f}s, {len(claims)} claims, "
          f"{len(sends)} sends ({len(stale_at_send)} after their lease ran out), "
          f"{len(applied)} applied, {len(rejected)} rejected by the token guard, "
          f"{abandoned} abandoned, {moved} leases expired by the reconciler, "
          f"{deadlocks} calls failed with a deadlock after the store's retries, "
          f"{sum(1 for ss in out.values() if ss[0])} processes claimed something")

    # 0 double claims: every (key, token) once, and per key the leases, in token order,
    # never overlap: a key is claimed again only after the previous lease ran out.
    assert max(Counter((c.key, c.token) for c in claims).values()) == 1
    by_key: dict[str, list[ClaimRecord]] = defaultdict(list)
    for c in claims:
        by_key[c.key].append(c)
    overlaps = []
    for key_claims in by_key.values():
        key_claims.sort(key=lambda c: c.token)
        overlaps += [(a, b) for a, b in itertools.pairwise(key_claims)
                     if b.claimed_at < a.lease_until]
    assert overlaps == []
    assert set(by_key) == set(keys)

    # Fencing: a commit under a lease that was taken away is rejected; one that applies
    # holds the key's last token (nobody claimed after it), so no stale send counted.
    sends_by_key: dict[str, list[SendRecord]] = defaultdict(list)
    for s in sends:
        sends_by_key[s.key].append(s)
    applied_per_key = Counter(s.key for s in applied)
    assert set(applied_per_key) == set(keys) and max(applied_per_key.values()) == 1
    last_token = {k: max(c.token for c in cs) for k, cs in by_key.items()}
    assert [s for s in applied if s.token != last_token[s.key]] == []
    # A rejected commit is exactly one whose lease had run out (and was swept) before it.
    assert [s for s in rejected if s.after_commit < s.lease_until] == []
    assert rejected, "no stale send happened: the race was not exercised"
    # Every send made while its lease was live applied (its token was current).
    assert [s for s in sends if s.valid_at_send and s.after_commit < s.lease_until
            and not s.applied] == []

    # The store agrees: each key accepted once, one accepted event per key.
    assert await store.intent_counts() == {"email": {"accepted": CLAIM_KEYS}}
    events = (await store.event_counts())["email"]
    assert events["accepted"] == CLAIM_KEYS
    assert events["claimed"] == len(claims)


# ====================================================================== scheduler HA

AUDIENCE = 20_000
PAGE_SIZE = 500
MAX_PAGES = 3
SCHEDULE = Schedule("0 9 * * *", "UTC")
NOW = SCHEDULE.occurrence_for("2026-08-14").logical_at + 60


def fleet_audience() -> Iterator[Recipient]:
    for i in range(AUDIENCE):
        yield Recipient(id=f"{i:06d}", email=f"u{i}@example.com")


def _campaign() -> Campaign:
    return Campaign(name="fleet", schedule=SCHEDULE, channels=("email",), template="digest",
                    version=1, audience=GeneratorAudience(fleet_audience))


OCCURRENCE = occurrence_id("fleet", "2026-08-14")
EXPECTED_KEYS = {campaign_key_maker("fleet", "2026-08-14", "email", 1)(f"{i:06d}")
                 for i in range(AUDIENCE)}


def _scheduler_process(url: str, name: str, start: Any, pause_s: float,
                       progress: Any, results: Any) -> None:
    """Child process: admission passes until the occurrence is no longer admitting."""

    async def run() -> dict[str, int]:
        store, transport = await open_store(url)
        try:
            scheduler = Scheduler(store=store, transport=transport, campaigns=[_campaign()],
                                  config=SchedulerConfig(page_size=PAGE_SIZE,
                                                         max_pages=MAX_PAGES,
                                                         enqueue_in_store=True))
            totals = {"passes": 0, "members": 0, "admitted": 0}
            start.wait()
            while True:
                result = await scheduler.run_pass(now=NOW)
                totals["passes"] += 1
                totals["members"] += result.members
                totals["admitted"] += result.admitted
                with progress.get_lock():
                    progress.value += result.admitted
                occ = await store.occurrence_get(OCCURRENCE)
                if occ is not None and occ.status != "admitting":
                    return totals
                await asyncio.sleep(pause_s)
        finally:
            await transport.close()
            await store.close()

    results.put((name, asyncio.run(run())))


async def _intent_keys(store: Store) -> list[str]:
    intents = await store.intent_find(states=list(State), limit=10 * AUDIENCE)
    return [i.key for i in intents]


async def _run_two_schedulers(url: str, *, kill_after: int | None = None
                              ) -> tuple[dict[str, dict[str, int]], float]:
    """Two scheduler processes on one campaign; with ``kill_after`` the first is
    SIGKILLed once the pair has admitted that many intents. Returns the survivors'
    totals and the seconds taken."""
    start, results = SPAWN.Barrier(3), SPAWN.Queue()
    progress = SPAWN.Value("q", 0)
    procs = [SPAWN.Process(target=_scheduler_process,
                           args=(url, name, start, 0.02, progress, results))
             for name in ("a", "b")]
    for p in procs:
        p.start()
    began = time.monotonic()
    await asyncio.to_thread(start.wait)
    if kill_after is not None:
        while progress.value < kill_after:
            assert time.monotonic() - began < 30, "the schedulers admitted too little"
            await asyncio.sleep(0.005)
        assert procs[0].pid is not None
        os.kill(procs[0].pid, signal.SIGKILL)
    survivors = 1 if kill_after is not None else 2
    out = dict(await asyncio.to_thread(lambda: [results.get(timeout=60)
                                                for _ in range(survivors)]))
    codes = _join(procs)
    if kill_after is not None:
        assert codes == [-signal.SIGKILL, 0]
    else:
        assert codes == [0, 0]
    return out, time.monotonic() - began


async def test_two_schedulers_admit_each_intent_exactly_once(fleet_store: Store,
                                                             fleet_url: str) -> None:
    out, elapsed = await _run_two_schedulers(fleet_url)

    occ = await fleet_store.occurrence_get(OCCURRENCE)
    keys = await _intent_keys(fleet_store)
    print(f"\ntwo schedulers ({fleet_url.split(':', 1)[0]}): {elapsed:.1f}s, {out}, "
          f"occurrence members={occ and occ.members} admitted={occ and occ.admitted}")
    assert all(t["passes"] > 0 for t in out.values())
    assert len(keys) == AUDIENCE and set(keys) == EXPECTED_KEYS
    assert sum(t["admitted"] for t in out.values()) == AUDIENCE
    assert occ is not None and occ.status == "done"
    assert occ.admitted == AUDIENCE
    # Both schedulers drafted overlapping pages (their pass totals add up to more than
    # the audience); the store counts a page only if it started from the current mark.
    assert occ.members == AUDIENCE
    assert await fleet_store.intent_counts() == {"email": {"enqueued": AUDIENCE}}


async def test_killing_one_scheduler_mid_occurrence_loses_nothing(fleet_store: Store,
                                                                  fleet_url: str) -> None:
    out, elapsed = await _run_two_schedulers(fleet_url, kill_after=AUDIENCE // 4)

    occ = await fleet_store.occurrence_get(OCCURRENCE)
    keys = await _intent_keys(fleet_store)
    print(f"\nkill one scheduler ({fleet_url.split(':', 1)[0]}): {elapsed:.1f}s, "
          f"survivor {out}, occurrence admitted={occ and occ.admitted}")
    assert len(keys) == AUDIENCE
    assert EXPECTED_KEYS - set(keys) == set()
    assert occ is not None and occ.status == "done"
    assert (occ.admitted, occ.members, occ.high_water) == (AUDIENCE, AUDIENCE,
                                                           f"{AUDIENCE - 1:06d}")
    assert await fleet_store.intent_counts() == {"email": {"enqueued": AUDIENCE}}

    # A restarted scheduler finds nothing left to do.
    store, transport = await open_store(fleet_url)
    try:
        again = await Scheduler(store=store, transport=transport, campaigns=[_campaign()],
                                config=SchedulerConfig(page_size=PAGE_SIZE,
                                                       enqueue_in_store=True)).run_pass(now=NOW)
    finally:
        await transport.close()
        await store.close()
    assert again.admitted == 0
    assert len(await _intent_keys(fleet_store)) == AUDIENCE
