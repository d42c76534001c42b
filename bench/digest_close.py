"""Closing digest windows: the call that fills a window, and closers sharing due windows.

    python bench/digest_close.py [--due 1000] [--fills 50] [--closers 3]
                                 [--pg URL | --no-pg] [--json]

Two measures per store (SQLite on a file in a fresh temporary folder; PostgreSQL in
throw-away databases ``<db>_fill`` and ``<db>_close``, dropped and re-created by each
run), every run in a spawned process of its own, on a ``FakeClock`` so a window is due
when the bench says so:

- **fill**: ``--due`` windows of other keys are due (their time is up, no closer ran).
  ``--fills`` times, a ``notify(digest=)`` adds a first item to a fresh key
  (``max_items=2``: the *add*, which closes nothing) and a second one (the *filling*
  call, which admits its window at once). Before each filling call the due windows are
  topped up to ``--due`` again (``topped_up`` says how many had to be added: a filling
  call that closed them all makes ``fills x due``). Reported: p50 / p99 / max of each
  kind of call, and ``ratio`` = filling p99 / add p99 (the add is the floor: the same
  call, same store, same moment, without the close). Target: filling p99 < 50 ms.
- **close**: ``--due`` windows due; one process runs ``close_digests()`` until it
  closes nothing, then (``--due`` fresh windows) ``--closers`` processes started on one
  barrier do the same at once. Reported: each run's wall time (from the barrier to the
  last window closed; ``returned_s``: to the last process's return, after its pass
  that found nothing left), CPU seconds and windows closed per process, and ``ratio`` =
  concurrent wall / one-closer wall. Target: ratio <= 1. Checked: every window closed,
  one intent per window, none twice.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import (
    SPAWN,
    Report,
    cpu_seconds,
    emit,
    now_s,
    rounded,
    run_child,
    source_revision,
    sqlite_url,
)

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/tidings_bench_digests"
T0 = 1_800_000_000.0
WINDOW_S = 60.0
DUE_AT = T0 + WINDOW_S + 1
#: The channel on the in-process sandbox (no worker runs: nothing is sent).
TWIN = {"provider": {"kind": "sandbox-twin"}}


async def _runtime(store: str, now: float) -> Any:
    from tidings.config.settings import Settings
    from tidings.core.clock import FakeClock
    from tidings.runtime import build_runtime

    return await build_runtime(Settings.parse({"store": store, "channels": {"email": TWIN}}),
                               clock=FakeClock(now))


def _recipient(n: int | str) -> dict[str, str]:
    return {"id": f"c{n}", "email": f"c{n}@example.com"}


async def _seed(rt: Any, prefix: str, start: int, count: int) -> None:
    """``count`` windows of one item each, opened at T0 (due from DUE_AT on)."""
    from tidings.admission.digests import item_draft
    from tidings.admission.intake import NotifyRequest
    from tidings.core.digest import Digest

    for n in range(start, start + count):
        request = NotifyRequest(key=f"{prefix}-{n}", recipient=_recipient(n),
                                channels=["email"], template="digest", data={"n": n})
        draft = item_draft(request, Digest(key=f"{prefix}:{n}", window_s=WINDOW_S),
                           known_channels=rt.channel_kinds, now=T0)
        await rt.store.digest_add(draft, now=T0)


def _quantiles(values: list[float]) -> Report:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": rounded(1000 * statistics.median(ordered), 2),
            "p99_ms": rounded(1000 * p99, 2), "max_ms": rounded(1000 * ordered[-1], 2)}


def measure_fill(store: str, due: int, fills: int) -> Report:
    """In a child: ``fills`` filling calls with ``due`` other windows due."""
    return asyncio.run(_measure_fill(store, due, fills))


async def _measure_fill(store: str, due: int, fills: int) -> Report:
    from tidings.core.digest import Digest, digest_intent_key

    rt = await _runtime(store, DUE_AT)
    seeded, adds, filling, windows = 0, [], [], []
    try:
        for k in range(fills):
            waiting = len(await rt.store.digest_due(now=DUE_AT, limit=2 * due))
            if waiting < due:
                await _seed(rt, "other", seeded, due - waiting)
                seeded += due - waiting
            digest = Digest(key=f"fill:{k}", window_s=600, max_items=2)
            for n, times in ((0, adds), (1, filling)):
                started = time.perf_counter()
                answer = await rt.notify(key=f"fill-{k}-{n}", recipient=_recipient(f"f{k}"),
                                         channels=["email"], template="digest",
                                         data={"n": n}, digest=digest)
                times.append(time.perf_counter() - started)
            assert answer.sealed and answer.items == 2
            windows.append(answer.window_id)
        fills_admitted = sum([
            await rt.store.intent_get(digest_intent_key(wid, "email")) is not None
            for wid in windows])
    finally:
        await rt.close()
    return {"add": _quantiles(adds), "filling": _quantiles(filling),
            "topped_up": seeded - due, "fills_admitted": fills_admitted,
            "ratio": rounded(_quantiles(filling)["p99_ms"] / _quantiles(adds)["p99_ms"], 2)}


def seed_close(store: str, prefix: str, due: int) -> Report:
    """In a child: ``due`` windows due under ``prefix``."""
    async def go() -> Report:
        rt = await _runtime(store, DUE_AT)
        try:
            await _seed(rt, prefix, 0, due)
        finally:
            await rt.close()
        return {}
    return asyncio.run(go())


def _closer(store: str, start: Any, results: Any) -> None:
    """A child: close digests until a pass closes nothing; its times through ``results``."""
    async def go() -> Report:
        rt = await _runtime(store, DUE_AT)
        try:
            await asyncio.to_thread(start.wait)
            began, cpu = now_s(), cpu_seconds()
            windows = passes = 0
            last = began  # when this closer finished its last window
            while True:
                closed = await rt.close_digests()
                passes += 1
                windows += closed.windows
                if not closed.windows:
                    break
                last = now_s()
            return {"began": began, "last": last, "ended": now_s(),
                    "cpu_s": cpu_seconds() - cpu, "windows": windows, "passes": passes}
        finally:
            await rt.close()

    try:
        results.put(asyncio.run(go()))
    except BaseException as exc:  # said in the report, not lost in a child's stderr
        results.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


def run_closers(store: str, closers: int) -> Report:
    start, results = SPAWN.Barrier(closers), SPAWN.Queue()
    procs = [SPAWN.Process(target=_closer, args=(store, start, results))
             for _ in range(closers)]
    for proc in procs:
        proc.start()
    got = [results.get(timeout=900) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    errors = [r["error"] for r in got if "error" in r]
    if errors:
        raise RuntimeError(f"a closer failed: {errors}")
    # Done when the last window is: a closer may return later (it found nothing left
    # only after waiting for the store), which delays no digest.
    wall = max(r["last"] for r in got) - min(r["began"] for r in got)
    returned = max(r["ended"] for r in got) - min(r["began"] for r in got)
    return {"closers": closers, "wall_s": rounded(wall), "returned_s": rounded(returned),
            "cpu_s": [rounded(r["cpu_s"], 2) for r in got],
            "windows": [r["windows"] for r in got], "passes": [r["passes"] for r in got]}


def check_close(store: str) -> Report:
    """In a child: windows still pending and the digests' intents."""
    async def go() -> Report:
        rt = await _runtime(store, DUE_AT)
        try:
            pending = await rt.store.digest_pending()
            counts = await rt.store.intent_counts()
        finally:
            await rt.close()
        return {"pending": pending.windows, "intents": sum(counts.get("email", {}).values())}
    return asyncio.run(go())


def run_store(kind: str, base: str | None, due: int, fills: int, closers: int) -> Report:
    with tempfile.TemporaryDirectory(prefix="tidings-bench-digests-") as folder:
        def url(name: str) -> str:
            if kind == "sqlite":
                return sqlite_url(Path(folder) / f"{name}.db")
            from pglib import sibling_pg

            return sibling_pg(str(base), name)

        fill = run_child(measure_fill, url("fill"), due, fills)
        close_url = url("close")
        run_child(seed_close, close_url, "one", due)
        one = run_closers(close_url, 1)
        run_child(seed_close, close_url, "many", due)
        many = run_closers(close_url, closers)
        check = run_child(check_close, close_url)
    problems = []
    if fill["fills_admitted"] < fills:
        problems.append(f"fill: {fill['fills_admitted']} of {fills} filled windows admitted")
    if check["pending"] or check["intents"] != 2 * due:
        problems.append(f"close: {check['pending']} windows pending, {check['intents']} "
                        f"intents for {2 * due} windows")
    if sum(one["windows"]) != due or sum(many["windows"]) != due:
        problems.append(f"close: windows closed {one['windows']} / {many['windows']}")
    return {"store": kind, "fill": fill, "one": one, "many": many, "problems": problems,
            "close_ratio": rounded(many["wall_s"] / one["wall_s"], 2)}


def summary(report: Report) -> str:
    lines = [f"digest windows: {report['due']} due; {report['fills']} filling calls; "
             f"1 closer vs {report['closers']} at once"]
    for r in report["stores"]:
        fill, one, many = r["fill"], r["one"], r["many"]
        lines += [
            f"  {r['store']:<8} add      p50 {fill['add']['p50_ms']:>8.2f} ms  "
            f"p99 {fill['add']['p99_ms']:>8.2f} ms  max {fill['add']['max_ms']:>8.2f} ms",
            f"  {'':<8} filling  p50 {fill['filling']['p50_ms']:>8.2f} ms  "
            f"p99 {fill['filling']['p99_ms']:>8.2f} ms  max {fill['filling']['max_ms']:>8.2f} ms"
            f"   ratio (filling p99 / add p99) {fill['ratio']:.2f}   topped up "
            f"{fill['topped_up']}",
            f"  {'':<8} close    1 closer {one['wall_s']:.2f} s (cpu {one['cpu_s']})   "
            f"{many['closers']} closers {many['wall_s']:.2f} s (returned "
            f"{many['returned_s']:.2f} s, cpu {many['cpu_s']}, "
            f"windows {many['windows']})   ratio ({many['closers']} / 1) "
            f"{r['close_ratio']:.2f}"
            + (f"   PROBLEMS: {r['problems']}" if r["problems"] else "")]
    for skipped in report["skipped"]:
        lines.append(f"  skipped: {skipped}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--due", type=int, default=1000, help="windows due")
    parser.add_argument("--fills", type=int, default=50, help="filling calls timed")
    parser.add_argument("--closers", type=int, default=3, help="closers at once")
    parser.add_argument("--pg", default=DEFAULT_PG,
                        help="a PostgreSQL URL whose server may hold throw-away databases")
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    stores: list[Report] = []
    skipped: list[str] = []
    if not args.no_sqlite:
        stores.append(run_store("sqlite", None, args.due, args.fills, args.closers))
    if not args.no_pg:
        try:
            stores.append(run_store("postgres", args.pg, args.due, args.fills, args.closers))
        except SystemExit as exc:  # pglib's refusal: no server, say so and go on
            skipped.append(f"postgres: {exc}")
    report = {"due": args.due, "fills": args.fills, "closers": args.closers,
              "stores": stores, "skipped": skipped, "tidings": source_revision()}
    emit(report, as_json=args.json, summary=summary)
    return 1 if any(s["problems"] for s in stores) else 0


if __name__ == "__main__":
    sys.exit(main())
