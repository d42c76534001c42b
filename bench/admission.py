"""Admission: a campaign of N generated recipients, admitted by scheduler passes.

Measured (in a spawned child, so its peak RSS is the scheduler's own): on a fresh
SQLite file, ``Scheduler.run_pass`` is called until ``result.more`` is false; each pass
pages the audience (default page size), inserts the intents, publishes one message
per intent on the SQL queue and marks the intents enqueued.

Floor (in another child): a raw ``sqlite3`` ``executemany`` of the same intent rows
(the columns and values ``intent_admit`` writes) into the ``intents`` table of a fresh
database made by the same migrations, with the same connection PRAGMAs, 100,000 rows
per transaction. ``ratio`` = floor rate / tidings rate.

A second, informative floor inserts every row admission leaves behind (the intent in
its final ``enqueued`` state, its one ``enqueued`` event, its queue message) the same
raw way: the distance between the two floors is what the schema costs, the distance
from it to tidings is what the code costs.

With ``--transport redis://…`` (a broker; PostgreSQL store) the relay path is measured:
the passes write the intents ``selected`` (the outbox) and return, while the relay loop
(``relay.relay_loop``, as ``tidings scheduler`` runs it beside admission) publishes them
to the broker and marks them ``enqueued``; the time is until the last intent is
``enqueued`` (the passes' own time is reported beside it). The floor then adds to the
COPY of the intents the same N message ids added by plain pipelined ``XADD``
(``relay_throughput.xadd_floor``): floor rate = N / (COPY time + XADD time).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import tidings.admission.scheduler as scheduler_module
from benchlib import (
    Report,
    cpu_seconds,
    fresh_file,
    mean,
    now_s,
    path_of,
    peak_rss_mb,
    per_s,
    rounded,
    run_child,
    source_revision,
    sqlite_url,
)
from pglib import is_pg, migrate, sibling_pg
from profiling import ThreadProfiles, format_profile
from relay_throughput import xadd_floor
from tidings.admission.audience import Audience, GeneratorAudience
from tidings.admission.campaign import Campaign
from tidings.admission.relay import RelayConfig, relay_loop
from tidings.admission.scheduler import admission_shape, occurrence_id
from tidings.config.settings import SchedulerSettings, Settings
from tidings.core.clock import FakeClock
from tidings.core.cron import Schedule
from tidings.core.keys import campaign_key
from tidings.core.model import Recipient
from tidings.runtime import build_runtime
from tidings.stores import queries
from tidings.stores.sqlite import SqliteStore
from tidings.transports.open import is_store_queue, redact_url, split_prefix

T = TypeVar("T")

CAMPAIGN = "bench-digest"
CRON = "0 9 * * *"
TIMEZONE = "UTC"
CHANNEL = "email"
TEMPLATE = "digest"
VERSION = 1
ID_WIDTH = 9  # zero-padded ids: string order is numeric order up to a billion
FLOOR_CHUNK = 100_000

TARGETS = {"rate_per_s_min": 50_000, "ratio_max": 3.0, "peak_rss_mb_max": 200}


def recipient_id(i: int) -> str:
    return f"{i:0{ID_WIDTH}d}"


def address(i: int) -> str:
    return f"r{i}@example.com"


def recipients(n: int) -> Iterator[Recipient]:
    """The audience: ``n`` recipients with ascending zero-padded ids, made on demand."""
    for i in range(n):
        yield Recipient(id=recipient_id(i), email=address(i))


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What both the admission and the floor write: one occurrence, fixed times."""

    n: int
    logical_at: float
    logical_date: str
    now: float
    publish_lease_s: float
    expires_after_s: float

    @classmethod
    def make(cls, n: int) -> Plan:
        due = Schedule(CRON, TIMEZONE).latest(time.time())
        assert due is not None
        return cls(n=n, logical_at=due.logical_at, logical_date=due.logical_date,
                   now=due.logical_at + 1.0, publish_lease_s=SchedulerSettings().relay_lease_s,
                   expires_after_s=24 * 3600.0)

    @property
    def occurrence(self) -> str:
        return occurrence_id(CAMPAIGN, self.logical_date)


# ---------------------------------------------------------------- phase timing


@dataclass
class PhaseTimer:
    """Wall time spent inside wrapped awaitables, per phase."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def wrap(self, phase: str, fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        async def timed(*args: Any, **kwargs: Any) -> T:
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start
                self.calls[phase] = self.calls.get(phase, 0) + 1

        return timed


class TimedAudience:
    """An audience whose pages are timed as the ``audience`` phase."""

    def __init__(self, inner: Audience, timer: PhaseTimer) -> None:
        self._inner = inner
        self._page = timer.wrap("audience", inner.page)

    async def page(self, after: str | None, limit: int) -> list[Recipient]:
        return await self._page(after, limit)

    def describe(self) -> str:
        return self._inner.describe()


# The wrapped calls, by phase. What is left of a pass is the scheduler's own loop:
# drafting each page's rows (channel, recipient id, address, data per member).
_STORE_PHASES = {
    "intent_admit": "insert",
    "intent_mark_enqueued": "mark",
    "occurrence_open": "bookkeeping",
    "occurrence_get": "bookkeeping",
    "occurrence_finish": "bookkeeping",
    "switch_all": "bookkeeping",
}


def _time_attribute(owner: object, name: str, phase: str, timer: PhaseTimer) -> None:
    if hasattr(owner, name):  # a store without such a method simply has no such phase
        setattr(owner, name, timer.wrap(phase, getattr(owner, name)))


def instrument(store: object, transport: object, timer: PhaseTimer) -> None:
    """Time the scheduler's calls by phase: the store's and transport's methods on these
    instances, and the relay functions as the scheduler module imported them."""
    for method, phase in _STORE_PHASES.items():
        _time_attribute(store, method, phase, timer)
    _time_attribute(transport, "publish", "publish.sql", timer)
    _time_attribute(scheduler_module, "publish", "publish", timer)
    _time_attribute(scheduler_module, "relay_pass", "relay_sweep", timer)


# ---------------------------------------------------------------- the measured run


def admission_child(url: str, plan: Plan, profile_top: int, transport: str = "sql") -> Report:
    """Admit the whole campaign; runs in its own process."""
    return asyncio.run(_admit(url, plan, profile_top, transport))


def broker_url(transport: str) -> str:
    """``transport`` under a key prefix of this run's own (deleted afterwards), after the
    URL's own ``prefix`` if it names one."""
    plain, prefix = split_prefix(transport)
    head = f"{prefix}-" if "prefix=" in transport else ""
    return (f"{plain}{'&' if '?' in plain else '?'}"
            f"prefix={head}bench-admission-{uuid.uuid4().hex}")


async def _admit(url: str, plan: Plan, profile_top: int, transport: str = "sql") -> Report:
    timer = PhaseTimer()
    audience = TimedAudience(GeneratorAudience(partial(recipients, plan.n)), timer)
    campaign = Campaign(name=CAMPAIGN, schedule=Schedule(CRON, TIMEZONE), channels=(CHANNEL,),
                        template=TEMPLATE, version=VERSION, audience=audience,
                        expires_after_s=plan.expires_after_s)
    broker = not is_store_queue(transport)
    twin = {"provider": {"kind": "sandbox-twin"}}
    settings = Settings.parse({"store": url, "channels": {CHANNEL: twin},
                               **({"transport": broker_url(transport)} if broker else {})})
    clock = FakeClock(plan.now)
    runtime = await build_runtime(settings, clock=clock, campaigns=[campaign])
    store = runtime.store
    sqlite = isinstance(store, SqliteStore)
    # With a broker the relay runs as a loop of its own beside the passes (as the
    # scheduler service runs it); without one each pass publishes in its transaction.
    scheduler = runtime.scheduler(relay_in_pass=not broker)
    instrument(store, runtime.transport, timer)
    profiles = ThreadProfiles(store.db) if profile_top and isinstance(store, SqliteStore) \
        else None
    loop = asyncio.get_running_loop()

    async def db_thread_cpu() -> float:
        # CPU time of the database's own thread (its executor is private; a benchmark may).
        # PostgreSQL has no such thread here: the server's CPU is another process's.
        if isinstance(store, SqliteStore):
            return await loop.run_in_executor(store.db._executor, time.thread_time)
        return 0.0

    rss_ready = peak_rss_mb()
    if profiles is not None:
        await profiles.start()
    db_cpu0, loop_cpu0, cpu0 = await db_thread_cpu(), time.thread_time(), cpu_seconds()
    passes = admitted = published = members = 0
    relayed = 0
    stopping = asyncio.Event()

    def relay_published(count: int) -> None:
        nonlocal relayed
        relayed += count
        if relayed >= plan.n:
            stopping.set()

    async def no_pauses() -> list[str]:
        return []

    start = now_s()
    relay = asyncio.create_task(relay_loop(
        store, runtime.transport, runtime.relay_config(), clock=clock, stopping=stopping,
        paused_channels=no_pauses, published=relay_published)) if broker else None
    try:
        while True:
            result = await scheduler.run_pass(now=clock.now())
            passes += 1
            admitted += result.admitted
            published += result.published
            members += result.members
            if not result.more:
                break
        admission_s = now_s() - start
        if relay is not None:
            await relay  # until the relay has published every intent
            published += relayed
    finally:
        stopping.set()
        if relay is not None:
            await relay
    elapsed = now_s() - start
    loop_cpu, cpu = time.thread_time() - loop_cpu0, cpu_seconds() - cpu0
    db_cpu = await db_thread_cpu() - db_cpu0
    if profiles is not None:
        await profiles.stop()
    peak = peak_rss_mb()

    counts = await store.intent_counts()
    depth = await runtime.transport.depth(CHANNEL, now=clock.now())
    occurrence = await store.occurrence_get(plan.occurrence)
    drop = getattr(runtime.transport, "drop_all", None)
    if broker and drop is not None:
        await drop()
    await runtime.close()

    measured = sum(s for phase, s in timer.seconds.items() if "." not in phase)
    phases = {phase: {"s": rounded(s), "share": rounded(s / elapsed), "calls": timer.calls[phase]}
              for phase, s in sorted(timer.seconds.items())}
    if measured <= elapsed:
        phases["drafts+loop"] = {"s": rounded(elapsed - measured),
                                 "share": rounded((elapsed - measured) / elapsed),
                                 "calls": passes}
    # else: pages were written side by side (pages_in_flight > 1), so the phases overlap
    # and the rest of the loop cannot be had by subtraction.
    enqueued = counts.get(CHANNEL, {}).get("enqueued", 0)
    return {
        "elapsed_s": elapsed,
        **({"admission_s": rounded(admission_s)} if broker else {}),
        "passes": passes,
        "members": members,
        "admitted": admitted,
        "published": published,
        "peak_rss_mb": rounded(peak, 1),
        "rss_before_admission_mb": rounded(rss_ready, 1),
        "cpu_s": {"process": rounded(cpu), "event_loop_thread": rounded(loop_cpu),
                  **({"sqlite_thread": rounded(db_cpu)} if sqlite else {})},
        "phases": phases,
        "check": {
            "intents": counts,
            "messages_ready": depth.ready,
            "occurrence_status": occurrence.status if occurrence else None,
            "ok": (enqueued == plan.n and sum(sum(c.values()) for c in counts.values()) == plan.n
                   and depth.ready == plan.n and occurrence is not None
                   and occurrence.status == "done"),
        },
        **({"profile": profiles.report(profile_top)} if profiles is not None else {}),
    }


# ---------------------------------------------------------------- the floors

_INTENT_COLUMNS = ("key", "channel", "recipient_id", "address", "template", "data", "campaign",
                   "occurrence", "due_at", "expires_at", "created_at", "updated_at",
                   "selected_at", "publish_lease_until", "state")
_FLOOR_INSERT = (f"INSERT INTO intents ({', '.join(_INTENT_COLUMNS)}) "
                 f"VALUES ({', '.join('?' * len(_INTENT_COLUMNS))})")
_FLOOR_INSERT_ENQUEUED = (f"INSERT INTO intents ({', '.join(_INTENT_COLUMNS)}, enqueued_at) "
                          f"VALUES ({', '.join('?' * (len(_INTENT_COLUMNS) + 1))})")
_FLOOR_EVENT = ("INSERT INTO events (key, channel, type, at, state, attempt) "
                "VALUES (?, ?, ?, ?, ?, ?)")
_FLOOR_MESSAGE = ("INSERT INTO messages (queue, message_id, body, available_at, enqueued_at) "
                  "VALUES (?, ?, ?, ?, ?)")

IntentRow = tuple[str, str, str, str, str, str, str, str, float, float, float, float, float,
                  float | None, str]


def intent_rows(plan: Plan, start: int, stop: int) -> list[IntentRow]:
    """The rows ``intent_admit`` writes for members ``start..stop-1``, column for column."""
    template = f"{TEMPLATE}/v{VERSION}"
    expires_at = plan.logical_at + plan.expires_after_s
    lease = plan.now + plan.publish_lease_s
    return [
        (campaign_key(CAMPAIGN, plan.logical_date, recipient_id(i), CHANNEL, VERSION), CHANNEL,
         recipient_id(i), address(i), template, "{}", CAMPAIGN, plan.occurrence,
         plan.logical_at, expires_at, plan.now, plan.now, plan.now, lease, "selected")
        for i in range(start, stop)
    ]


def open_raw(path: Path) -> sqlite3.Connection:
    """A raw connection with tidings' PRAGMAs and schema (the same migration files)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(queries.load("sqlite")["connect"])
    for migration in queries.migrations("sqlite"):
        conn.execute("BEGIN")
        for statement in queries.split_statements(migration.sql):
            conn.execute(statement)
        conn.execute("COMMIT")
    return conn


def floor_child(url: str, plan: Plan, all_rows: bool) -> Report:
    """Raw inserts of the same rows; only BEGIN..executemany..COMMIT is timed."""
    conn = open_raw(path_of(url))
    timed = built = 0.0
    for start in range(0, plan.n, FLOOR_CHUNK):
        stop = min(plan.n, start + FLOOR_CHUNK)
        t0 = time.perf_counter()
        rows = intent_rows(plan, start, stop)
        if all_rows:
            enqueued = [(*row[:13], None, "enqueued", plan.now) for row in rows]
            events = [(row[0], CHANNEL, "enqueued", plan.now, "enqueued", 0) for row in rows]
            messages = [(CHANNEL, row[0], f'{{"v":1,"key":"{row[0]}"}}', plan.now, plan.now)
                        for row in rows]
        t1 = time.perf_counter()
        conn.execute("BEGIN")
        if all_rows:
            conn.executemany(_FLOOR_INSERT_ENQUEUED, enqueued)
            conn.executemany(_FLOOR_EVENT, events)
            conn.executemany(_FLOOR_MESSAGE, messages)
        else:
            conn.executemany(_FLOOR_INSERT, rows)
        conn.execute("COMMIT")
        t2 = time.perf_counter()
        built += t1 - t0
        timed += t2 - t1
    (count,) = conn.execute("SELECT count(*) FROM intents").fetchone()
    conn.close()
    return {"elapsed_s": timed, "rows_built_s": rounded(built), "intents": count,
            "transactions": -(-plan.n // FLOOR_CHUNK), "peak_rss_mb": rounded(peak_rss_mb(), 1)}


_COPY_INTENTS = f"COPY intents ({', '.join(_INTENT_COLUMNS)}) FROM STDIN"
_COPY_INTENTS_ENQUEUED = f"COPY intents ({', '.join(_INTENT_COLUMNS)}, enqueued_at) FROM STDIN"
_COPY_EVENTS = "COPY events (key, channel, type, at, state, attempt) FROM STDIN"
_COPY_MESSAGES = "COPY messages (queue, message_id, body, available_at, enqueued_at) FROM STDIN"


def pg_floor_child(url: str, plan: Plan, all_rows: bool) -> Report:
    """A plain ``COPY`` of the same rows (psycopg ``cursor.copy``), same table and schema;
    only BEGIN..COPY..COMMIT is timed."""
    import psycopg

    migrate(url)
    timed = built = 0.0
    with psycopg.connect(url) as conn:
        for start in range(0, plan.n, FLOOR_CHUNK):
            stop = min(plan.n, start + FLOOR_CHUNK)
            t0 = time.perf_counter()
            rows: list[Any] = list(intent_rows(plan, start, stop))
            tables = [(_COPY_INTENTS, rows)]
            if all_rows:
                tables = [
                    (_COPY_INTENTS_ENQUEUED,
                     [(*row[:13], None, "enqueued", plan.now) for row in rows]),
                    (_COPY_EVENTS,
                     [(row[0], CHANNEL, "enqueued", plan.now, "enqueued", 0) for row in rows]),
                    (_COPY_MESSAGES, [(CHANNEL, row[0], f'{{"v":1,"key":"{row[0]}"}}', plan.now,
                                       plan.now) for row in rows])]
            t1 = time.perf_counter()
            with conn.transaction(), conn.cursor() as cur:
                for statement, data in tables:
                    with cur.copy(statement) as copy:
                        for row in data:
                            copy.write_row(row)
            t2 = time.perf_counter()
            built += t1 - t0
            timed += t2 - t1
        count_row = conn.execute("SELECT count(*) FROM intents").fetchone()
    return {"elapsed_s": timed, "rows_built_s": rounded(built),
            "intents": count_row[0] if count_row else 0,
            "transactions": -(-plan.n // FLOOR_CHUNK), "peak_rss_mb": rounded(peak_rss_mb(), 1)}


def _floor(store: str | None, folder: Path, name: str, plan: Plan, all_rows: bool) -> Report:
    """The floor on the measured run's kind of store: a fresh file or database."""
    if store is not None and is_pg(store):
        return run_child(pg_floor_child, sibling_pg(store, name), plan, all_rows)
    return run_child(floor_child, sqlite_url(fresh_file(folder / f"{name}.db")), plan, all_rows)


# ---------------------------------------------------------------- orchestration


def run(*, n: int, folder: Path, store: str | None, profile_n: int, profile_top: int,
        all_rows_floor: bool, transport: str = "sql") -> Report:
    """Floor, admission, floor again (the floor is the mean of the two: on a shared
    machine the noise then falls on both sides), then the optional extras."""
    plan = Plan.make(n)
    url = store or sqlite_url(folder / "admission.db")
    broker = not is_store_queue(transport)
    if broker and not is_pg(url):
        raise SystemExit("--transport with a broker needs a PostgreSQL --store")
    floors = [_floor(store, folder, "floor-1", plan, False)]
    floor_prefix = (f"{split_prefix(transport)[1]}-bench" if "prefix=" in transport
                    else "bench-relay")
    xadds = ([asyncio.run(xadd_floor(transport, n, RelayConfig().chunk, prefix=floor_prefix))]
             if broker else [])
    measured = run_child(admission_child, url, plan, 0, transport)
    floors.append(_floor(store, folder, "floor-2", plan, False))
    if broker:
        xadds.append(asyncio.run(xadd_floor(transport, n, RelayConfig().chunk,
                                            prefix=floor_prefix)))
    pg = is_pg(url)
    floor_what = (f"plain COPY (psycopg cursor.copy) of the same intent rows into the same "
                  f"table, fresh database, {FLOOR_CHUNK:,} rows per transaction" if pg else
                  "raw sqlite3 executemany of the same intent rows, same schema and "
                  f"PRAGMAs, {FLOOR_CHUNK:,} rows per transaction")
    rate = per_s(n, measured["elapsed_s"])
    floor_rate = mean([per_s(n, f["elapsed_s"]) for f in floors])
    if broker:
        floor_what += (", then the same message ids added by plain XADD pipelined "
                       f"{RelayConfig().chunk} a round trip (redis: "
                       f"{' and '.join(f'{x:.2f}' for x in xadds)} s); floor rate = "
                       "N / (COPY time + XADD time)")
        floor_rate = per_s(n, mean([f["elapsed_s"] for f in floors]) + mean(xadds))
    report: Report = {
        "benchmark": "admission",
        "n": n,
        "store": url,
        "transport": redact_url(transport),
        "tidings": source_revision(),
        "page_size": SchedulerSettings().page_size or admission_shape(pg).page_size,
        "pages_in_flight": (SchedulerSettings().pages_in_flight
                            or admission_shape(pg).pages_in_flight),
        "max_pages": SchedulerSettings().max_pages or admission_shape(pg).max_pages,
        "rate_per_s": round(rate),
        "floor_rate_per_s": round(floor_rate),
        "ratio": rounded(floor_rate / rate, 2),
        "peak_rss_mb": measured.pop("peak_rss_mb"),
        "elapsed_s": rounded(measured.pop("elapsed_s")),
        "floor": {"what": f"{floor_what}; mean rate of a run before and a run after the "
                          "measured one",
                  "elapsed_s": [rounded(f["elapsed_s"]) for f in floors],
                  "rows_built_s": floors[0]["rows_built_s"],
                  "transactions": floors[0]["transactions"],
                  "intents": floors[0]["intents"]},
        **measured,
        "targets": TARGETS,
    }
    if all_rows_floor:
        full = _floor(store, folder, "floor-all", plan, True)
        full_rate = per_s(n, full["elapsed_s"])
        report["floor_all_rows"] = {
            "what": f"raw {'COPY' if pg else 'executemany'} of every row admission leaves: "
                    "the intent (enqueued), "
                    "its enqueued event, its queue message",
            "rate_per_s": round(full_rate), "ratio": rounded(full_rate / rate, 2),
            "elapsed_s": rounded(full["elapsed_s"])}
    if profile_n and not pg:
        pn = min(n, profile_n)
        profiled = run_child(admission_child, sqlite_url(fresh_file(folder / "profiled.db")),
                             Plan.make(pn), profile_top)
        report["profile"] = {
            "n": pn, "note": "a separate run under cProfile (slower); self time per thread",
            "elapsed_s": rounded(profiled["elapsed_s"]), "cpu_s": profiled["cpu_s"],
            **profiled["profile"]}
    return report


def summary(report: Report) -> str:
    lines = [
        f"admission of {report['n']:,} recipients, page size {report['page_size']:,} "
        f"({report['pages_in_flight']} in flight), {report['passes']} passes, "
        f"store {report['store']}",
        f"  tidings at {report['tidings'].get('commit', '?')}"
        f"{' (src modified)' if report['tidings'].get('src_dirty') else ''}, "
        f"{report['tidings']['package']}",
        f"  tidings : {report['rate_per_s']:>10,} intents/s  ({report['elapsed_s']:.2f} s"
        + (f" to enqueued on {report['transport']}; the passes {report['admission_s']:.2f} s)"
           if "admission_s" in report else ")"),
        f"  floor   : {report['floor_rate_per_s']:>10,} intents/s  "
        f"({' and '.join(f'{s:.2f}' for s in report['floor']['elapsed_s'])} s before and "
        f"after: raw {'COPY' if is_pg(report['store']) else 'executemany'} of the same rows"
        + (" + plain XADD of their ids)" if "admission_s" in report else ")"),
        f"  ratio   : {report['ratio']:.2f}  (floor / tidings; target <= "
        f"{TARGETS['ratio_max']})",
    ]
    if "floor_all_rows" in report:
        full = report["floor_all_rows"]
        lines.append(f"  all-rows floor: {full['rate_per_s']:,} intents/s, ratio "
                     f"{full['ratio']:.2f} (intent + event + message, raw)")
    lines.append(f"  peak RSS: {report['peak_rss_mb']:.1f} MB (scheduler process; "
                 f"{report['rss_before_admission_mb']:.1f} MB before admitting)")
    cpu = report["cpu_s"]
    lines.append(f"  CPU     : {cpu['process']:.2f} s process = event loop "
                 f"{cpu['event_loop_thread']:.2f} s"
                 + (f" + SQLite thread {cpu['sqlite_thread']:.2f} s" if "sqlite_thread" in cpu
                    else " (the PostgreSQL server's CPU is not counted)") + " (+ others)")
    lines.append("  phases (wall time inside each call, share of the run; pages written "
                 "side by side overlap, so shares may sum past 100%):")
    for phase, data in report["phases"].items():
        lines.append(f"    {phase:<14} {data['s']:8.2f} s  {data['share']:6.1%}  "
                     f"{data['calls']:>6} calls")
    check = report["check"]
    lines.append(f"  check   : {'ok' if check['ok'] else 'FAILED'}: intents {check['intents']}, "
                 f"messages ready {check['messages_ready']:,}, occurrence "
                 f"{check['occurrence_status']}")
    if "profile" in report:
        profile = report["profile"]
        lines.append(f"  profile of a separate run of {profile['n']:,} (cProfile, "
                     f"{profile['elapsed_s']:.2f} s):")
        lines.append(format_profile(profile))
    return "\n".join(lines)
