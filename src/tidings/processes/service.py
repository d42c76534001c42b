"""Long-running loops: worker, scheduler, reconciler; graceful on SIGTERM, or on an event
of their host's when embedded (``tidings.embedded``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from tidings.admission.audience import check_audiences
from tidings.admission.relay import relay_loop
from tidings.admission.scheduler import PassResult, Switches
from tidings.core.liveness import Marker
from tidings.delivery.worker import Worker
from tidings.operate.guardrails import enforce
from tidings.operate.holds import sweep as holds_sweep
from tidings.processes import progress
from tidings.processes.gc_tuning import serving_gc
from tidings.processes.heap import trim_loop
from tidings.recovery.retention import RetentionConfig, prune, prune_due
from tidings.runtime import Runtime, check_campaign_data
from tidings.transports.base import RecordsReceiver

log = logging.getLogger("tidings.service")


def on_signals(stop: Callable[[], None]) -> None:
    """Call ``stop`` on SIGTERM/SIGINT (finish or release work in hand, then exit)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop)


async def reconcile_loop(runtime: Runtime, every_s: float, stopping: asyncio.Event,
                         wake: asyncio.Event | None = None) -> None:
    """Run the reconciler every ``every_s`` seconds (or as soon as ``wake`` is set) until
    ``stopping`` is set."""
    reconciler = runtime.reconciler()
    wake = wake or asyncio.Event()
    guardrails = runtime.guardrails()
    retention = runtime.retention()
    pruned_at: float | None = None
    loop = asyncio.get_running_loop()
    while not stopping.is_set():
        try:
            # Guardrails first: a crossing pauses admission before the relay's next pass.
            await enforce(runtime.store, runtime.transport, guardrails,
                          now=runtime.clock.now(), worker=reconciler.worker_id)
        except Exception:
            log.exception("guardrail check failed")
        try:
            switches = Switches.of(await runtime.store.switch_all())
            result = await reconciler.run_pass(now=runtime.clock.now(),
                                               paused_channels=switches.paused_channels())
            if result.leases_ended or result.leases_expired:
                # Uncertain now, settled once uncertain_after_s has passed: by a pass
                # then, not one reconcile_every_s later. A worker started after a kill
                # ends its predecessor's leases in its first pass, before any peer's
                # heartbeat loop (which wakes its own loop alike) finds it gone.
                loop.call_later(reconciler.config.uncertain_after_s, wake.set)
        except Exception:
            # A failed sweep is retried next interval; it must not take the worker down.
            log.exception("reconcile pass failed")
        try:
            await holds_sweep(runtime.store, runtime.transport, now=runtime.clock.now(),
                              worker=reconciler.worker_id)
        except Exception:
            log.exception("holds sweep failed")
        await _close_digests(runtime)
        pruned_at = await prune_when_due(runtime, retention, pruned_at,
                                         worker=reconciler.worker_id)
        await _first_of(stopping, wake, timeout_s=every_s)
        wake.clear()


async def _close_digests(runtime: Runtime) -> int:
    """Admit the digests whose windows are due; the windows closed (0 on a failure,
    which the next pass retries: every step of a close can be repeated)."""
    try:
        return (await runtime.close_digests()).windows
    except Exception:
        log.exception("closing digests failed")
        return 0


async def _first_of(*events: asyncio.Event, timeout_s: float) -> None:
    """Return when any of ``events`` is set, or after ``timeout_s``."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def liveness_loop(runtime: Runtime, marker: Marker, stopping: asyncio.Event,
                        wake: asyncio.Event) -> None:
    """Every heartbeat: beat this worker's marker, and end the work of any worker found
    gone (``Reconciler.end_gone_workers``); leases ended wake the reconcile loop once
    their uncertain sends are due to be settled."""
    reconciler = runtime.reconciler()
    beat_s = marker.config.beat_s
    loop = asyncio.get_running_loop()
    while not stopping.is_set():
        await _first_of(stopping, timeout_s=beat_s)
        if stopping.is_set():
            return
        with contextlib.suppress(TimeoutError):
            # A beat that hangs (a partition) must not hold up the next one.
            await asyncio.wait_for(marker.step(), timeout=marker.config.fence_s)
        try:
            result = await reconciler.end_gone_workers(runtime.clock.now())
        except Exception:
            log.warning("looking for gone workers failed", exc_info=True)
            continue
        if result.leases_ended or result.messages_released:
            log.info("reconciled", extra={"action": "leases_ended",
                                          "count": result.leases_ended,
                                          "messages_released": result.messages_released,
                                          "worker": marker.worker_id})
            loop.call_later(reconciler.config.uncertain_after_s, wake.set)


async def prune_when_due(runtime: Runtime, retention: RetentionConfig, pruned_at: float | None,
                         *, worker: str) -> float | None:
    """Prune if a grid step of ``retention.every_s`` passed since ``pruned_at`` (or it is
    the first pass); returns when this loop last pruned. A failed prune waits for the
    next step, not the next pass: it must not turn every sweep into a retry."""
    now = runtime.clock.now()
    if not (retention.enabled and prune_due(pruned_at, now, retention.every_s)):
        return pruned_at
    try:
        await prune(runtime.store, retention, now=now, worker=worker)
    except Exception:
        log.exception("retention prune failed")
    return now


async def report_loop(totals: Callable[[], dict[str, int]], stopping: asyncio.Event, *,
                      every_s: float = progress.PROGRESS_EVERY_S,
                      extra: Callable[[], Awaitable[dict[str, Any]]] | None = None) -> None:
    """Every ``every_s`` while there is work, one ``progress`` line with the counts since
    the last; one ``idle`` line (with the totals) when work stops; silence while idle."""
    tally = progress.Tally(last=totals())
    while not stopping.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=every_s)
        step = tally.step(totals())
        if step is None:
            continue
        event, counts = step
        fields: dict[str, Any] = dict(counts)
        if extra is not None:
            try:
                fields |= await extra()
            except Exception:
                # A progress line without its backlog beats none.
                log.debug("progress detail failed", exc_info=True)
        log.info(event, extra=fields)


async def serve_worker(runtime: Runtime, channel: str, *, worker_id: str | None = None,
                       reconcile: bool = True, stop: asyncio.Event | None = None,
                       signals: bool = True) -> None:
    """Serve one channel until SIGTERM (or ``stop`` is set), running the reconciler and
    the liveness heartbeat beside it; work in hand is finished or released first.

    A process of its own (``tidings worker``) tunes the collector for serving
    (``serving_gc``: frozen without a full collection first, which every restart after
    a crash would pay for nothing) and takes SIGTERM/SIGINT. Inside another
    application (``signals=False``, see ``tidings.embedded``) it leaves both
    to its host and stops when ``stop`` is set."""
    if not signals:
        await _serve_worker(runtime, channel, worker_id=worker_id, reconcile=reconcile,
                            stop=stop, signals=False)
        return
    with serving_gc(collect=False):
        await _serve_worker(runtime, channel, worker_id=worker_id, reconcile=reconcile,
                            stop=stop, signals=True)


async def _stop_when(event: asyncio.Event | None, stop: Callable[[], None]) -> None:
    if event is not None:
        await event.wait()
        stop()


async def _serve_worker(runtime: Runtime, channel: str, *, worker_id: str | None,
                        reconcile: bool, stop: asyncio.Event | None, signals: bool) -> None:
    worker = runtime.worker(channel, worker_id)
    stopping = asyncio.Event()
    progress.log_lines(progress.startup(runtime, "worker", channel=channel,
                                        worker=worker.worker_id))

    async def backlog() -> dict[str, Any]:
        depth = await runtime.transport.depth(channel, now=runtime.clock.now())
        return {"channel": channel, "backlog": depth.ready + depth.delayed,
                "in_flight": depth.in_flight}

    def stop_now() -> None:
        stopping.set()
        worker.stop()

    if signals:
        on_signals(stop_now)
    told = asyncio.create_task(_stop_when(stop, stop_now))
    marker = await start_marker(runtime, worker)
    wake = asyncio.Event()
    sweeper = (asyncio.create_task(reconcile_loop(runtime, runtime.settings.worker
                                                  .reconcile_every_s, stopping, wake))
               if reconcile else None)
    beater = (asyncio.create_task(liveness_loop(runtime, marker, stopping, wake))
              if marker is not None else None)
    reporter = asyncio.create_task(report_loop(
        lambda: progress.worker_totals(worker.stats, worker.provider), stopping, extra=backlog))
    trimmer = asyncio.create_task(trim_loop(stopping))
    try:
        await worker.run()
    finally:
        stopping.set()
        told.cancel()
        if sweeper is not None:
            await sweeper
        if beater is not None:
            await beater
        if marker is not None:
            await marker.stop()
        await reporter
        await trimmer
        log.info("stopped", extra={"role": "worker", "channel": channel,
                                   **progress.worker_totals(worker.stats, worker.provider)})


async def start_marker(runtime: Runtime, worker: Worker) -> Marker | None:
    """Register the worker's liveness marker, fence its sends on it, and have the
    transport record it as the receiver of what it takes (where the transport can)."""
    marker = runtime.marker(worker.worker_id)
    if marker is None:
        return None
    await marker.start()
    worker.liveness = marker
    if isinstance(runtime.transport, RecordsReceiver):
        runtime.transport.receive_as(worker.worker_id)
    return marker


async def serve_scheduler(runtime: Runtime, *, once: bool = False,
                          stop: asyncio.Event | None = None, signals: bool = True) -> None:
    """Run admission passes every ``scheduler.interval_s`` (or one pass with ``once``)
    until SIGTERM (``signals``) or ``stop`` is set.

    With a broker transport the relay runs beside admission (``relay.relay_loop``)
    until the service stops: a pass writes intents to the outbox and returns without
    waiting for the broker. With ``once`` the relay publishes what is due first."""
    await check_audiences(campaign.audience for campaign in runtime.campaigns)
    await check_campaign_data(runtime.settings, runtime.campaigns, runtime.templates)
    beside = runtime.relay_beside_admission and not once
    scheduler = runtime.scheduler(relay_in_pass=not beside)
    stopping = asyncio.Event()
    if signals:
        on_signals(stopping.set)
    told = asyncio.create_task(_stop_when(stop, stopping.set))
    progress.log_lines(progress.startup(runtime, "scheduler"))
    totals = {"passes": 0, "members": 0, "admitted": 0, "published": 0, "digests": 0}
    reporter = asyncio.create_task(report_loop(lambda: dict(totals), stopping))
    trimmer = asyncio.create_task(trim_loop(stopping))
    relay: asyncio.Task[None] | None = None
    if beside:
        async def paused() -> list[str]:
            return Switches.of(await runtime.store.switch_all()).paused_channels()

        def published(count: int) -> None:
            totals["published"] += count

        relay = asyncio.create_task(relay_loop(
            runtime.store, runtime.transport, runtime.relay_config(), clock=runtime.clock,
            stopping=stopping, paused_channels=paused, published=published))
    try:
        while not stopping.is_set():
            result = await scheduler.run_pass(now=runtime.clock.now())
            _count(totals, result)
            totals["digests"] += await _close_digests(runtime)
            if once:
                return
            if result.more:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(),
                                       timeout=runtime.settings.scheduler.interval_s)
    finally:
        stopping.set()
        told.cancel()
        if relay is not None:
            await relay
        await reporter
        await trimmer
        log.info("stopped", extra={"role": "scheduler", **totals})


def _count(totals: dict[str, int], result: PassResult) -> None:
    # Passes are counted only when they did something: an idle pass is not progress.
    if result.members or result.published:
        totals["passes"] += 1
    totals["members"] += result.members
    totals["admitted"] += result.admitted
    totals["published"] += result.published
