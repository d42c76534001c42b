"""Failover, the long form: the primary provider down for a minute in a 20,000-intent run.

    python bench/failover.py [--store URL|sqlite] [--n 20000] [--quota 300] [--workers 2]
        [--down-at 0.25] [--down-s 60] [--open-s 15] [--lost 0.05] [--fallback-quota 0]
        [--kill-every-s 0] [--max-kills 0] [--store-as-is] [--json] [--out REPORT]

Two sandbox HTTP servers in this process are one channel's providers, the ``primary``
(dropping ``--lost`` of its answers after accepting) and its ``fallback``, both with
deduplication off, so a key sent twice is counted twice; with ``--fallback-quota``, the
fallback allows only that many a second and the channel says so (``failover.quotas``).
``--n`` intents are admitted,
then ``--workers`` ``tidings worker`` processes drain them at ``--quota``; once the
primary has accepted ``--down-at`` of them, it stops (its port refuses connections)
for ``--down-s`` and starts again on the same port with the same ledger. With
``--kill-every-s``, a worker is SIGKILLed that often and started again (``--max-kills``
times at most, then the survivors finish).

Printed, from the two sandboxes' own counts (the witnesses): how long after the primary
stopped the fallback accepted its first send (target under 2 s), how long after the
primary returned it accepted again (target under 30 s; bounded by ``--open-s``), keys
accepted by both (target 0), intents not accepted at the end (target 0), intents whose
receipt is not the one the sandbox holding their key issued (target 0), seconds over the
fallback's quota (target 0), and the rate before, during and after the outage beside the
pacer's target. ``tests/acceptance/test_provider_failover.py`` runs its short form.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import Report, rounded, source_revision
from lanes import bench_store, finish

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/tidings_bench"


async def start(config: Path, log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as sink:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", "worker", "--channel", "email",
            "--config", str(config), stdout=asyncio.subprocess.DEVNULL, stderr=sink,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def run(args: argparse.Namespace, folder: Path) -> Report:
    from tidings.admission.intake import NotifyRequest
    from tidings.config.settings import Settings
    from tidings.core.states import State
    from tidings.runtime import build_runtime
    from tidings.sandbox import SandboxConfig, SandboxServer, serve

    def accepted(sandbox: SandboxServer) -> int:
        return int(sandbox.core.stats()["channels"].get("email", {}).get("accepted_keys", 0))

    primary = await serve(SandboxConfig(dedupe=False, lost_response=args.lost,
                                        quotas={"email": 1_000_000}))
    fallback = await serve(SandboxConfig(dedupe=False, quotas={
        "email": args.fallback_quota or 1_000_000}), seed=1)
    quotas = (f'quotas = {{ sandbox-2 = "{args.fallback_quota}/s" }}'
              if args.fallback_quota else "")
    store = (args.store if args.store_as_is and args.store != "sqlite"
             else bench_store(args.store, folder, "failover"))
    config = folder / "tidings.toml"
    config.write_text(f'''
store = "{store}"
[worker]
reconcile_every_s = 0.5
heartbeat_s = 0.5
gone_after_s = 2.0
[reconciler]
uncertain_after_s = 0.0
[channels.email]
quota = "{args.quota}/s"
max_in_flight = 200
lookup_settle_s = 0.0
provider = {{ kind = "sandbox", url = "{primary.url}", timeout_s = 2.0 }}
fallbacks = [{{ kind = "sandbox", url = "{fallback.url}", timeout_s = 2.0 }}]
[channels.email.failover]
open_s = {args.open_s}
{quotas}
''')
    runtime = await build_runtime(Settings.load(config))
    workers: list[asyncio.subprocess.Process] = []
    logs = [folder / f"worker-{i}.log" for i in range(args.workers)]
    marks: dict[str, float] = {}
    counts: dict[str, int] = {}
    kills = 0
    try:
        for first in range(0, args.n, 1000):
            await runtime.notify_many([NotifyRequest(
                key=f"notice-{n}", recipient={"id": f"c{n}", "email": f"c{n}@example.com"},
                channels=["email"], template="notice/v1", data={"n": n})
                for n in range(first, min(args.n, first + 1000))])
        workers = [await start(config, log) for log in logs]
        began = time.monotonic()
        next_kill = began + args.kill_every_s if args.kill_every_s > 0 else float("inf")
        deadline = began + args.guard_s
        states: dict[str, int] = {}
        while True:
            now = time.monotonic()
            total = accepted(primary) + accepted(fallback)
            if now >= next_kill and (args.max_kills == 0 or kills < args.max_kills):
                index = kills % args.workers
                workers[index].send_signal(signal.SIGKILL)
                await workers[index].wait()
                workers[index] = await start(config, logs[index])
                kills += 1
                next_kill = time.monotonic() + args.kill_every_s
            if "down" not in marks and accepted(primary) >= args.n * args.down_at:
                await primary.close()
                marks["down"] = time.monotonic()
                counts["at_down"] = total
                counts["fallback_at_down"] = accepted(fallback)
            elif "down" in marks and "took_over" not in marks and \
                    accepted(fallback) > counts["fallback_at_down"]:
                marks["took_over"] = now
            if "down" in marks and "up" not in marks and now >= marks["down"] + args.down_s:
                primary = await serve(core=primary.core, port=primary.port)
                marks["up"] = time.monotonic()
                counts["at_up"] = accepted(primary) + accepted(fallback)
                counts["primary_at_up"] = accepted(primary)
            elif "up" in marks and "back" not in marks and \
                    accepted(primary) > counts["primary_at_up"]:
                marks["back"] = now
            states = (await runtime.store.intent_counts()).get("email", {})
            if states.get(State.ACCEPTED.value, 0) == args.n and "up" in marks:
                marks["done"] = time.monotonic()
                counts["at_done"] = total
                break
            if now > deadline:
                marks["done"] = now
                counts["at_done"] = total
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # a late duplicate would have landed by now
        receipts = {i.key: i.receipt for i in await runtime.store.intent_find(
            states=[State.ACCEPTED], limit=args.n + 1)}
        keys = [f"notice-{n}:email" for n in range(args.n)]
        where = {k: (primary.core.lookup(k, "email"), fallback.core.lookup(k, "email"))
                 for k in keys}
        both = sum(1 for a, b in where.values() if a is not None and b is not None)
        neither = sum(1 for a, b in where.values() if a is None and b is None)
        mismatched = sum(1 for k, receipt in receipts.items()
                         if ("email", receipt) not in where.get(k, (None, None)))
        stats = {name: s.core.stats()["channels"].get("email", {})
                 for name, s in (("primary", primary), ("fallback", fallback))}
    finally:
        for process in workers:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.wait(), 30)
        await runtime.close()
        await primary.close()
        await fallback.close()

    def rate(done: int, since: str, until: str) -> float | None:
        span = marks.get(until, 0.0) - marks.get(since, 0.0)
        return rounded(done / span) if span > 0 else None

    marks["began"] = began
    target = args.quota * 0.98
    result: Report = {
        "bench": "failover", "revision": source_revision(),
        "store": "sqlite" if args.store == "sqlite" else "postgresql",
        "n": args.n, "quota": args.quota, "workers": args.workers, "kills": kills,
        "down_s": args.down_s, "open_s": args.open_s, "lost": args.lost,
        "took_over_s": rounded(marks["took_over"] - marks["down"])
        if "took_over" in marks else None,
        "back_s": rounded(marks["back"] - marks["up"]) if "back" in marks else None,
        "keys_on_both": both,
        "keys_on_neither": neither,
        "receipts_mismatched": mismatched,
        "not_accepted": args.n - states.get(State.ACCEPTED.value, 0),
        "states": states,
        "primary": {k: stats["primary"].get(k) for k in
                    ("accepted_keys", "keys_accepted_twice", "lost_responses")},
        "fallback": {k: stats["fallback"].get(k) for k in
                     ("accepted_keys", "keys_accepted_twice", "quota_violations")},
        "fallback_quota": args.fallback_quota or None,
        "pacer_target_per_s": rounded(target),
        "rate_before": rate(counts.get("at_down", 0), "began", "down"),
        "rate_during": rate(counts.get("at_up", 0) - counts.get("at_down", 0), "down", "up"),
        "rate_after": rate(counts.get("at_done", 0) - counts.get("at_up", 0), "up", "done"),
    }
    return result


def summary(r: dict[str, Any]) -> str:
    return (f"failover on {r['store']}: {r['n']} intents at {r['quota']}/s, primary down "
            f"{r['down_s']} s, {r['kills']} kills; fallback took over {r['took_over_s']} s "
            f"after (target < 2), primary back {r['back_s']} s after its return (target "
            f"< 30); keys on both {r['keys_on_both']} (target 0), not accepted "
            f"{r['not_accepted']} (target 0), receipts not the sandbox's "
            f"{r['receipts_mismatched']} (target 0), seconds over the fallback's quota "
            f"{r['fallback']['quota_violations']} (target 0); rate before/during/after "
            f"{r['rate_before']} / "
            f"{r['rate_during']} / {r['rate_after']} per s (pacer target "
            f"{r['pacer_target_per_s']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default=DEFAULT_PG,
                        help="a PostgreSQL URL (a throw-away database is made beside it) "
                             "or 'sqlite'")
    parser.add_argument("--n", type=int, default=20_000, help="intents")
    parser.add_argument("--quota", type=int, default=300, help="the channel's quota, per s")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--down-at", type=float, default=0.25,
                        help="the share of --n the primary accepts before it stops")
    parser.add_argument("--down-s", type=float, default=60.0,
                        help="how long the primary refuses connections")
    parser.add_argument("--open-s", type=float, default=15.0,
                        help="channels.<name>.failover.open_s")
    parser.add_argument("--lost", type=float, default=0.05,
                        help="the share of the primary's answers dropped after accepting")
    parser.add_argument("--fallback-quota", type=int, default=0,
                        help="the fallback's own quota, per s, in the sandbox and in "
                             "failover.quotas (0: none)")
    parser.add_argument("--kill-every-s", type=float, default=0.0,
                        help="SIGKILL a worker this often (0: never)")
    parser.add_argument("--max-kills", type=int, default=0,
                        help="kill at most this many times (0: no bound)")
    parser.add_argument("--guard-s", type=float, default=900.0,
                        help="give up after this long")
    parser.add_argument("--store-as-is", action="store_true",
                        help="use the PostgreSQL --store as given (a database or schema "
                             "the caller made and drops), not a fresh one beside it")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON report here")
    finish(parser.parse_args(), run, summary, "tidings-failover-")


if __name__ == "__main__":
    main()
