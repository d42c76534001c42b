"""``notify`` inside a SQLAlchemy session's transaction against the same call on a raw
psycopg connection: what the SQLAlchemy door costs per call, async and sync.

    python bench/transactional_notify.py [--n 2000] [--rounds 20] [--variants async,sync]
        [--pg URL] [--json]

Each variant runs in a spawned process on a throw-away PostgreSQL database of its own
(``<db>_async``, ``<db>_sync`` beside ``--pg``, re-created each run), with one
``orders`` table the bench creates. Each call is its own transaction on both sides, the
same work: begin, insert an order row, notify one email intent, commit.

- *async*: raw = ``INSERT`` on one ``psycopg.AsyncConnection``, ``Runtime.notify(...,
  connection=conn)``, ``conn.commit()``; sqlalchemy = a session from an
  ``async_sessionmaker`` over a ``postgresql+psycopg://`` engine, ``session.begin()``,
  the same ``INSERT`` as a Core statement, ``await tidings.contrib.sqlalchemy.notify(
  session, runtime, ...)``, commit on leaving the block.
- *sync*: the same with a ``psycopg.Connection`` and ``tidings.Client.notify(...,
  connection=conn)``, against a sync ``Session`` and ``tidings.contrib.sqlalchemy.notify(
  session, client, ...)`` (the join runs in the calling thread).

Each engine has a pool of one connection. Each side has a *floor* beside it: the same
transaction with no notify in it, so what notify adds on each side (side minus floor)
is told apart from what SQLAlchemy's own session and transaction cost.

The calls are made one after another, interleaved in ``--rounds`` rounds of N/rounds
calls a side (the order of the sides reverses every round) so that drift of this
shared machine's load falls on all of them; each side is warmed up first, outside the
clock. Printed: µs per call of each side (wall, the bench process's CPU, the
PostgreSQL backend's CPU read from /proc when the server is local) and ``ratio`` =
sqlalchemy / raw per-call wall time (target: at most 1.3), with the same ratio of the
bench's CPU and of the floors. Checked apart, on a second connection: each side's
orders, and the notifying sides' intents (all ``enqueued``) and queue messages, number
its calls.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

from benchlib import Report, emit, rounded, run_child, source_revision
from pglib import sibling_pg

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/tidings_bench_txnotify"
WARMUP = 50
# The measured sides, then their floors: the same transaction with no notify in it.
SIDES = ("raw", "sqlalchemy", "raw_floor", "sqlalchemy_floor")
# Each side's order ids start at its own base, so the witness counts them apart.
ID_BASE = {name: n * 10_000_000 for n, name in enumerate(SIDES)}


def round_sizes(n: int, rounds: int) -> list[int]:
    """N calls split into ``rounds`` rounds as evenly as whole calls allow."""
    if n < 1 or rounds < 1:
        raise ValueError("n and rounds must be at least 1")
    rounds = min(rounds, n)
    return [n // rounds + (1 if r < n % rounds else 0) for r in range(rounds)]


def order_of(round_no: int, sides: tuple[str, ...] = SIDES) -> tuple[str, ...]:
    """Which side goes first alternates from round to round."""
    return sides if round_no % 2 == 0 else tuple(reversed(sides))


def backend_cpu_s(pid: int) -> float | None:
    """CPU seconds of PostgreSQL backend ``pid`` so far (None: not readable here)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Side:
    """One side's calls, and the clocks they ran under (``call`` is a coroutine function
    for ``run``, a plain one for ``run_blocking``)."""

    def __init__(self, name: str, call: Callable[[int], Any], backend: int,
                 first_id: int) -> None:
        self.name = name
        self.call = call
        self.backend = backend
        self.next_id = first_id
        self.calls = 0
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.pg_cpu_s: float | None = 0.0
        self.rounds_us: list[float] = []

    async def run(self, count: int, *, timed: bool = True) -> None:
        before = self._clocks()
        for _ in range(count):
            await self.call(self.next_id)
            self.next_id += 1
        self._account(count, before, timed)

    def run_blocking(self, count: int, *, timed: bool = True) -> None:
        before = self._clocks()
        for _ in range(count):
            self.call(self.next_id)
            self.next_id += 1
        self._account(count, before, timed)

    def _clocks(self) -> tuple[float, float, float | None]:
        return time.perf_counter(), process_cpu_s(), backend_cpu_s(self.backend)

    def _account(self, count: int, before: tuple[float, float, float | None],
                 timed: bool) -> None:
        wall, cpu, pg = self._clocks()
        if not timed:
            return
        self.calls += count
        self.wall_s += wall - before[0]
        self.cpu_s += cpu - before[1]
        if self.pg_cpu_s is not None and pg is not None and before[2] is not None:
            self.pg_cpu_s += pg - before[2]
        else:
            self.pg_cpu_s = None
        self.rounds_us.append((wall - before[0]) / count * 1e6)

    def report(self) -> Report:
        per = 1e6 / self.calls
        return {"calls": self.calls, "wall_us": rounded(self.wall_s * per, 1),
                "cpu_us": rounded(self.cpu_s * per, 1),
                "pg_cpu_us": None if self.pg_cpu_s is None else rounded(self.pg_cpu_s * per, 1),
                "rounds_us": [rounded(u, 1) for u in self.rounds_us]}


def orders_table() -> Any:
    from sqlalchemy import Column, Integer, MetaData, Table

    return Table("orders", MetaData(), Column("id", Integer, primary_key=True),
                 Column("customer_id", Integer, nullable=False))


def sa_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def recipient(i: int) -> dict[str, str]:
    return {"id": f"c{i:08d}", "email": f"c{i:08d}@example.com"}


INSERT = "INSERT INTO orders (id, customer_id) VALUES (%s, %s)"


async def _measure_async(url: str, n: int, rounds: int) -> Report:
    import psycopg
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

    from tidings import Settings, build_runtime
    from tidings.contrib import sqlalchemy as tsa

    orders = orders_table()
    engine = create_async_engine(sa_url(url), pool_size=1, max_overflow=0)
    async with engine.begin() as ddl:
        await ddl.run_sync(orders.metadata.create_all)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    runtime = await build_runtime(Settings.parse({"store": url, "channels": {"email": {}}}))
    conn = await psycopg.AsyncConnection.connect(url)
    try:
        async def raw(i: int, *, notify: bool = True) -> None:
            await conn.execute(INSERT, (i, 73))
            if notify:
                await runtime.notify(key=f"raw-{i:08d}", recipient=recipient(i),
                                     channels=["email"], template="receipt", connection=conn)
            await conn.commit()

        async def orm(i: int, *, notify: bool = True) -> None:
            session: AsyncSession
            async with sessions() as session, session.begin():
                await session.execute(orders.insert().values(id=i, customer_id=73))
                if notify:
                    await tsa.notify(session, runtime, key=f"sa-{i:08d}",
                                     recipient=recipient(i), channels=["email"],
                                     template="receipt")

        async def raw_floor(i: int) -> None:
            await raw(i, notify=False)

        async def orm_floor(i: int) -> None:
            await orm(i, notify=False)

        async with engine.connect() as probe:
            driver = (await probe.get_raw_connection()).driver_connection
            assert isinstance(driver, psycopg.AsyncConnection)
            sa_backend = driver.info.backend_pid
        raw_backend = conn.info.backend_pid
        sides = make_sides({"raw": (raw, raw_backend), "sqlalchemy": (orm, sa_backend),
                            "raw_floor": (raw_floor, raw_backend),
                            "sqlalchemy_floor": (orm_floor, sa_backend)})
        for side in sides.values():
            await side.run(WARMUP, timed=False)
        for r, size in enumerate(round_sizes(n, rounds)):
            for name in order_of(r):
                await sides[name].run(size)
    finally:
        await conn.close()
        await runtime.close()
        await engine.dispose()
    return {name: side.report() for name, side in sides.items()}


def _measure_sync(url: str, n: int, rounds: int) -> Report:
    import psycopg
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session, sessionmaker

    from tidings import Client, Settings
    from tidings.contrib import sqlalchemy as tsa

    orders = orders_table()
    engine = create_engine(sa_url(url), pool_size=1, max_overflow=0)
    with engine.begin() as ddl:
        orders.metadata.create_all(ddl)
    sessions = sessionmaker(engine, expire_on_commit=False)
    client = Client(Settings.parse({"store": url, "channels": {"email": {}}}))
    conn = psycopg.connect(url)
    try:
        def raw(i: int, *, notify: bool = True) -> None:
            conn.execute(INSERT, (i, 73))
            if notify:
                client.notify(key=f"raw-{i:08d}", recipient=recipient(i), channels=["email"],
                              template="receipt", connection=conn)
            conn.commit()

        def orm(i: int, *, notify: bool = True) -> None:
            session: Session
            with sessions() as session, session.begin():
                session.execute(orders.insert().values(id=i, customer_id=73))
                if notify:
                    tsa.notify(session, client, key=f"sa-{i:08d}", recipient=recipient(i),
                               channels=["email"], template="receipt")

        def raw_floor(i: int) -> None:
            raw(i, notify=False)

        def orm_floor(i: int) -> None:
            orm(i, notify=False)

        with engine.connect() as probe:
            driver = probe.connection.driver_connection
            assert isinstance(driver, psycopg.Connection)
            sa_backend = driver.info.backend_pid
        raw_backend = conn.info.backend_pid
        sides = make_sides({"raw": (raw, raw_backend), "sqlalchemy": (orm, sa_backend),
                            "raw_floor": (raw_floor, raw_backend),
                            "sqlalchemy_floor": (orm_floor, sa_backend)})
        for side in sides.values():
            side.run_blocking(WARMUP, timed=False)
        for r, size in enumerate(round_sizes(n, rounds)):
            for name in order_of(r):
                sides[name].run_blocking(size)
    finally:
        conn.close()
        client.close()
        engine.dispose()
    return {name: side.report() for name, side in sides.items()}


def make_sides(calls: dict[str, tuple[Callable[[int], Any], int]]) -> dict[str, Side]:
    return {name: Side(name, call, backend, ID_BASE[name])
            for name, (call, backend) in calls.items()}


def witness(url: str, made: int) -> Report:
    """What each side wrote, counted on a connection of its own: every side's orders,
    the notifying sides' intents (all ``enqueued``) and queue messages."""
    import psycopg

    counted: dict[str, int] = {}
    with psycopg.connect(url) as conn:
        def one(sql: str, params: Any) -> int:
            row = conn.execute(sql, params).fetchone()
            return int(row[0]) if row else 0

        for name, base in ID_BASE.items():
            counted[f"{name}_orders"] = one(
                "SELECT count(*) FROM orders WHERE id >= %s AND id < %s",
                (base, base + 10_000_000))
        for name, prefix in (("raw", "raw-%"), ("sqlalchemy", "sa-%")):
            counted[f"{name}_intents"] = one(
                "SELECT count(*) FROM intents WHERE key LIKE %s AND state = 'enqueued'",
                (prefix,))
            counted[f"{name}_messages"] = one(
                "SELECT count(*) FROM messages WHERE message_id LIKE %s", (prefix,))
        counted["intents"] = one("SELECT count(*) FROM intents", ())
    expected = {**{k: made for k in counted}, "intents": 2 * made}
    problems = [f"{k} {counted[k]} (expected {v})" for k, v in expected.items()
                if counted[k] != v]
    return {"counts": counted, "problems": problems}


def measure(variant: str, url: str, n: int, rounds: int) -> Report:
    """One variant's whole run, in the spawned child."""
    if variant == "async":
        sides = asyncio.run(_measure_async(url, n, rounds))
    else:
        sides = _measure_sync(url, n, rounds)
    return {**sides, **witness(url, WARMUP + n)}


VARIANTS = ("async", "sync")
LABELS = {"async": {"raw": "raw psycopg AsyncConnection", "sqlalchemy": "SQLAlchemy AsyncSession"},
          "sync": {"raw": "raw psycopg Connection", "sqlalchemy": "SQLAlchemy Session"}}


def figures(sides: Report) -> Report:
    """The ratios of one run's sides: the whole call, the transaction alone (the
    floors), and what notify added to each (side minus its floor)."""
    def wall(name: str) -> float:
        return float(sides[name]["wall_us"])

    def cpu(name: str) -> float:
        return float(sides[name]["cpu_us"])

    added = {name: {"wall_us": rounded(wall(name) - wall(f"{name}_floor"), 1),
                    "cpu_us": rounded(cpu(name) - cpu(f"{name}_floor"), 1)}
             for name in ("raw", "sqlalchemy")}
    return {
        "ratio": rounded(wall("sqlalchemy") / wall("raw"), 3),
        "round_ratios": [rounded(a / b, 3) for a, b in zip(
            sides["sqlalchemy"]["rounds_us"], sides["raw"]["rounds_us"], strict=True)],
        "floor_ratio": rounded(wall("sqlalchemy_floor") / wall("raw_floor"), 3),
        "cpu_ratio": rounded(cpu("sqlalchemy") / cpu("raw"), 3),
        "notify_added": added,
    }


def summary(report: Report) -> str:
    def pg(side: Report) -> str:
        return "n/a" if side["pg_cpu_us"] is None else f"{side['pg_cpu_us']:,.0f}"

    lines = [f"{report['n']} calls a side in {report['rounds']} interleaved rounds on "
             "PostgreSQL, each its own transaction (insert an order, notify, commit)"]
    for variant in report["variants"]:
        run = report[variant]
        labels = {**LABELS[variant], "raw_floor": "  its floor (no notify)",
                  "sqlalchemy_floor": "  its floor (no notify)"}
        door = "the Runtime" if variant == "async" else "a tidings.Client"
        lines.append(f"  {f'{variant}, with {door}':<32}µs/call  bench CPU µs  PostgreSQL CPU µs")
        for name in SIDES:
            side = run[name]
            lines.append(f"    {labels[name]:<28} {side['wall_us']:>8,.0f}  "
                         f"{side['cpu_us']:>12,.0f}  {pg(side):>17}")
        added = run["notify_added"]
        lines += [f"    notify added (side - floor): raw {added['raw']['wall_us']:,.0f} µs "
                  f"({added['raw']['cpu_us']:,.0f} CPU), SQLAlchemy "
                  f"{added['sqlalchemy']['wall_us']:,.0f} µs "
                  f"({added['sqlalchemy']['cpu_us']:,.0f} CPU)",
                  f"    ratio {run['ratio']:.2f} (sqlalchemy / raw, target <= 1.3; rounds "
                  f"{min(run['round_ratios']):.2f}-{max(run['round_ratios']):.2f}), "
                  f"bench CPU {run['cpu_ratio']:.2f}, floors {run['floor_ratio']:.2f}"]
        if run["problems"]:
            lines.append(f"    PROBLEMS: {run['problems']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="calls a side")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated: async (AsyncSession and the Runtime), "
                             "sync (Session and a tidings.Client)")
    parser.add_argument("--pg", default=DEFAULT_PG,
                        help="a PostgreSQL URL whose server may hold throw-away databases")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1:
        parser.error("--n and --rounds must be at least 1")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants or any(v not in VARIANTS for v in variants):
        parser.error(f"--variants: a comma-separated list of {', '.join(VARIANTS)}")
    report: Report = {"n": args.n, "rounds": min(args.rounds, args.n), "variants": variants}
    for variant in variants:
        result = run_child(measure, variant, sibling_pg(args.pg, variant), args.n,
                           args.rounds)
        report[variant] = {**result, **figures(result)}
    report["revision"] = source_revision()
    emit(report, as_json=args.json, summary=summary)
    return 1 if any(report[v]["problems"] for v in variants) else 0


if __name__ == "__main__":
    sys.exit(main())
