"""A queue message can never take a worker down (both stores, a real worker process).

Hostile bodies are written straight into the channel's queue, ahead of valid
messages: bytes that are not UTF-8 (SQLite), JSON nested 100,000 deep, keys holding
NUL, a lone surrogate or a control character, wrong types, huge numbers, and a set
that hypothesis makes. The witness is the sandbox HTTP server's own count: every
valid message behind the bad ones is accepted once, every bad one is a dead letter
with a reason after one receive, and the worker process never exits.

PostgreSQL needs a server (see tests/conftest.py): skips without one, fails under CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.keys import storable
from tidings.core.model import OutgoingMessage
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import SandboxConfig, SandboxServer, serve

pytestmark = pytest.mark.slow

GUARD_S = 90.0  # only against a hang

#: What a hostile publisher (or a corrupted row) can put in a queue, as text.
HOSTILE_TEXT = [
    "[" * 100_000 + "]" * 100_000,
    "{" * 50_000,
    '{"v":1,"key":' + "[" * 5_000 + "]" * 5_000 + "}",
    '{"v":1,"key":"poison\\u0000key"}',
    '{"v":1,"key":"\\ud800"}',
    '{"v":1,"key":"a\\udfffb"}',
    '{"v":1,"key":"bell\\u0007"}',
    '{"v":1,"key":"has space"}',
    '{"v":1,"key":""}',
    '{"v":1,"key":"' + "k" * 600 + '"}',
    '{"v":true,"key":"order-0:email"}',
    '{"v":1.0,"key":"order-0:email"}',
    '{"v":1e999,"key":"order-0:email"}',
    '{"v":' + "9" * 5_000 + ',"key":"order-0:email"}',
    '{"v":2,"key":"order-0:email"}',
    '{"v":1,"key":7}',
    '{"v":1,"key":["order-0:email"]}',
    '{"v":1,"key":"no-such-intent"}',
    "null",
    "not json at all",
]
#: ... and as raw bytes, which only SQLite's TEXT column lets through.
HOSTILE_BYTES = [b"\xff\xfe\x00{", b'{"v":1,"key":"\xc3\x28"}']

VALID = 200


@dataclass
class Rig:
    backend: str
    url: str
    settings_file: Path
    runtime: Runtime
    server: SandboxServer
    stderr: Path
    worker: asyncio.subprocess.Process | None = None

    def accepted(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.server.core.stats()["channels"].get("email", {})
        return stats

    async def insert(self, bodies: list[str | bytes]) -> None:
        """Write bodies straight into the email queue, as a foreign publisher would."""
        if self.backend == "sqlite":
            path = self.url.removeprefix("sqlite:///")
            with sqlite3.connect(path) as conn:
                conn.executemany(
                    "INSERT INTO messages (queue, message_id, body, available_at, enqueued_at)"
                    " VALUES ('email', ?, CAST(? AS TEXT), 0, 0)",
                    [(f"hostile-{i}", b if isinstance(b, bytes)
                      else b.encode("utf-8", "surrogatepass"))
                     for i, b in enumerate(bodies)])
            return
        text = [b for b in bodies if isinstance(b, str)]
        assert all(storable(b) for b in text), "PostgreSQL text cannot hold these"
        await self.runtime.transport.publish("email", [
            OutgoingMessage(message_id=f"hostile-{i}", body=b) for i, b in enumerate(text)],
            now=0.0)

    async def notify(self, prefix: str, count: int) -> None:
        await self.runtime.notify_many([
            NotifyRequest(key=f"{prefix}-{i}", recipient={"id": f"c{i}",
                          "email": f"c{i}@example.com"}, channels=["email"], template="t/v1")
            for i in range(count)])

    async def start(self) -> None:
        with self.stderr.open("wb") as err:
            self.worker = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tidings", "worker", "--channel", "email",
                "--config", str(self.settings_file), stdout=asyncio.subprocess.DEVNULL,
                stderr=err, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    async def stop(self) -> None:
        if self.worker is None or self.worker.returncode is not None:
            return
        self.worker.terminate()
        try:
            await asyncio.wait_for(self.worker.wait(), 20)
        except TimeoutError:
            self.worker.kill()
            await self.worker.wait()

    def alive(self) -> bool:
        return self.worker is not None and self.worker.returncode is None

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")[-3000:]

    async def until(self, predicate: Callable[[], bool], what: str) -> None:
        for _ in range(int(GUARD_S / 0.05)):
            if predicate():
                return
            assert self.alive(), f"the worker exited while waiting for {what}:\n{self.log()}"
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; sandbox: {self.accepted()}")

    async def until_drained(self, dead: int) -> None:
        """Until ``dead`` dead letters and nothing else is left on the queue (all acked)."""
        for _ in range(int(GUARD_S / 0.05)):
            depth = await self.runtime.transport.depth("email", now=0.0)
            if depth.dead >= dead and depth.ready + depth.delayed + depth.in_flight == 0:
                return
            assert self.alive(), self.log()
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {dead} dead letters and an empty "
                             f"queue: {depth}")


@pytest.fixture(params=["sqlite", "postgres"])
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    backend = request.param
    url = (f"sqlite:///{tmp_path / 't.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    server = await serve(SandboxConfig(dedupe=False, quotas={"email": 100_000}), "127.0.0.1", 0)
    settings_file = tmp_path / "tidings.toml"
    settings_file.write_text(
        f'store = "{url}"\n'
        f'[channels.email]\nmax_in_flight = 16\n'
        f'provider = {{ kind = "sandbox", url = "{server.url}" }}\n')
    runtime = await build_runtime(Settings.load(settings_file))
    one = Rig(backend=backend, url=url, settings_file=settings_file, runtime=runtime,
              server=server, stderr=tmp_path / "worker.log")
    try:
        yield one
    finally:
        await one.stop()
        await runtime.close()
        await server.close()


def hostile(backend: str) -> list[str | bytes]:
    bodies: list[str | bytes] = list(HOSTILE_TEXT)
    if backend == "sqlite":
        bodies += HOSTILE_BYTES
    return bodies


async def check_dead_letters(rig: Rig, expected: int) -> None:
    letters = await rig.runtime.transport.dead_letters("email", limit=10_000)
    hostile_letters = [d for d in letters if d.message_id.startswith("hostile-")]
    assert len(hostile_letters) == expected, [d.reason for d in hostile_letters]
    for letter in hostile_letters:
        assert letter.reason.strip(), letter
        assert letter.receive_count == 1, (letter.message_id, letter.receive_count)


async def test_valid_messages_behind_poison_are_all_delivered(rig: Rig) -> None:
    bad = hostile(rig.backend)
    await rig.insert(bad)          # first in the queue: the worker meets them first
    await rig.notify("order", VALID)
    await rig.start()

    await rig.until(lambda: rig.accepted().get("accepted_keys", 0) >= VALID,
                    "every valid message accepted")
    await rig.until_drained(len(bad))

    assert rig.alive(), rig.log()
    await check_dead_letters(rig, len(bad))
    stats = rig.accepted()
    assert stats["accepted_keys"] == VALID
    assert stats["keys_accepted_twice"] == 0
    assert "Traceback" not in rig.log()
    # `tidings dlq list` shows what it holds, poison included.
    listed = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidings", "dlq", "list", "--channel", "email", "--json",
        "--config", str(rig.settings_file), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await listed.communicate()
    assert listed.returncode == 0, err.decode(errors="replace")
    rows = json.loads(out)["dead_letters"]
    assert len(rows) == len(bad) and all(r["reason"] for r in rows)


# Bodies hypothesis makes: any text, JSON of any shape (with the fields a message has),
# and, on SQLite, any bytes.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["v", "key", "x"]), inner, max_size=3),
    max_leaves=12)
_TEXT_BODIES = st.one_of(st.text(max_size=200), _JSON.map(json.dumps),
                         st.builds(lambda v, k: json.dumps({"v": v, "key": k}),
                                   st.one_of(st.just(1), _JSON), st.text(max_size=40)))


def fuzzed(backend: str, count: int) -> list[str | bytes]:
    strategy: st.SearchStrategy[str | bytes] = (
        st.one_of(_TEXT_BODIES, st.binary(max_size=200)) if backend == "sqlite"
        else _TEXT_BODIES.filter(storable))
    found: list[str | bytes] = []

    @settings(max_examples=count, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(body: str | bytes) -> None:
        found.append(body)

    collect()
    return found


async def test_fuzzed_bodies_are_dead_letters_and_never_stop_the_channel(rig: Rig) -> None:
    await rig.start()
    bodies = fuzzed(rig.backend, 80)
    assert len(bodies) >= 40
    await rig.insert(bodies)
    await rig.notify("after-fuzz", 20)

    await rig.until(lambda: rig.accepted().get("accepted_keys", 0) >= 20,
                    "the valid messages behind the fuzzed ones")
    await rig.until_drained(len(bodies))

    assert rig.alive(), rig.log()
    await check_dead_letters(rig, len(bodies))
    assert rig.accepted()["keys_accepted_twice"] == 0
    assert "Traceback" not in rig.log()
