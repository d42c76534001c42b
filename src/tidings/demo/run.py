"""Orchestrates the demo: sandbox, scheduler, workers and reconciler as real processes.

The demo process seeds data, starts the processes, injects faults of its own (a
duplicate publication, a retried scheduler pass, a worker killed mid-flight), shows
progress, and ends with a report judged by the sandbox's own counts.

With ``real_providers`` email goes through the Postmark adapter and SMS through the
Twilio adapter, each against the sandbox speaking that provider's dialect (lost
responses on, dedupe off), with templates rendered at send time, and ``tidings api``
receiving the sandbox's Postmark and Twilio webhooks: every uncertain send is settled
by lookup or webhook evidence, never resent blindly.

The demo's store, broker prefix and work folder are made ready and removed by
``tidings.demo.workspace`` (what the CLI and tests import of it still imports from
here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.errors import ConfigurationError
from tidings.core.model import Message, OutgoingMessage
from tidings.core.states import TERMINAL
from tidings.demo.data import AUDIENCE_QUERY, Customers, seed_customers
from tidings.demo.report import build_report, render_report
from tidings.demo.workspace import PG_TABLES as PG_TABLES
from tidings.demo.workspace import DemoStoreError as DemoStoreError
from tidings.demo.workspace import clean_up as clean_up
from tidings.demo.workspace import demo_transport, drop_transport, prepare_postgres
from tidings.providers.httpx_lean import httpx
from tidings.runtime import Runtime, build_runtime
from tidings.transports.open import is_store_queue, redact_url

ZONE = "Europe/London"
CAMPAIGN = "weekly-digest"
SHIPMENT_EVERY = 25
FUTURE_SHARE = 0.1
CANCELLED_SHIPMENTS = 20
DUPLICATED = 50
DEADLINE_S = 600.0

SANDBOX = {
    "quotas": {"email": 1500, "sms": 200},
    "latency": {"email": {"median_ms": 2, "p99_ms": 20}, "sms": {"median_ms": 5, "p99_ms": 50}},
    "rate_limit": 0.0002,
    "retry_after_s": 1,
    "retry_after_date_share": 0.3,
    "retry_after_missing_share": 0.3,
    "server_error": 0.005,
    "timeout": 0.0005,
    "lost_response": 0.001,
    "reject_addresses": ["@invalid.example"],
    "fail_addresses": ["@flaky.example"],
    "dedupe": False,
    "hang_s": 10,
}


#: Injected 429s the demo expects at least, whatever its size: a small run must still
#: show the channel pausing (at 8 expected, none at all has odds of about 1 in 3,000).
MIN_EXPECTED_429 = 8


def sandbox_config(sends: int) -> dict[str, Any]:
    """The sandbox's faults for a run of about ``sends`` requests: the injected 429 share
    is raised for a small run so that some 429s happen."""
    share = max(float(SANDBOX["rate_limit"]), MIN_EXPECTED_429 / max(1, sends))  # type: ignore[arg-type]
    return {**SANDBOX, "rate_limit": round(share, 6)}


#: Lost responses are common enough in the real-providers demo that SMS, the smaller
#: channel, has several.
REAL_LOST_RESPONSE = 0.05
#: The sandbox's read APIs show a send at once: "not found" is believed after this.
REAL_LOOKUP_SETTLE_S = 1.0
#: Credentials the demo hands its processes (they guard nothing outside the demo).
REAL_ENV = {"POSTMARK_SERVER_TOKEN": "demo-postmark-token",
            "TWILIO_AUTH_TOKEN": "demo-twilio-token",
            "POSTMARK_WEBHOOK_USERNAME": "demo-hooks",
            "POSTMARK_WEBHOOK_PASSWORD": "demo-hooks-pw"}
TWILIO_SID = "AC00000000000000000000000000demo"
TEMPLATES = {
    "weekly-digest/v3/subject.txt": "Your week, {{ recipient_id }}",
    "weekly-digest/v3/body.txt": "Hello {{ recipient_id }}, here is your weekly digest.",
    "shipment-update/v1/subject.txt": "Shipment {{ shipment }}",
    "shipment-update/v1/body.txt": "Shipment {{ shipment }} is {{ status }}.",
    "shipment-update/v1/sms.txt": "Shipment {{ shipment }}: {{ status }}",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: ``--batch``: email through Postmark's batch endpoint, this many messages a request.
BATCH = {"max_messages": 100, "linger_s": 0.02}


def real_providers(workdir: Path, sandbox_url: str, api_port: int,
                   batch: bool = False) -> dict[str, Any]:
    """Channel settings for the Postmark and Twilio adapters against the sandbox (with
    ``batch``, email through Postmark's batch endpoint)."""
    for name, text in TEMPLATES.items():
        path = workdir / "templates" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    templates = str(workdir / "templates")
    return {
        "email": {"kind": "email", "templates": templates,
                  "lookup_settle_s": REAL_LOOKUP_SETTLE_S,
                  "provider": {"kind": "postmark", "from_address": "news@example.com",
                               "base_url": sandbox_url, "timeout_s": 2.0},
                  **({"batch": BATCH} if batch else {})},
        "sms": {"kind": "sms", "templates": templates, "lookup_settle_s": REAL_LOOKUP_SETTLE_S,
                "provider": {"kind": "twilio", "account_sid": TWILIO_SID,
                             "from_number": "+15550100000", "base_url": sandbox_url,
                             "status_callback": f"http://127.0.0.1:{api_port}/v1/webhooks/twilio",
                             "timeout_s": 2.0}},
    }


def simulated_offset(now: float) -> float:
    """Seconds to add to the real clock so the demo starts just after Monday 09:00."""
    zone = ZoneInfo(ZONE)
    local = datetime.fromtimestamp(now, zone)
    monday = (local - timedelta(days=local.weekday())).replace(
        hour=9, minute=0, second=0, microsecond=0)
    if monday.timestamp() < now - 3600:
        monday += timedelta(days=7)
    return monday.timestamp() + 1.0 - now


def settings_for(workdir: Path, store: str, customers: Path, sandbox_url: str,
                 offset: float, api_port: int | None = None,
                 transport: str = "sql", batch: bool = False) -> dict[str, Any]:
    """The demo's settings; with ``api_port``, the real-providers channels (with
    ``batch``, email through Postmark's batch endpoint)."""
    provider = {"kind": "sandbox", "url": sandbox_url, "timeout_s": 2.0}
    # Six processes share two cores here: the sandbox's own event loop can stall and
    # then count a burst of requests late, in the next second. Aim lower than usual.
    safety = 0.9
    real = (real_providers(workdir, sandbox_url, api_port, batch)
            if api_port is not None else {})
    return {
        "store": store,
        "transport": transport,
        "clock_offset_s": offset,
        "channels": {
            "email": {"provider": provider, **real.get("email", {}),
                      "quota": f"{SANDBOX['quotas']['email']}/s",  # type: ignore[index]
                      "max_in_flight": 256, "quota_safety": safety},
            "sms": {"provider": provider, **real.get("sms", {}),
                    "quota": f"{SANDBOX['quotas']['sms']}/s",  # type: ignore[index]
                    "max_in_flight": 64, "quota_safety": safety},
        },
        **({"api": {"host": "127.0.0.1", "port": api_port}} if api_port is not None else {}),
        "campaigns": {
            CAMPAIGN: {
                "cron": "0 9 * * 1", "timezone": ZONE, "channels": ["email"],
                "template": "weekly-digest", "version": 3, "expires_after_s": 86400,
                "audience": {"sql": {"url": f"sqlite:///{customers}", "query": AUDIENCE_QUERY}},
            },
        },
        "retry": {"max_failures": 4, "base_s": 0.2, "cap_s": 2.0, "rate_limit_floor_s": 0.25,
                  "rate_limit_cap_s": 5.0},
        "worker": {"batch_size": 200, "lease_s": 15.0, "visibility_s": 20.0,
                   "reconcile_every_s": 1.0},
        "scheduler": {"page_size": 5000, "max_pages": 4, "interval_s": 0.5,
                      "relay_horizon_s": 5.0, "relay_lease_s": 10.0},
        "reconciler": {"lost_after_s": 15.0, "uncertain_after_s": 0.5},
    }


def _toml(data: dict[str, Any], prefix: str = "") -> str:
    """Write the settings as TOML (nested tables); enough for the demo's own settings."""
    scalars, tables = [], []
    for key, value in data.items():
        name = f'"{key}"' if "-" in key or "." in key else key
        if isinstance(value, dict):
            tables.append(_toml(value, f"{prefix}{name}."))
        else:
            scalars.append(f"{name} = {json.dumps(value)}")
    head = f"[{prefix[:-1]}]\n" if prefix and scalars else ""
    return head + "\n".join(scalars) + ("\n\n" if scalars else "") + "".join(tables)


@dataclass
class Procs:
    workdir: Path
    config: Path
    children: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)

    async def start(self, name: str, *args: str) -> asyncio.subprocess.Process:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115, ASYNC230 - the child's
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", *args, "--config", str(self.config),
            stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL)
        log.close()
        self.children[name] = proc
        return proc

    async def stop_all(self, grace_s: float = 20.0) -> None:
        for proc in self.children.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        for proc in self.children.values():
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


async def start_sandbox(workdir: Path, seed: int, *extra: str
                        ) -> tuple[asyncio.subprocess.Process, str]:
    config = workdir / "sandbox.json"
    log = open(workdir / "sandbox.log", "ab")  # noqa: SIM115, ASYNC230 - the child's
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidings", "sandbox", "--port", "0", "--config", str(config),
        "--seed", str(seed), *extra, stdout=asyncio.subprocess.PIPE, stderr=log,
        stdin=asyncio.subprocess.DEVNULL)
    log.close()
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip()
    if "http://" not in line:
        proc.kill()
        raise RuntimeError(f"sandbox did not start: {line!r} (see {workdir / 'sandbox.log'})")
    return proc, line[line.index("http://"):]


async def notify_shipments(runtime: Runtime, customers: Customers, rng: random.Random
                           ) -> list[str]:
    """Shipment updates by email and SMS for a subset; some due later, some cancelled."""
    now = runtime.clock.now()
    requests = [
        NotifyRequest(
            key=f"shipment-{index:06d}:{cid}",
            recipient={"id": cid, "email": email, "phone": phone},
            channels=["email", "sms"], template="shipment-update/v1",
            data={"shipment": f"SH{index:06d}", "status": "out_for_delivery"},
            due_at=now + 20.0 if rng.random() < FUTURE_SHARE else None,
            expires_at=now + 7200.0)
        for index, (cid, email, phone) in enumerate(customers.active[::SHIPMENT_EVERY])
    ]
    keys: list[str] = []
    for start in range(0, len(requests), 500):
        for group in await runtime.notify_many(requests[start:start + 500]):
            keys.extend(group)
    for index in range(min(CANCELLED_SHIPMENTS, len(requests))):
        cid = customers.active[index * SHIPMENT_EVERY][0]
        await runtime.cancel(f"shipment-{index:06d}:{cid}", reason="order cancelled")
    return keys


async def inject_duplicates(runtime: Runtime) -> int:
    """Publish some already-published messages a second time."""
    digests = [i for i in await runtime.store.intent_find(states=list(TERMINAL), channel="email",
                                                          limit=DUPLICATED)]
    now = runtime.clock.now()
    await runtime.transport.publish("email", [
        OutgoingMessage(message_id=i.key, body=Message(key=i.key).encode()) for i in digests],
        now=now)
    return len(digests)


async def retried_pass(runtime: Runtime) -> int:
    """Run the scheduler pass again, and re-admit the first page from a stale high-water
    mark, as a retried trigger would: every key exists, so nothing new is admitted."""
    scheduler = runtime.scheduler()
    result = await scheduler.run_pass(now=runtime.clock.now())
    campaign = runtime.campaigns[0]
    first = await campaign.audience.page(None, 1000)
    from tidings.core.keys import campaign_key
    from tidings.core.model import IntentDraft

    occurrences = await runtime.store.occurrence_list(CAMPAIGN)
    occ = occurrences[0]
    drafts = [IntentDraft(
        key=campaign_key(CAMPAIGN, occ.logical_date, m.id, "email", campaign.version),
        channel="email", recipient_id=m.id, address=m.email or "", template="weekly-digest/v3",
        due_at=occ.logical_at, campaign=CAMPAIGN, occurrence=occ.id)
        for m in first if m.active and m.email]
    again = await runtime.store.intent_admit(drafts, now=runtime.clock.now())
    return result.admitted + len(again)


def expected_intents(customers: Customers) -> dict[str, int]:
    """Intents per channel the demo will create, known before admission starts: a digest
    for every active customer (each has an email address), and a shipment update by email
    and by SMS for every ``SHIPMENT_EVERY``-th of them (each has a phone number)."""
    shipments = len(customers.active[::SHIPMENT_EVERY])
    return {"email": len(customers.active) + shipments, "sms": shipments}


async def _progress_loop(runtime: Runtime, progress: Progress | None, totals: dict[str, int],
                         done: asyncio.Event) -> dict[str, dict[str, int]]:
    # The bars' totals are fixed up front, so a bar never goes backwards while admission
    # is still writing intents.
    tasks = {} if progress is None else {
        channel: progress.add_task(channel, total=total) for channel, total in totals.items()}
    counts: dict[str, dict[str, int]] = {}
    while True:
        counts = await runtime.store.intent_counts()
        if progress is not None:
            for channel, by_state in counts.items():
                finished = sum(n for s, n in by_state.items() if s in TERMINAL)
                if channel not in tasks:
                    tasks[channel] = progress.add_task(channel, total=sum(by_state.values()))
                task = progress.tasks[tasks[channel]]
                total = max(task.total or 0, sum(by_state.values()))
                progress.update(tasks[channel], total=total, completed=finished)
        if done.is_set():
            return counts
        await asyncio.sleep(0.5)


def all_terminal(counts: dict[str, dict[str, int]]) -> bool:
    return bool(counts) and all(s in TERMINAL for by in counts.values() for s in by)


def prepare(db: Path | None, recipients: int, seed: int, *, real: bool = False
            ) -> tuple[Path, Path, Customers]:
    """A fresh work dir (or the one ``--db`` names), an empty ledger, seeded customers."""
    if db is not None and Path(db).is_dir():
        raise ConfigurationError("db", f"{db} is a folder; give the path of a SQLite file "
                                       "(created, or emptied, for the demo)")
    workdir = Path(db).parent if db else Path(tempfile.mkdtemp(prefix="tidings-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    db_path = Path(db) if db else workdir / "tidings.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    customers = seed_customers(workdir / "customers.db", recipients, seed)
    sends = sum(expected_intents(customers).values())
    sandbox = sandbox_config(sends)
    if real:
        sandbox = {**sandbox, "lost_response": REAL_LOST_RESPONSE}
    (workdir / "sandbox.json").write_text(json.dumps(sandbox))
    return workdir, db_path, customers


async def demo(*, recipients: int, db: Path | None, seed: int, as_json: bool,
               started: float, store: str | None = None, reset: bool = False,
               keep: bool = False, real: bool = False,
               transport: str = "sql", batch: bool = False) -> dict[str, Any]:
    """Run the demo and report. Its work folder is a temporary one, removed at the end
    unless ``keep``; with ``db`` it is that file's folder, always kept."""
    console = Console(stderr=True)
    quiet = as_json or not console.is_terminal
    rng = random.Random(seed)

    def say(text: str) -> None:
        if not as_json:
            console.print(text)

    prepared = await asyncio.to_thread(prepare_postgres, store, reset=reset) if store else None
    workdir, db_path, customers = await asyncio.to_thread(prepare, db, recipients, seed,
                                                          real=real)
    store_url = store or f"sqlite:///{db_path}"
    transport = demo_transport(transport)
    keep = keep or db is not None
    say(f"[bold]tidings demo[/bold]: {recipients:,} customers, work dir {workdir}"
        + ("" if keep else " (removed at the end; --keep keeps it)"))
    if store:
        from tidings.stores.postgres_db import redact

        say(f"store {redact(store)}: {prepared}")
    if not is_store_queue(transport):
        say(f"transport {redact_url(transport)}: admission writes the outbox, the relay "
            "publishes")
    offset = simulated_offset(time.time())
    api_port = free_port() if real else None
    extra: list[str] = []
    if real:
        os.environ.update(REAL_ENV)  # the demo's processes read their credentials here
        hooks = (f"http://{REAL_ENV['POSTMARK_WEBHOOK_USERNAME']}:"
                 f"{REAL_ENV['POSTMARK_WEBHOOK_PASSWORD']}@127.0.0.1:{api_port}"
                 "/v1/webhooks/postmark")
        extra = ["--dialect", "postmark", "--dialect", "twilio", "--postmark-webhook", hooks,
                 "--twilio-auth-token-env", "TWILIO_AUTH_TOKEN", "--clock-offset", str(offset)]
    sandbox, url = await start_sandbox(workdir, seed, *extra)
    say(f"sandbox provider at {url} (quota email {SANDBOX['quotas']['email']}/s, "  # type: ignore[index]
        f"sms {SANDBOX['quotas']['sms']}/s; 429s, 5xx, timeouts, lost responses on)")  # type: ignore[index]
    if real:
        say("email through the Postmark adapter"
            + (f" (its batch endpoint, {BATCH['max_messages']} messages a request)"
               if batch else "")
            + ", SMS through the Twilio adapter, against the sandbox speaking their "
            "dialects (dedupe off); webhooks to tidings api")
    config = workdir / "tidings.toml"
    await asyncio.to_thread(config.write_text, _toml(settings_for(
        workdir, store_url, customers.path, url, offset, api_port, transport, batch)))
    try:
        settings = await asyncio.to_thread(Settings.load, config)
        runtime = await build_runtime(settings)
    except BaseException:
        # Nothing ran yet (a broker out of reach, say): the sandbox and the work folder
        # go with the error, as they would at the end.
        await _stop(sandbox)
        await asyncio.to_thread(clean_up, workdir, keep=keep)
        raise
    procs = Procs(workdir, config)
    injected: dict[str, Any] = {}
    phases: dict[str, float] = {}
    try:
        local = datetime.fromtimestamp(runtime.clock.now(), ZoneInfo(ZONE))
        say(f"simulated time {local:%a %Y-%m-%d %H:%M:%S %Z}")
        if real:
            await procs.start("api", "api")
            await _wait_healthy(f"http://127.0.0.1:{api_port}/healthz")
        await procs.start("scheduler", "scheduler")
        for name, channel in (("email-1", "email"), ("email-2", "email"), ("sms-1", "sms")):
            await procs.start(name, "worker", "--channel", channel)
        shipments = await notify_shipments(runtime, customers, rng)
        say(f"{len(shipments):,} shipment-update intents created "
            f"({CANCELLED_SHIPMENTS} shipments cancelled)")
        done = asyncio.Event()
        progress = None if quiet else Progress(
            TextColumn("{task.description:>6}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console)
        if progress is not None:
            progress.start()
        watcher = asyncio.create_task(_progress_loop(runtime, progress,
                                                     expected_intents(customers), done))
        killed = duplicated = retried = False
        phases["started_s"] = round(time.monotonic() - started, 2)
        deadline = time.monotonic() + DEADLINE_S
        try:
            while time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                counts = await runtime.store.intent_counts()
                email = counts.get("email", {})
                finished = sum(n for s, n in email.items() if s in TERMINAL)
                occurrences = await runtime.store.occurrence_list(CAMPAIGN)
                admitted = bool(occurrences) and occurrences[0].status == "done"
                if not killed and finished > 0.25 * len(customers.active):
                    victim = procs.children["email-1"]
                    victim.kill()
                    await victim.wait()
                    injected["worker_killed"] = "email-1 (SIGKILL) at "\
                        f"{finished} email intents done"
                    await procs.start("email-1b", "worker", "--channel", "email")
                    killed = True
                if admitted and not duplicated:
                    injected["duplicate_publications"] = await inject_duplicates(runtime)
                    duplicated = True
                if admitted and not retried:
                    injected["retried_pass_new_intents"] = await retried_pass(runtime)
                    retried = True
                if admitted and "admitted_s" not in phases:
                    phases["admitted_s"] = round(time.monotonic() - started, 2)
                if killed and duplicated and retried and all_terminal(counts) \
                        and await _queues_drained(runtime):
                    phases["delivered_s"] = round(time.monotonic() - started, 2)
                    break
        finally:
            done.set()
            await watcher
            if progress is not None:
                progress.stop()
    finally:
        await procs.stop_all()
        stats = await _sandbox_stats(url)
        await asyncio.to_thread((workdir / "sandbox-stats.json").write_text, json.dumps(stats))
        await _stop(sandbox)
        report = await build_report(runtime, stats, recipients=recipients,
                                    elapsed_s=time.monotonic() - started, injected=injected)
        report["transport"] = redact_url(transport)
        if not keep:
            await drop_transport(runtime)
        await runtime.close()
    phases["stopped_s"] = round(time.monotonic() - started, 2)
    report["phases"] = phases
    kept = await asyncio.to_thread(clean_up, workdir, keep=keep)
    report["workdir"] = str(workdir) if keep else None
    report["kept"] = kept
    if store:
        from tidings.stores.postgres_db import redact

        report["store"] = redact(store)
    if not as_json:
        render_report(report, Console())
    return report


async def _stop(sandbox: asyncio.subprocess.Process) -> None:
    """Stop the sandbox process (SIGTERM; it has 10 s)."""
    if sandbox.returncode is None:
        sandbox.send_signal(signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(sandbox.wait(), 10)


async def _wait_healthy(url: str, timeout_s: float = 30.0) -> None:
    """Wait until ``url`` answers 200 (the API process is up)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the API did not come up at {url}")
            await asyncio.sleep(0.2)


async def _queues_drained(runtime: Runtime) -> bool:
    now = runtime.clock.now()
    for channel in runtime.channels:
        depth = await runtime.transport.depth(channel, now=now)
        if depth.ready or depth.delayed or depth.in_flight:
            return False
    return True


async def _sandbox_stats(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as client:
        answer = await client.get(f"{url}/v1/stats")
        answer.raise_for_status()
        stats: dict[str, Any] = answer.json()
        return stats


def run_demo(*, recipients: int, db: Path | None, seed: int, as_json: bool,
             store: str | None = None, reset: bool = False, keep: bool = False,
             real_providers: bool = False, transport: str = "sql",
             batch: bool = False) -> dict[str, Any]:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return asyncio.run(demo(recipients=recipients, db=db, seed=seed, as_json=as_json,
                            started=time.monotonic(), store=store, reset=reset, keep=keep,
                            real=real_providers or batch, transport=transport,
                            batch=batch))
