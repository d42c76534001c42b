"""Workers whose hosts' clocks disagree: one an hour ahead, one ten minutes behind.

Three ``tidings worker`` processes share a channel at a quota. One runs on this host's
clock; the other two run under libfaketime (``FAKETIME=+1h`` and ``-10m``; the monotonic
clock moves with it by a constant, which changes nothing: only its differences count),
which moves the wall clock of everything in the process: Python, psycopg, SQLite's
``julianday('now')``. (``FAKETIME_DONT_FAKE_MONOTONIC`` would leave the monotonic clock
alone, but libfaketime 0.9.10 then breaks ``clock_nanosleep``: every ``time.sleep``
fails with EINVAL.) On PostgreSQL each also has a host name of its own (``unshare
--uts``), as the hosts of a fleet have, so the only signs of life its peers can read are
its heartbeat and its marker lock. SQLite's processes share the one host that holds the
file.

If any of them trusted its own clock, the one ten minutes behind would write heartbeats
and leases that its peers read as ten minutes stale (its work taken from it while it
runs), the one an hour ahead would find every peer silent for an hour and every intent
past its expiry, and the pacer's windows would disagree by an hour. tidings keeps the
store's clock instead (``tidings.core.clock.ReferenceClock``).

The witness is the sandbox HTTP server, in a process of its own on this host's clock:
every key accepted once, none twice, never over the quota in its own seconds. And the
ledger: every intent accepted, none expired (each may live 90 s, far longer than the
drain), no lease ended or expired, no worker declared gone; each skewed worker says in
its log how far its host is off the store's clock (which proves the skew was in
effect), and each took claims.

libfaketime missing: skip locally, fail under CI (``.ci/run`` installs it). The host
names need root (CI runs as root); without root the PostgreSQL case skips.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from support import waits
from support.long_form import scale
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.states import TERMINAL, State
from tidings.runtime import build_runtime

pytestmark = pytest.mark.slow

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SUPPORT = Path(__file__).resolve().parents[1] / "support"
QUOTA = 150
INTENTS = scale(1200, 12_000)  # eight seconds at the quota (the long form: 80)
LIVES_S = scale(90, 900)  # each intent expires this long after admission (far past the drain)
LEASE_S = 10.0  # shorter than either skew: a lease read on a skewed clock would lapse
GONE_AFTER_S = 3.0
GUARD_S = 240.0
#: (the FAKETIME offset, how far the log must say the host is off, its host name)
SKEWS = [(None, 0.0, ""), ("+1h", 3600.0, "ahead"), ("-10m", -600.0, "behind")]


def libfaketime() -> Path:
    if not LIBFAKETIME.exists():
        message = f"libfaketime is not installed ({LIBFAKETIME}; Debian package faketime)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return LIBFAKETIME


def busiest_second(arrivals: list[float]) -> int:
    times = sorted(arrivals)
    return max((bisect.bisect_left(times, t + 1.0) - i for i, t in enumerate(times)),
               default=0)


def host_skews(log: Path) -> list[float]:
    """The skews the worker's log reports (``host_skew_s`` of the clock's warning)."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "host_skew_s" in record:
            found.append(float(record["host_skew_s"]))
    return found


def worker_command(settings_file: Path, *, hostname: str, reconcile: bool) -> list[str]:
    command = [sys.executable, "-m", "tidings", "--log-format", "json", "worker",
               "--channel", "email", "--config", str(settings_file),
               *(() if reconcile else ("--no-reconcile",))]
    if not hostname:
        return command
    return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *command]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tidings.db'}"
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("host names of their own need root and util-linux's unshare")
    url: str = request.getfixturevalue("pg_url")
    return url


async def test_hosts_whose_clocks_disagree_keep_one_time(store_url: str, tmp_path: Path) -> None:
    preload = libfaketime()
    fleet = store_url.startswith("postgresql")
    arrivals_file = tmp_path / "arrivals.json"
    sandbox = await asyncio.create_subprocess_exec(
        sys.executable, str(SUPPORT / "arrivals_sandbox.py"), "127.0.0.1", str(QUOTA),
        str(arrivals_file), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert sandbox.stdout is not None
    port = int((await asyncio.wait_for(sandbox.stdout.readline(), timeout=GUARD_S)).strip())
    sandbox_url = f"http://127.0.0.1:{port}"
    client = httpx.AsyncClient(base_url=sandbox_url, timeout=10.0)
    settings_file = tmp_path / "tidings.toml"
    settings_file.write_text(
        f'store = "{store_url}"\n'
        f'[worker]\nlease_s = {LEASE_S}\nvisibility_s = {2 * LEASE_S}\n'
        f'reconcile_every_s = 0.5\nheartbeat_s = 0.5\ngone_after_s = {GONE_AFTER_S}\n'
        '[reconciler]\nuncertain_after_s = 0.5\n'
        f'[channels.email]\nquota = "{QUOTA}/s"\n'
        f'provider = {{ kind = "sandbox", url = "{sandbox_url}" }}\n')
    runtime = await build_runtime(Settings.load(settings_file))
    workers: list[tuple[str, asyncio.subprocess.Process, Path]] = []
    try:
        for n, (fake, _, name) in enumerate(SKEWS):
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            if fake is not None:
                env |= {"LD_PRELOAD": str(preload), "FAKETIME": fake}
            log_path = tmp_path / f"w{n}.log"
            hostname = f"skew-{name}-{os.getpid()}" if fleet and name else ""
            with log_path.open("wb") as sink:
                process = await asyncio.create_subprocess_exec(
                    *worker_command(settings_file, hostname=hostname, reconcile=True),
                    stdout=asyncio.subprocess.DEVNULL, stderr=sink, env=env)
            workers.append((name or "this host", process, log_path))
        registry = runtime.registry()
        assert registry is not None

        async def registered() -> bool:
            return len([m for m in await registry.running() if m.ended_at is None]) >= 3

        await waits.until(registered, "every worker registered", 60)
        # Admitted on this host's clock, which is the store's: each may live LIVES_S.
        expires_at = runtime.clock.now() + LIVES_S
        await runtime.notify_many([
            NotifyRequest(key=f"k{i}", recipient={"id": f"c{i}", "email": f"c{i}@example.com"},
                          channels=["email"], template="t/v1", expires_at=expires_at)
            for i in range(INTENTS)])

        async def finished() -> bool:  # every intent terminal, accepted or not
            counts = (await runtime.store.intent_counts()).get("email", {})
            return sum(n for state, n in counts.items()
                       if State(state) in TERMINAL) == INTENTS

        await waits.until(finished, "every intent finished", GUARD_S)
        counts = await runtime.store.intent_counts()
        assert counts == {"email": {State.ACCEPTED.value: INTENTS}}, counts
        stats = (await client.get("/v1/stats")).json()["channels"]["email"]
        running = [m for m in await registry.running() if m.ended_at is None]
        for _, process, _ in workers:
            process.send_signal(signal.SIGTERM)
        codes = [await asyncio.wait_for(p.wait(), timeout=GUARD_S) for _, p, _ in workers]
        sandbox.send_signal(signal.SIGTERM)
        await asyncio.wait_for(sandbox.wait(), timeout=GUARD_S)
        arrivals: list[float] = json.loads(arrivals_file.read_text())

        events = [e for i in range(INTENTS) for e in await runtime.store.events_for(f"k{i}:email")]
        taken = [e for e in events
                 if e.type in ("lease_expired", "lease_ended", "lease_lost", "expired")]
        claims_by = {w: sum(1 for e in events if e.type == "claimed" and e.worker == w)
                     for w in {m.worker_id for m in running}}
        print(f"\n[skewed clocks, {store_url.split(':')[0]}] {INTENTS} intents at {QUOTA}/s: "
              f"busiest sliding second {busiest_second(arrivals)}; claims by worker "
              f"{sorted(claims_by.values())}; leases taken or intents expired: {len(taken)}; "
              f"skews logged: {[host_skews(p) for _, _, p in workers]}; sandbox "
              f"{stats['accepted_keys']} keys, {stats['keys_accepted_twice']} twice")

        assert codes == [0, 0, 0]
        assert stats["accepted_keys"] == INTENTS  # lost 0
        assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
        assert stats.get("quota_violations", 0) == 0 and stats.get("refused_quota", 0) == 0
        assert taken == [], taken[:5]
        assert len(running) == 3  # nobody was declared gone
        assert all(n > 0 for n in claims_by.values()), claims_by  # each skewed worker sent
        for (fake, skew, _), (_, _, log_path) in zip(SKEWS, workers, strict=True):
            logged = host_skews(log_path)
            if fake is None:
                assert logged == [], logged
            else:  # the skew was in effect, and seen
                assert logged and abs(logged[0] - skew) < 5.0, (fake, logged)
            text = log_path.read_text(errors="replace")
            assert "declared gone" not in text and "lease lost" not in text, text[-2000:]
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
        if load <= cores:  # a starved sandbox stamps bunches of arrivals together
            assert busiest_second(arrivals) <= QUOTA
    finally:
        for _, process, _ in workers:
            if process.returncode is None:
                process.kill()
                await process.wait()
        if sandbox.returncode is None:
            sandbox.kill()
            await sandbox.wait()
        await client.aclose()
        await runtime.close()


def test_the_faked_clock_is_in_effect_in_a_child(tmp_path: Path) -> None:
    """The premise: under the preload a process's wall clock is an hour ahead, its sleeps
    work, and the kernel's stamp on a file write (the SQLite store's reference) is not
    moved."""
    preload = libfaketime()
    probe = (
        "import os, sys, tempfile, time\n"
        "f = tempfile.TemporaryFile(dir=sys.argv[1], buffering=0)\n"
        "os.pwrite(f.fileno(), b't', 0)\n"
        "t = time.monotonic()\n"
        "time.sleep(0.05)\n"
        "print(time.time(), os.fstat(f.fileno()).st_mtime_ns / 1e9, time.monotonic() - t)\n")
    before = time.time()
    out = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True,
        check=True, timeout=60,
        env={**os.environ, "LD_PRELOAD": str(preload), "FAKETIME": "+1h"}).stdout.split()
    after = time.time()
    wall, stamped, slept = float(out[0]), float(out[1]), float(out[2])
    assert 0.04 <= slept < 30
    assert before + 3590 <= wall <= after + 3610
    assert before - 1 <= stamped <= after + 1
