"""Fair share under one quota: a big tenant's campaign and two small ones, one channel.

    python bench/fair_share.py [--store URL|sqlite] [--groups big=50000,a=1000,b=1000]
        [--weights big=2] [--quota 200] [--workers 4] [--json] [--out REPORT]

All real processes, as in ``bench/lanes.py``: the sandbox in a process of its own
(noting each arrival's time and key: the witness), ``--workers`` ``tidings worker``
processes on a channel with ``fair_share = true`` (and ``group_weights`` from
``--weights``), and this script. The groups' intents are admitted in the bulk lane,
the first group's first (the adversarial order: without fair share the others wait
behind it), then the workers start. The run ends once every group but the largest is
sent.

Printed, from the sandbox's arrivals: each group's count, first and last arrival
(seconds from the first send), and its rate while every group had work; for each
group but the largest, its time to finish against the time it would take alone at
its fair share of the pacer's target (``size / (target × weight / Σ weights)``;
target: at most 1.2), and of the rate the channel achieved in the run; each group's
rate against its weighted share of the total while all had work (target: within
10 %); one-second windows over the quota and keys sent twice (targets 0).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import Report, rounded, source_revision
from lanes import (
    DEFAULT_PG,
    QUOTA_SAFETY,
    bench_store,
    finish,
    over_quota_windows,
    read_arrivals,
    recipient,
    start_sandbox,
    start_worker,
    stop,
)


def parse_pairs(text: str, kind: type) -> dict[str, Any]:
    pairs = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        pairs[name.strip()] = kind(value)
    return pairs


def configure(folder: Path, store: str, sandbox_url: str, args: argparse.Namespace,
              weights: dict[str, float]) -> Path:
    listed = ", ".join(f'"{name}" = {weight}' for name, weight in weights.items())
    config = folder / "tidings.toml"
    config.write_text(f'''
store = "{store}"
[worker]
reconcile_every_s = 1.0
[channels.email]
quota = "{args.quota}/s"
fair_share = true
group_weights = {{ {listed} }}
provider = {{ kind = "sandbox", url = "{sandbox_url}" }}
''')
    migrated = subprocess.run([sys.executable, "-m", "tidings", "db", "migrate", "--config",
                               str(config)], capture_output=True, text=True, check=False)
    if migrated.returncode != 0:
        raise RuntimeError(f"tidings db migrate failed: {migrated.stderr.strip()[-2000:]}")
    return config


async def admit(runtime: Any, groups: dict[str, int]) -> None:
    from tidings.admission.intake import NotifyRequest

    for group, size in groups.items():
        for page in range(0, size, 1000):
            await runtime.notify_many([
                NotifyRequest(key=f"{group}-{n:06d}", recipient=recipient(f"{group}{n}"),
                              channels=["email"], template="news", lane="bulk", group=group)
                for n in range(page, min(size, page + 1000))])
        print(f"  group {group}: {size:,} admitted", file=sys.stderr, flush=True)


async def wait_for_small_groups(port: int, groups: dict[str, int], deadline_s: float) -> None:
    import httpx

    small = sum(size for size in sorted(groups.values())[:-1])
    began = time.time()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        while time.time() - began < deadline_s:
            stats = (await client.get("/v1/stats")).json()
            # Every small group's keys, once the largest has sent at least as many.
            if stats["total"]["accepted_keys"] >= 2 * small + 100:
                return
            await asyncio.sleep(0.5)


async def run(args: argparse.Namespace, folder: Path) -> Report:
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    groups = parse_pairs(args.groups, int)
    weights = parse_pairs(args.weights, float)
    store = bench_store(args.store, folder, "fair")
    sandbox, port = start_sandbox(folder, args.quota)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        config = configure(folder, store, f"http://127.0.0.1:{port}", args, weights)
        runtime = await build_runtime(Settings.load(config))
        try:
            await admit(runtime, groups)
        finally:
            await runtime.close()
        workers += [start_worker(folder, config, n) for n in range(args.workers)]
        await wait_for_small_groups(port, groups, args.deadline_s)
    finally:
        stop(workers, sandbox)
    return report(args, store, groups, weights, read_arrivals(folder / "keys.json"))


def report(args: argparse.Namespace, store: str, groups: dict[str, int],
           weights: dict[str, float], arrivals: list[tuple[float, str]]) -> Report:
    start = min(at for at, _ in arrivals)
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    counts: dict[str, int] = {}
    keys: dict[str, int] = {}
    for at, key in arrivals:
        group = key.rsplit("-", 1)[0]
        first.setdefault(group, at)
        last[group] = max(last.get(group, at), at)
        counts[group] = counts.get(group, 0) + 1
        keys[key] = keys.get(key, 0) + 1
    # While every group had work: until the first group finished.
    all_busy_until = min(last[g] for g in groups if counts.get(g, 0) >= groups[g])
    busy = all_busy_until - start
    in_window = {g: sum(1 for at, key in arrivals if at <= all_busy_until
                        and key.rsplit("-", 1)[0] == g) for g in groups}
    total_rate = sum(in_window.values()) / max(busy, 1e-9)
    weight = {g: weights.get(g, 1.0) for g in groups}
    target = args.quota * QUOTA_SAFETY
    per_group = {}
    largest = max(groups, key=lambda g: groups[g])
    for g, size in groups.items():
        share = weight[g] / sum(weight.values())
        rate = in_window[g] / max(busy, 1e-9)
        row: dict[str, Any] = {
            "size": size, "sent": counts.get(g, 0), "first_s": rounded(first[g] - start, 2),
            "last_s": rounded(last[g] - start, 2),
            "rate_while_all_busy": rounded(rate, 1),
            "rate_vs_weighted_share": rounded(rate / max(total_rate * share, 1e-9)),
        }
        if g != largest:
            alone = size / (target * share)
            row["finish_vs_alone_at_fair_share"] = rounded((last[g] - start) / alone)
            # The same against the rate the channel achieved on this machine in this run
            # (a loaded machine sends under the pacer's target whoever is fair).
            achieved = size / (total_rate * share)
            row["finish_vs_alone_at_achieved_share"] = rounded((last[g] - start) / achieved)
        per_group[g] = row
    return {
        **source_revision(),
        "store": "sqlite" if store.startswith("sqlite") else "postgresql",
        "quota": args.quota, "workers": args.workers, "weights": weight,
        "seconds_all_busy": rounded(busy, 1), "total_rate_all_busy": rounded(total_rate, 1),
        "groups": per_group,
        "over_quota_windows": over_quota_windows(sorted(at for at, _ in arrivals), args.quota),
        "sent_twice": sum(1 for n in keys.values() if n > 1),
    }


def summary(r: Report) -> str:
    lines = [f"fair share on {r['store']}: quota {r['quota']}/s, {r['workers']} workers, "
             f"weights {r['weights']}; all groups busy {r['seconds_all_busy']:g} s at "
             f"{r['total_rate_all_busy']:g}/s"]
    for g, row in r["groups"].items():
        finish = row.get("finish_vs_alone_at_fair_share")
        lines.append(
            f"  {g:>8}: {row['sent']:,}/{row['size']:,} sent, first {row['first_s']:g} s, "
            f"last {row['last_s']:g} s, {row['rate_while_all_busy']:g}/s while all busy "
            f"({row['rate_vs_weighted_share']:.3f} of its weighted share; target 0.9-1.1)"
            + ("" if finish is None else
               f", finished at {finish:.3f}x its time alone at its share of the pacer's "
               f"target (target <= 1.2), {row['finish_vs_alone_at_achieved_share']:.3f}x at "
               "its share of the rate achieved"))
    lines.append(f"  one-second windows over the quota: {r['over_quota_windows']} (target 0); "
                 f"keys sent twice: {r['sent_twice']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default=DEFAULT_PG,
                        help="a PostgreSQL URL (a sibling database is made), or 'sqlite'")
    parser.add_argument("--groups", default="big=50000,a=1000,b=1000",
                        help="name=size pairs, comma-separated; the first is admitted first")
    parser.add_argument("--weights", default="", help="name=weight pairs (default 1 each)")
    parser.add_argument("--quota", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--deadline-s", type=float, default=600.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="write the report (JSON) here as well")
    finish(parser.parse_args(), run, summary, "tidings-fair-")


if __name__ == "__main__":
    main()
