"""Digests under chaos, judged by a real SMTP server's inbox.

A ``tidings scheduler`` and a ``tidings worker`` run as processes on SQLite and on
PostgreSQL, on the store's own queue and through Redis Streams and RabbitMQ (the
outbox relay publishing each digest); the SMTP server is
``tests/support/smtp_server.py`` in a process of its own. The test notifies events for
a few recipients one at a time across several short windows, replays some, cancels
some, and SIGKILLs the scheduler every second or so (and the worker twice), restarting
each. When every window is done, the inbox must hold every kept event in exactly one
message, no cancelled event in any, and no digest twice: a window's digest is sent
once, whoever closed it and however often a closer died.
"""

from __future__ import annotations

import asyncio
import email.policy
import os
import random
import re
import signal
import sys
import time
from collections import Counter
from email.parser import BytesParser
from pathlib import Path

import pytest

from tidings import Digest
from tidings.config.settings import Settings
from tidings.core.states import State
from tidings.operate.operations import uncertain_resolve
from tidings.runtime import Runtime, build_runtime

pytestmark = pytest.mark.slow

SERVER = Path(__file__).parents[1] / "support" / "smtp_server.py"
RECIPIENTS = 5
EVENTS = 12  # per recipient
WINDOW_S = 1.5
GUARD_S = 120.0


@pytest.fixture(params=["sqlite", "postgres", "sqlite+redis", "postgres+rabbitmq"])
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str | None]:
    """The store's URL, and a broker transport's (None: the store's own queue)."""
    store, _, broker = str(request.param).partition("+")
    url = (f"sqlite:///{tmp_path / 'tidings.db'}" if store == "sqlite"
           else str(request.getfixturevalue("pg_url")))
    fixture = {"redis": "redis_url", "rabbitmq": "amqp_url"}.get(broker)
    return url, None if fixture is None else str(request.getfixturevalue(fixture))


def write_settings(tmp_path: Path, urls: tuple[str, str | None], smtp_port: int) -> Path:
    folder = tmp_path / "templates" / "activity" / "v1"
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text("{{ count }} new events")
    (folder / "body.txt").write_text("{% for item in items %}<{{ item.event }}>{% endfor %}")
    config = tmp_path / "tidings.toml"
    store_url, transport = urls
    broker = "" if transport is None else f'transport = "{transport}"\n'
    config.write_text(f'''
store = "{store_url}"
{broker}[scheduler]
interval_s = 0.2
[worker]
reconcile_every_s = 0.5
[channels.email]
kind = "email"
templates = "{tmp_path / 'templates'}"
[channels.email.provider]
kind = "smtp"
host = "127.0.0.1"
port = {smtp_port}
security = "none"
from_address = "digest@example.com"
''')
    return config


async def start(config: Path, log: Path, *command: str) -> asyncio.subprocess.Process:
    with log.open("ab") as sink:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", *command, "--config", str(config),
            stdout=asyncio.subprocess.DEVNULL, stderr=sink,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def kill(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGKILL)
    await process.wait()


async def all_sent(runtime: Runtime) -> bool:
    pending = await runtime.store.digest_pending()
    states = (await runtime.store.intent_counts()).get("email", {})
    unfinished = sum(n for state, n in states.items() if state != "accepted")
    return pending.windows == 0 and unfinished == 0 and states.get("accepted", 0) > 0


def inbox_keys(inbox: Path) -> set[str]:
    """The delivery keys (``X-Tidings-Key``) of the messages in the inbox."""
    parser = BytesParser(policy=email.policy.default)
    return {str(parser.parsebytes(path.read_bytes())["X-Tidings-Key"])
            for path in (inbox / "new").glob("*.eml")}


async def settle_held(runtime: Runtime, inbox: Path) -> None:
    """Decide the held sends as the operator does, by the witness: a worker SIGKILLed
    while a digest was on the wire leaves it uncertain, and SMTP has no lookup, so it
    is held (more often on a loaded machine, where a send takes longer). One whose
    message is in the inbox was accepted; one whose message is not is sent again."""
    held = await runtime.store.intent_find(states=[State.HELD], channel="email", limit=1000)
    if not held:
        return
    landed = inbox_keys(inbox)
    for decision, keys in (("accepted", [i.key for i in held if i.key in landed]),
                           ("resend", [i.key for i in held if i.key not in landed])):
        if keys:
            await uncertain_resolve(runtime.store, runtime.transport, decision=decision,
                                    who="the test, by the inbox", keys=keys,
                                    now=runtime.clock.now())


def inbox_events(inbox: Path) -> tuple[list[list[str]], list[str]]:
    """Every message's events, in order, and every message's Message-ID."""
    parser = BytesParser(policy=email.policy.default)
    messages = [parser.parsebytes(path.read_bytes())
                for path in sorted((inbox / "new").glob("*.eml"))]
    events = []
    for message in messages:
        body = message.get_body(preferencelist=("plain",))
        assert body is not None
        events.append(re.findall(r"<([^>]+)>", body.get_content()))
    return events, [str(m["Message-ID"]) for m in messages]


async def test_every_event_in_exactly_one_digest_while_the_scheduler_is_killed(
        tmp_path: Path, urls: tuple[str, str | None]) -> None:
    inbox = tmp_path / "inbox"
    smtp = await asyncio.create_subprocess_exec(
        sys.executable, str(SERVER), "--dir", str(inbox), "--security", "none",
        stdout=asyncio.subprocess.PIPE)
    assert smtp.stdout is not None
    said = (await asyncio.wait_for(smtp.stdout.readline(), 30)).decode().strip()
    assert said.startswith("listening on "), said
    config = write_settings(tmp_path, urls, int(said.rsplit(" ", 1)[1]))
    runtime = await build_runtime(Settings.load(config))
    rng = random.Random(20261205)
    scheduler = await start(config, tmp_path / "scheduler.log", "scheduler")
    worker = await start(config, tmp_path / "worker.log", "worker", "--channel", "email")
    kept: set[str] = set()
    cancelled: set[str] = set()
    kills = 0
    try:
        order = [(r, n) for n in range(EVENTS) for r in range(RECIPIENTS)]
        next_kill = time.monotonic() + 0.5
        for r, n in order:
            event = f"r{r}-e{n}"
            digest = Digest(key=f"activity:cust-{r}", window_s=WINDOW_S, max_items=5)
            recipient = {"id": f"cust-{r}", "email": f"cust{r}@example.com"}
            added = await runtime.notify(key=event, recipient=recipient, channels=["email"],
                                         template="activity/v1", data={"event": event},
                                         digest=digest)
            assert added.created
            if rng.random() < 0.2:  # a replay of the same event: the same item
                again = await runtime.notify(key=event, recipient=recipient,
                                             channels=["email"], template="activity/v1",
                                             data={"event": event}, digest=digest)
                assert not again.created and again.window_id == added.window_id
            if rng.random() < 0.1 and await runtime.cancel_digest_item(digest.key, event):
                cancelled.add(event)
            else:
                kept.add(event)
            await asyncio.sleep(rng.uniform(0.02, 0.15))
            if time.monotonic() >= next_kill:
                await kill(scheduler)
                scheduler = await start(config, tmp_path / "scheduler.log", "scheduler")
                kills += 1
                if kills in (2, 4):
                    await kill(worker)
                    worker = await start(config, tmp_path / "worker.log", "worker",
                                         "--channel", "email")
                next_kill = time.monotonic() + rng.uniform(0.4, 1.0)

        deadline = time.monotonic() + GUARD_S
        while not await all_sent(runtime):
            if time.monotonic() > deadline:
                states = await runtime.store.intent_counts()
                raise AssertionError(f"not all sent within {GUARD_S:g} s: {states}, "
                                     f"{await runtime.store.digest_pending()}")
            await settle_held(runtime, inbox)
            await asyncio.sleep(0.3)
        await asyncio.sleep(1.0)  # a late duplicate would have landed by now
    finally:
        for process in (scheduler, worker):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.wait(), 30)
        await kill(smtp)
        accepted = (await runtime.store.intent_counts()).get("email", {}).get("accepted", 0)
        await runtime.close()

    events, ids = inbox_events(inbox)
    seen = Counter(e for message in events for e in message)
    assert kills >= 3
    assert set(seen) == kept, (kept - set(seen), set(seen) - kept)
    assert all(count == 1 for count in seen.values()), seen.most_common(3)
    assert not cancelled & set(seen)
    assert len(ids) == len(set(ids)) == accepted  # no digest twice
    assert all(1 <= len(message) <= 5 for message in events)
    # items of one recipient arrive in the order they were notified
    for message in events:
        numbers = [int(e.split("-e")[1]) for e in message]
        assert numbers == sorted(numbers), message
        assert len({e.split("-")[0] for e in message}) == 1, message
