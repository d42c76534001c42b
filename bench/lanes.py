"""Priority under load: ``notify`` calls while a bulk backlog drains at the channel's quota.

    python bench/lanes.py [--store URL] [--backlog 80000] [--quota 200] [--workers 4]
        [--calls 200] [--over-s 60] [--lanes transactional,bulk] [--json] [--out REPORT]

All real processes: the sandbox HTTP provider in a process of its own
(``tests/support/arrivals_sandbox.py``: channel ``email`` at ``--quota`` requests per
second, dedupe off, noting every send's arrival time and key), ``--workers`` ``tidings
worker`` processes, and this script. The store is a throw-away PostgreSQL database
beside ``--store`` (or a SQLite file with ``--store sqlite``).

1. ``--backlog`` intents are admitted in the ``bulk`` lane (``notify_many(lane="bulk")``,
   pages of 1,000) before any worker starts.
2. The workers start; once the sandbox has seen the first bulk sends, ``--calls``
   ``notify`` calls (the ``transactional`` lane by default) are made one at a time at
   random moments over ``--over-s`` seconds, each one's return time noted.
3. Once every call's key has arrived (or 30 s after the last call), everything stops.

Printed, from the sandbox's arrivals (the witness): each call's latency from its
``notify`` returning to its first byte at the provider (p50, p99, max; target p99
under 1 s), the bulk rate while the calls were being made against what the quota left
it (``bulk_use`` = bulk per second ÷ (pacer target − transactional per second); target
at least 0.97), and the one-second windows (sliding, from every arrival) that held more
than the quota (target 0).

``--lanes all`` runs the same with one lane (first-in, first-out): every call waits
behind the whole backlog, so give it a small ``--backlog`` (2,000 at 200/s: 10 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchlib import Report, emit, quantile, rounded, source_revision

ROOT = Path(__file__).resolve().parents[1]
SANDBOX = ROOT / "tests" / "support" / "arrivals_sandbox.py"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/tidings_bench"
QUOTA_SAFETY = 0.98  # channels.<name>.quota_safety's default: what the pacer aims at


def configure(folder: Path, store: str, sandbox_url: str, args: argparse.Namespace) -> Path:
    lanes = ", ".join(f'"{name}"' for name in args.lanes.split(","))
    config = folder / "tidings.toml"
    config.write_text(f'''
store = "{store}"
[worker]
reconcile_every_s = 1.0
[channels.email]
quota = "{args.quota}/s"
lanes = [{lanes}]
provider = {{ kind = "sandbox", url = "{sandbox_url}" }}
''')
    migrated = subprocess.run([sys.executable, "-m", "tidings", "db", "migrate", "--config",
                               str(config)], capture_output=True, text=True, check=False)
    if migrated.returncode != 0:
        raise RuntimeError(f"tidings db migrate failed: {migrated.stderr.strip()[-2000:]}")
    return config


def bench_store(given: str, folder: Path, name: str) -> str:
    """A SQLite file in ``folder`` (``given`` is 'sqlite'), else a fresh PostgreSQL
    database ``<db>_<name>`` beside ``given``."""
    if given == "sqlite":
        return f"sqlite:///{folder / (name + '.db')}"
    from pglib import sibling_pg

    return sibling_pg(given, name)


def start_sandbox(folder: Path, quota: int) -> tuple[subprocess.Popen[bytes], int]:
    """The sandbox in a process of its own, and the port it serves on."""
    with (folder / "sandbox.log").open("ab") as log:
        sandbox = subprocess.Popen(
            [sys.executable, str(SANDBOX), "127.0.0.1", str(quota),
             str(folder / "arrivals.json"), str(folder / "keys.json")],
            stdout=subprocess.PIPE, stderr=log)
    assert sandbox.stdout is not None
    return sandbox, int(sandbox.stdout.readline().decode().strip())


def start_worker(folder: Path, config: Path, n: int) -> subprocess.Popen[bytes]:
    with (folder / f"worker{n}.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tidings", "worker", "--channel", "email", "--config",
             str(config)], stdout=subprocess.DEVNULL, stderr=log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def stop(workers: list[subprocess.Popen[bytes]], sandbox: subprocess.Popen[bytes]) -> None:
    """The workers stopped (SIGTERM, then SIGKILL after 30 s), then the sandbox, which
    writes its arrivals as it exits."""
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    sandbox.send_signal(signal.SIGTERM)
    sandbox.wait(30)


def finish(args: argparse.Namespace, run: Callable[[argparse.Namespace, Path],
                                                   Awaitable[Report]],
           summary: Callable[[Report], str], prefix: str) -> None:
    """Run in a folder of its own, write ``--out`` if asked, print the report."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    emit(result, as_json=args.json, summary=summary)


def recipient(key: str) -> dict[str, str]:
    return {"id": key, "email": f"{key}@example.com"}


async def admit_backlog(runtime: Any, count: int, bulk_lane: str | None) -> float:
    from tidings.admission.intake import NotifyRequest

    started = time.perf_counter()
    for page in range(0, count, 1000):
        await runtime.notify_many([
            NotifyRequest(key=f"bulk-{n:06d}", recipient=recipient(f"b{n}"),
                          channels=["email"], template="news", lane=bulk_lane)
            for n in range(page, min(count, page + 1000))])
        if page and page % 20_000 == 0:
            print(f"  backlog: {page:,} admitted", file=sys.stderr, flush=True)
    return time.perf_counter() - started


async def make_calls(runtime: Any, args: argparse.Namespace) -> dict[str, float]:
    """``--calls`` notify calls at random moments over ``--over-s``; key -> return time."""
    rng = random.Random(args.seed)
    moments = sorted(rng.uniform(0, args.over_s) for _ in range(args.calls))
    began = time.time()
    returned: dict[str, float] = {}
    for n, at in enumerate(moments):
        await asyncio.sleep(max(0.0, began + at - time.time()))
        key = f"call-{n:04d}"
        await runtime.notify(key=key, recipient=recipient(key), channels=["email"],
                             template="reset")
        returned[f"{key}:email"] = time.time()
    return returned


def read_arrivals(path: Path) -> list[tuple[float, str]]:
    for _ in range(100):
        if path.exists() and path.stat().st_size:
            return [(float(at), str(key)) for at, key in json.loads(path.read_text())]
        time.sleep(0.1)
    raise RuntimeError(f"the sandbox wrote no arrivals to {path}")


def over_quota_windows(times: list[float], quota: int) -> int:
    """Sliding one-second windows, one starting at each arrival, holding more than
    ``quota`` arrivals."""
    over = 0
    j = 0
    for i, start in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] < start + 1.0:
            j += 1
        over += (j - i) > quota
    return over


async def run(args: argparse.Namespace, folder: Path) -> Report:
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    store = bench_store(args.store, folder, "lanes")
    sandbox, port = start_sandbox(folder, args.quota)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        config = configure(folder, store, f"http://127.0.0.1:{port}", args)
        runtime = await build_runtime(Settings.load(config))
        try:
            lanes = args.lanes.split(",")
            bulk_lane = "bulk" if "bulk" in lanes else None
            admit_s = await admit_backlog(runtime, args.backlog, bulk_lane)
            print(f"  backlog of {args.backlog:,} admitted in {admit_s:.1f} s; starting "
                  f"{args.workers} workers", file=sys.stderr, flush=True)
            workers += [start_worker(folder, config, n) for n in range(args.workers)]
            await wait_for_flow(port)
            print(f"  bulk flowing; {args.calls} calls over {args.over_s:g} s",
                  file=sys.stderr, flush=True)
            first_call = time.time()
            returned = await make_calls(runtime, args)
            last_call = time.time()
            await wait_for_keys(port, set(returned), deadline=last_call + 30.0)
        finally:
            await runtime.close()
    finally:
        stop(workers, sandbox)
    arrivals = read_arrivals(folder / "keys.json")
    return report(args, store, arrivals, returned, first_call, last_call)


async def wait_for_flow(port: int) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        for _ in range(600):
            stats = (await client.get("/v1/stats")).json()
            if stats["total"]["accepted_keys"]:
                return
            await asyncio.sleep(0.1)
    raise RuntimeError("no send reached the sandbox within 60 s of the workers' start")


async def wait_for_keys(port: int, keys: set[str], *, deadline: float) -> None:
    import httpx

    left = set(keys)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        while left and time.time() < deadline:
            for key in list(left)[:50]:
                if (await client.get(f"/v1/messages/{key}")).status_code == 200:
                    left.discard(key)
            await asyncio.sleep(0.2)


def report(args: argparse.Namespace, store: str, arrivals: list[tuple[float, str]],
           returned: dict[str, float], first_call: float, last_call: float) -> Report:
    first_byte: dict[str, float] = {}
    for at, key in arrivals:
        first_byte.setdefault(key, at)
    latencies = [first_byte[key] - at for key, at in returned.items() if key in first_byte]
    missing = len(returned) - len(latencies)
    window = [(at, key) for at, key in arrivals if first_call <= at <= last_call]
    span = max(1e-9, last_call - first_call)
    tx_rate = sum(1 for _, key in window if key.startswith("call-")) / span
    bulk_rate = sum(1 for _, key in window if key.startswith("bulk-")) / span
    target = args.quota * QUOTA_SAFETY
    times = sorted(at for at, _ in arrivals)
    counted: dict[str, int] = {}
    for _, key in arrivals:
        counted[key] = counted.get(key, 0) + 1
    return {
        **source_revision(),
        "store": "sqlite" if store.startswith("sqlite") else "postgresql",
        "lanes": args.lanes, "backlog": args.backlog, "quota": args.quota,
        "workers": args.workers, "calls": args.calls, "over_s": args.over_s,
        "notify_to_first_byte_s": {
            "p50": rounded(quantile(latencies, 0.5)), "p99": rounded(quantile(latencies, 0.99)),
            "max": rounded(max(latencies, default=0.0)), "never_arrived": missing},
        "while_calling": {"seconds": rounded(span, 1), "transactional_per_s": rounded(tx_rate, 1),
                          "bulk_per_s": rounded(bulk_rate, 1),
                          "pacer_target_per_s": rounded(target, 1),
                          "bulk_use": rounded(bulk_rate / max(1e-9, target - tx_rate))},
        "over_quota_windows": over_quota_windows(times, args.quota),
        "sent_twice": sum(1 for n in counted.values() if n > 1),
        "arrivals": len(arrivals),
    }


def summary(r: Report) -> str:
    n = r["notify_to_first_byte_s"]
    w = r["while_calling"]
    return "\n".join([
        f"lanes {r['lanes']} on {r['store']}: {r['backlog']:,} bulk backlogged, quota "
        f"{r['quota']}/s, {r['workers']} workers, {r['calls']} calls over {r['over_s']:g} s",
        f"  notify -> first byte: p50 {n['p50']:.3f} s  p99 {n['p99']:.3f} s  max "
        f"{n['max']:.3f} s  (target p99 < 1 s; never arrived: {n['never_arrived']})",
        f"  while calling: bulk {w['bulk_per_s']:.1f}/s + transactional "
        f"{w['transactional_per_s']:.1f}/s of a pacer target {w['pacer_target_per_s']:.1f}/s: "
        f"bulk_use {w['bulk_use']:.3f} (target >= 0.97)",
        f"  one-second windows over the quota: {r['over_quota_windows']} (target 0); "
        f"keys sent twice: {r['sent_twice']}",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default=DEFAULT_PG,
                        help="a PostgreSQL URL (a sibling database is made), or 'sqlite'")
    parser.add_argument("--backlog", type=int, default=80_000)
    parser.add_argument("--quota", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--over-s", type=float, default=60.0)
    parser.add_argument("--lanes", default="transactional,bulk",
                        help="the channel's lanes, comma-separated ('all': one lane)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="write the report (JSON) here as well")
    finish(parser.parse_args(), run, summary, "tidings-lanes-")


if __name__ == "__main__":
    main()
