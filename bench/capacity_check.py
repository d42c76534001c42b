"""Capacity check: the capacity model's forecast of a campaign's drain against its run.

1. **A fleet that has been working.** K worker processes (``Worker.run()``, each its own
   runtime, the in-process sandbox twin with no latency and a quota of 1,000,000/s, the
   channel unpaced as in the delivery benchmark, or paced at ``--quota``) drain C
   one-off intents: the ledger now holds the channel's recent outcomes. The workers
   keep running, idle.
2. **The forecast, before the campaign is enabled.** ``operations.campaign_forecast``
   (what ``tidings plan --campaign`` prints): the audience's count (N recipients, a
   ``GeneratorAudience`` paged through), the channel's pace (if any), the per-worker rate
   observed in the ledger's last ``window_s`` of sends over the K workers, and K.
3. **The run.** The campaign (``0 9 * * *`` UTC, today's occurrence, 24 h freshness) is
   admitted by ``Scheduler.run_pass`` in a process of its own while the K workers
   deliver. ``drain_s`` = from the start signal of admission to the poll (every 20 ms)
   that saw all C + N intents accepted.

``ratio`` = measured drain ÷ forecast drain (target within 10 %, i.e. 0.9–1.1).
Correctness: every intent accepted in the ledger, the sandbox cores' accepted keys add
up to C + N and none of them accepted a key twice.

The figures belong to the machine and the moment (the forecast observes the fleet a
minute before the run, which is the model's premise: the rate a fleet has just shown).
Unpaced, the rate is the workers' and moves with the machine's load; paced, it is the
pacer's, and the check holds as long as the workers keep up with it.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from typing import Any

import delivery
from admission import recipients
from benchlib import Report, now_s, peak_rss_mb, rounded, source_revision
from delivery import CHANNEL, MAX_IN_FLIGHT, Children, seed_intents, wait_all_accepted
from tidings.admission.audience import GeneratorAudience
from tidings.admission.campaign import Campaign
from tidings.config.settings import Settings
from tidings.core.cron import Schedule
from tidings.operate import operations
from tidings.operate.capacity import ChannelForecast
from tidings.runtime import build_runtime

CAMPAIGN = "capacity-check"
CRON = "0 9 * * *"
TIMEZONE = "UTC"
TEMPLATE = "digest"
FRESHNESS_S = 24 * 3600.0
GRACE_S = 2 * 86_400.0  # today's 09:00 occurrence, whenever today the check runs
WINDOW_S = 120.0
TARGETS = {"ratio_min": 0.9, "ratio_max": 1.1}


def settings_for(url: str, quota: int | None) -> Settings:
    """The delivery benchmark's settings, the channel paced at ``quota`` when given."""
    channel: dict[str, Any] = {"max_in_flight": MAX_IN_FLIGHT,
                               "provider": {"kind": "sandbox-twin"}}
    if quota is not None:
        channel["quota"] = f"{quota}/s"
    return Settings.parse({"store": url, "channels": {CHANNEL: channel}})


def worker_child(url: str, index: int, quota: int | None, go: EventType, stop: EventType,
                 out: Queue[tuple[str, int, Any]]) -> None:
    """The delivery benchmark's worker process, on this check's settings."""
    delivery.settings_for = partial(settings_for, quota=quota)  # this child's own module
    delivery.worker_child(url, index, 0, go, stop, out, 0)


def campaign(n: int) -> Campaign:
    return Campaign(name=CAMPAIGN, schedule=Schedule(CRON, TIMEZONE), channels=(CHANNEL,),
                    template=TEMPLATE, version=1,
                    audience=GeneratorAudience(partial(recipients, n)),
                    expires_after_s=FRESHNESS_S, grace_s=GRACE_S)


async def forecast(url: str, n: int, workers: int, quota: int | None) -> ChannelForecast:
    runtime = await build_runtime(settings_for(url, quota), campaigns=[campaign(n)],
                                  migrate=False)
    try:
        (line,) = await operations.campaign_forecast(
            runtime.store, runtime.campaigns[0], limits=runtime.limits,
            now=runtime.clock.now(), window_s=WINDOW_S, workers=workers)
    finally:
        await runtime.close()
    return line


def admission_child(url: str, n: int, go: EventType, stop: EventType,
                    out: Queue[tuple[str, int, Any]]) -> None:
    try:
        report = asyncio.run(_admit(url, n, go, out))
    except BaseException as exc:
        out.put(("error", -1, f"{type(exc).__name__}: {exc}"))
        raise
    out.put(("done", 0, report))


async def _admit(url: str, n: int, go: EventType, out: Queue[tuple[str, int, Any]]) -> Report:
    runtime = await build_runtime(settings_for(url, None), campaigns=[campaign(n)],
                                  migrate=False)
    scheduler = runtime.scheduler()
    out.put(("ready", 0, None))
    if not await asyncio.to_thread(go.wait, 600.0):
        raise TimeoutError("no start signal")
    start = now_s()
    passes = admitted = 0
    while True:
        result = await scheduler.run_pass(now=runtime.clock.now())
        passes += 1
        admitted += result.admitted
        if not result.more:
            break
    elapsed = now_s() - start
    await runtime.close()
    return {"admitted": admitted, "passes": passes, "elapsed_s": rounded(elapsed),
            "rate_per_s": round(admitted / elapsed) if elapsed > 0 else None,
            "peak_rss_mb": rounded(peak_rss_mb(), 1)}


def run(*, n: int, calibrate: int, workers: int, url: str, quota: int | None = None) -> Report:
    """The check on a fresh store at ``url`` (see the module docstring)."""
    revision = source_revision()
    seed = asyncio.run(seed_intents(url, calibrate))
    fleet = Children(worker_child, lambda i, c: (url, i, quota, c.go, c.stop, c.out), workers)
    admission = Children(admission_child, lambda i, c: (url, n, c.go, c.stop, c.out), 1)
    try:
        started = fleet.start()
        warm = wait_all_accepted(url, calibrate, fleet) - started
        time.sleep(1.0)  # the last calibration second lands in its bucket
        predicted = asyncio.run(forecast(url, n, workers, quota))
        enabled = admission.start()
        done = wait_all_accepted(url, calibrate + n, fleet)
        fleet.stop.set()
        reports = fleet.collect()
        (admitted,) = admission.collect()
    finally:
        fleet.kill()
        admission.kill()
    drain = done - enabled
    f = predicted.forecast
    sandbox = [r["sandbox"] for r in reports]
    accepted_keys = sum(s["accepted_keys"] for s in sandbox)
    twice = sum(s["keys_accepted_twice"] for s in sandbox)
    return {
        "benchmark": "capacity_check",
        "n": n, "calibration_n": calibrate, "workers": workers, "store": url, "quota": quota,
        "tidings": revision,
        "calibration": {"elapsed_s": rounded(warm),
                        "rate_per_s": round(calibrate / warm) if warm > 0 else None,
                        "seed": seed},
        "forecast": {
            "rate_source": predicted.rate_source,
            "observed_rate_per_s": None if predicted.observed_rate_per_s is None
            else round(predicted.observed_rate_per_s, 1),
            "per_worker_per_s": round(f.per_worker_per_s, 1),
            "rate_per_s": round(f.rate_per_s, 1), "bound": str(f.bound),
            "drain_s": rounded(f.drain_s), "freshness_s": f.freshness_s,
            "verdict": str(f.verdict), "window_s": predicted.window_s},
        "measured": {"drain_s": rounded(drain), "rate_per_s": round(n / drain),
                     "admission": admitted},
        "ratio": round(drain / f.drain_s, 3),
        "check": {"sandbox_accepted_keys": accepted_keys, "expected": calibrate + n,
                  "sandbox_keys_accepted_twice": twice,
                  "ok": accepted_keys == calibrate + n and twice == 0},
        "targets": TARGETS,
    }


def summary(report: Report) -> str:
    f, m = report["forecast"], report["measured"]
    return "\n".join([
        f"capacity check: {report['n']:,} recipients, {report['workers']} worker "
        f"process(es), quota {report['quota'] or 'none'}, {report['store']}",
        f"  calibration  {report['calibration_n']:,} intents in "
        f"{report['calibration']['elapsed_s']} s ({report['calibration']['rate_per_s']:,}/s)",
        f"  forecast     {f['drain_s']} s at {f['rate_per_s']:,}/s ({f['bound']}-bound; "
        f"{f['per_worker_per_s']:,}/s per worker, {f['rate_source']} over the last "
        f"{f['window_s']:.0f} s), verdict {f['verdict']}",
        f"  measured     {m['drain_s']} s ({m['rate_per_s']:,}/s); admission "
        f"{m['admission']['elapsed_s']} s ({m['admission']['rate_per_s']:,}/s)",
        f"  ratio        {report['ratio']} measured / forecast "
        f"(target {TARGETS['ratio_min']}–{TARGETS['ratio_max']})",
        f"  check        {report['check']}",
    ])
