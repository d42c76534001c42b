"""Hosts that come and go: three simulated hosts, one cut off for 20 s and back.

Each host is a network namespace with a host name of its own (``unshare --uts``),
joined by a veth link to a bridge in the test's namespace; the namespaces have a route
to that subnet only, so their traffic goes to the bridge address and nowhere else. Two
``tidings worker`` processes run on each host. PostgreSQL listens on 127.0.0.1 only, so
a ``socat`` relay bound to the bridge address forwards to it: a relay leaves the
shared server's configuration alone and needs no second cluster (seconds of initdb
and start), and what the workers see of the network is what a real host sees — when
the link goes down, their TCP sessions go silent, the server notices nothing, and
only the heartbeat tells (``tidings.core.liveness``). The sandbox HTTP server listens on
the bridge address too, in a process of its own that notes every send's arrival
(``tests/support/arrivals_sandbox.py``), with one channel at 200/s and dedupe off (a key
sent twice is accepted twice).

The run: the fleet sends at the quota: never over it in the sandbox's own seconds, and
0 sliding one-second windows over it with utilisation at least 95 % — these two judged
only when the machine's load average is within its core count: six workers cannot
reach a quota on a machine others saturate, and a starved sandbox stamps bunches of
arrivals together. Then host 2's link goes down for 20 s: the other hosts end its
leases and take its messages within seconds; the link comes back and host 2's stale
work is refused by the lease token (each of its workers says once that it was
declared gone). The witness is the sandbox: every key accepted, none twice, and the
ledger has every intent accepted.

Needs root (CI runs as root) and network namespaces: where ``ip netns add`` is refused
it skips with the reason, even under CI (a platform limit, not a missing server).
PostgreSQL and socat missing: skip locally, fail under CI. Every namespace, link and
the relay are removed whatever happens.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from support import waits
from support.netns import Fleet, Host, fleet_network, require_netns
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.states import State
from tidings.runtime import Runtime, build_runtime

pytestmark = pytest.mark.slow

HOSTS = 3
WORKERS_PER_HOST = 2
QUOTA = 200
STEADY_S = 8.0
OUTAGE_S = 20.0
QUOTA_SAFETY = 0.97
INTENTS = 4400  # about 22 s at the quota: the others still have work when host 2 is cut
LEASE_S = 30.0
GONE_AFTER_S = 3.0
GUARD_S = 300.0  # only against a hang (a machine others saturate stretches the run)
CUT_OFF = 2  # the host whose link goes down (1-based)
WARM_UP_S = 2.0  # claim depths start at a quarter and double each second
SUPPORT = Path(__file__).resolve().parents[1] / "support"


def busiest_second(arrivals: list[float]) -> int:
    """The most requests in any sliding one-second window [t, t + 1)."""
    times = sorted(arrivals)
    return max((bisect.bisect_left(times, t + 1.0) - i for i, t in enumerate(times)),
               default=0)


def busiest_window_at(arrivals: list[float]) -> float:
    """Where the busiest sliding second starts, in seconds from the first arrival."""
    times = sorted(arrivals)
    if not times:
        return 0.0
    i = max(range(len(times)), key=lambda i: bisect.bisect_left(times, times[i] + 1.0) - i)
    return times[i] - times[0]


def per_second(arrivals: list[float]) -> list[int]:
    first = min(arrivals, default=0.0)
    counts: dict[int, int] = {}
    for t in arrivals:
        counts[int(t - first)] = counts.get(int(t - first), 0) + 1
    return [counts.get(s, 0) for s in range(max(counts, default=-1) + 1)]


def utilisation(arrivals: list[float], start: float, end: float) -> tuple[float, int]:
    """Mean requests per whole second in [start, end) over the quota, and the seconds."""
    times = sorted(arrivals)
    seconds = int(end - start)
    if seconds <= 0:
        return 0.0, 0
    count = bisect.bisect_left(times, start + seconds) - bisect.bisect_left(times, start)
    return count / seconds / QUOTA, seconds


async def until(predicate: Callable[[], Any], what: str, guard_s: float = GUARD_S) -> None:
    await waits.until(predicate, what, guard_s)


def events_of(path: Path, event: str) -> list[dict[str, Any]]:
    found = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("event") == event:
                found.append(record)
    return found


def behind(url: str, host: str) -> str:
    """``url`` with its host replaced (the relay on the bridge address)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    where = f"{host}:{parts.port or 5432}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{where}" if len(netloc) == 2
                                     else where))


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    require_netns()
    if shutil.which("socat") is None:
        message = "socat is not installed (the PostgreSQL relay onto the bridge address)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    with fleet_network(HOSTS) as made:
        yield made


async def test_a_host_cut_off_and_back_loses_nothing_and_sends_nothing_twice(
        fleet: Fleet, pg_url: str, tmp_path: Path) -> None:
    relay = await asyncio.create_subprocess_exec(
        "socat", f"TCP-LISTEN:5432,bind={fleet.gateway},fork,reuseaddr",
        f"TCP:127.0.0.1:{urlsplit(pg_url).port or 5432}",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    arrivals_file = tmp_path / "arrivals.json"
    sandbox = await asyncio.create_subprocess_exec(
        sys.executable, str(SUPPORT / "arrivals_sandbox.py"), fleet.gateway, str(QUOTA),
        str(arrivals_file), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert sandbox.stdout is not None
    port = int((await asyncio.wait_for(sandbox.stdout.readline(), timeout=GUARD_S)).strip())
    sandbox_url = f"http://{fleet.gateway}:{port}"
    client = httpx.AsyncClient(base_url=sandbox_url, timeout=10.0)
    stats: dict[str, Any] = {}

    async def email() -> dict[str, Any]:
        nonlocal stats
        answer = await client.get("/v1/stats")
        stats = answer.json()["channels"].get("email", {})
        return stats

    settings_file = tmp_path / "tidings.toml"
    settings_file.write_text(
        f'store = "{behind(pg_url, fleet.gateway)}"\n'
        f'[worker]\nlease_s = {LEASE_S}\nvisibility_s = {2 * LEASE_S}\n'
        f'reconcile_every_s = 1.0\nheartbeat_s = 0.5\ngone_after_s = {GONE_AFTER_S}\n'
        '[reconciler]\nuncertain_after_s = 0.5\n'
        # Aim 3 % under the quota, not the default 2 %: six processes on three hosts
        # start their first sends over new connections, and at 200/s a 2 % margin is 4
        # requests, which those first sends' arrival jitter used up (a sliding second of
        # 202 at the start of one run, with every start spaced by the pacer).
        f'[channels.email]\nquota = "{QUOTA}/s"\nquota_safety = {QUOTA_SAFETY}\n'
        f'provider = {{ kind = "sandbox", url = "{sandbox_url}" }}\n')
    # The test's own view of the store goes straight to the server, not over the bridge.
    local = Settings.load(settings_file).model_copy(update={"store": pg_url})
    runtime = await build_runtime(local)
    workers: list[tuple[Host, asyncio.subprocess.Process, Path]] = []
    try:
        await until(lambda: _listening(fleet.gateway), "the relay listening")
        for host in fleet.hosts:
            for n in range(WORKERS_PER_HOST):
                log_path = tmp_path / f"h{host.index}-w{n}.log"
                with log_path.open("wb") as sink:
                    process = await asyncio.create_subprocess_exec(
                        "ip", "netns", "exec", host.netns, "unshare", "--uts", "sh", "-c",
                        'hostname "$0" && exec "$@"', host.hostname,
                        sys.executable, "-m", "tidings", "--log-format", "json", "worker",
                        "--channel", "email", "--config", str(settings_file),
                        # One full reconciler per host (every worker still looks for
                        # gone peers at each heartbeat): less load on a small machine.
                        *(() if n == 0 else ("--no-reconcile",)),
                        stdout=asyncio.subprocess.DEVNULL, stderr=sink,
                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
                workers.append((host, process, log_path))
        registry = runtime.registry()
        assert registry is not None
        await until(lambda: _running(runtime, HOSTS * WORKERS_PER_HOST),
                    "every worker registered", guard_s=60)
        cut_off = fleet.hosts[CUT_OFF - 1]
        cut_ids = {m.worker_id for m in await registry.running()
                   if m.host == cut_off.hostname}
        assert len(cut_ids) == WORKERS_PER_HOST

        await runtime.notify_many([
            NotifyRequest(key=f"order-{i}", recipient={"id": f"c{i}",
                          "email": f"c{i}@example.com"}, channels=["email"], template="t/v1")
            for i in range(INTENTS)])
        await until(_first_send(email), "the first send")
        first = time.time()
        await asyncio.sleep(max(0.0, first + STEADY_S - time.time()))
        held = await _claimed_by(runtime, cut_ids)
        fleet.cut(cut_off)
        down_at = time.time()

        await until(lambda: _ended(runtime, cut_ids), "the cut-off host's leases ended")
        taken_s = time.time() - down_at
        await asyncio.sleep(max(0.0, down_at + OUTAGE_S - time.time()))
        fleet.mend(cut_off)
        up_at = time.time()

        try:
            await until(_accepted(email, INTENTS), "every key accepted")
        except AssertionError as exc:
            counts = await runtime.store.intent_counts()
            raise AssertionError(f"{exc}: ledger {counts}, sandbox {await email()}") from None
        done_at = time.time()
        for host, _, log_path in workers:
            if host is cut_off:
                await until(lambda p=log_path: events_of(p, "declared gone"),  # type: ignore[misc]
                            "the returning host's workers to find themselves gone", 30)
        await until(lambda: _all_accepted(runtime), "every intent accepted in the ledger")
        for _, process, _ in workers:
            process.send_signal(signal.SIGTERM)
        codes = [await asyncio.wait_for(p.wait(), timeout=GUARD_S) for _, p, _ in workers]

        await email()
        sandbox.send_signal(signal.SIGTERM)
        await asyncio.wait_for(sandbox.wait(), timeout=GUARD_S)
        arrivals: list[float] = json.loads(arrivals_file.read_text())
        first = min(arrivals)
        steady, steady_n = utilisation(arrivals, first + WARM_UP_S, down_at)
        after, after_n = utilisation(arrivals, down_at + taken_s + 1.0,
                                     min(up_at, max(arrivals)))
        lost_events = [e for k in held for e in await runtime.store.events_for(k)
                       if e.type == "lease_lost"]
        refused = [e for log in (p for h, _, p in workers if h is cut_off)
                   for e in events_of(log, "lease lost")]
        print(f"\n[fleet] {HOSTS} hosts x {WORKERS_PER_HOST} workers, {INTENTS} intents at "
              f"{QUOTA}/s: busiest sliding second {busiest_second(arrivals)} (from "
              f"{busiest_window_at(arrivals):.2f} s; cut at {down_at - first:.2f} s), "
              f"utilisation {steady:.1%} over {steady_n} s before the cut and {after:.1%} "
              f"over {after_n} s after the takeover; host {CUT_OFF} cut off with "
              f"{len(held)} leases held, taken over after {taken_s:.2f} s (gone_after_s "
              f"{GONE_AFTER_S:g}, lease_s {LEASE_S:g}); back after {up_at - down_at:.1f} s; "
              f"its stale outcomes refused: {len(lost_events)} on its held keys, "
              f"{len(refused)} 'lease lost' lines; all accepted {done_at - first:.1f} s "
              f"after the first send; sandbox: {stats['accepted_keys']} keys, "
              f"{stats['keys_accepted_twice']} twice (counts: "
              f"{ {k: v for k, v in stats.items() if isinstance(v, int) and v} }); "
              f"per second from the first send: "
              f"{per_second(arrivals)}")

        assert codes == [0] * len(workers)
        assert stats["accepted_keys"] == INTENTS  # lost 0
        assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
        # The sandbox's own quota rule (whole seconds): never over, never a 429.
        assert stats.get("quota_violations", 0) == 0 and stats.get("refused_quota", 0) == 0
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
        if load <= cores:
            assert busiest_second(arrivals) <= QUOTA, per_second(arrivals)
            assert steady >= 0.95, (steady, steady_n, per_second(arrivals))
        else:
            # Six workers, the server and the relay need the CPU to reach the quota, and
            # a starved sandbox takes requests in bunches its clock stamps together (a
            # sliding second over the quota that the senders' spacing never made): on a
            # machine this busy both say more about the neighbours than the fleet
            # (bench/pacing.py measures pacing where the run has the machine).
            print(f"[fleet] sliding seconds and utilisation not judged: load average "
                  f"{load:.1f} on {cores} cores")
        assert taken_s < LEASE_S
        for host, _, log_path in workers:
            told = events_of(log_path, "declared gone")
            assert len(told) == (1 if host is cut_off else 0), (host.hostname, told)
            # Lost leases are told once per run of them, never once per intent.
            assert len(events_of(log_path, "lease lost")) <= 1
    finally:
        for _, process, _ in workers:
            if process.returncode is None:
                process.kill()
                await process.wait()
        for helper in (relay, sandbox):
            if helper.returncode is None:
                helper.kill()
                await helper.wait()
        await client.aclose()
        await runtime.close()


def _first_send(email: Callable[[], Any]) -> Callable[[], Any]:
    async def check() -> bool:
        return bool((await email()).get("requests", 0))
    return check


def _accepted(email: Callable[[], Any], count: int) -> Callable[[], Any]:
    async def check() -> bool:
        return bool((await email()).get("accepted_keys", 0) >= count)
    return check


async def _listening(address: str) -> bool:
    try:
        _, writer = await asyncio.open_connection(address, 5432)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _running(runtime: Runtime, count: int) -> bool:
    registry = runtime.registry()
    assert registry is not None
    return len([m for m in await registry.running() if m.ended_at is None]) >= count


async def _claimed_by(runtime: Runtime, owners: set[str]) -> set[str]:
    claimed = await runtime.store.intent_find(states=[State.CLAIMED], limit=100_000)
    return {i.key for i in claimed if i.lease_owner in owners}


async def _ended(runtime: Runtime, owners: set[str]) -> bool:
    registry = runtime.registry()
    assert registry is not None
    marks = {m.worker_id: m for m in await registry.running()}
    if any(o in marks for o in owners):  # still running, or ended but not settled
        return False
    return not await _claimed_by(runtime, owners)


async def _all_accepted(runtime: Runtime) -> bool:
    return await runtime.store.intent_counts() == {"email": {State.ACCEPTED.value: INTENTS}}
