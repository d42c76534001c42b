"""The batcher: sends started together share provider requests, each keeps its own
outcome, and a lone message waits no longer than the linger (delivery/batching.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from tidings.config.settings import Settings
from tidings.core.errors import ConfigurationError, SendDeadlineExceeded
from tidings.core.model import SendRequest
from tidings.core.outcomes import Accepted, Outcome, Permanent
from tidings.delivery.batching import BatchAnswerMismatch, Batcher
from tidings.runtime import build_runtime


def request(i: int) -> SendRequest:
    return SendRequest(key=f"k{i}", channel="email", to=f"r{i}@example.com", template="t",
                       data_json="{}", recipient_id=f"c{i}")


class Batches:
    """A batch provider that records each request and accepts all but odd keys' ``bad``."""

    batch_max_messages = 500

    def __init__(self, *, hang: asyncio.Event | None = None, answer_short: bool = False,
                 raises: Exception | None = None) -> None:
        self.calls: list[list[str]] = []
        self.hang = hang
        self.answer_short = answer_short
        self.raises = raises

    async def send_batch(self, requests: Sequence[SendRequest]) -> list[Outcome]:
        self.calls.append([r.key for r in requests])
        if self.hang is not None:
            await self.hang.wait()
        if self.raises is not None:
            raise self.raises
        outcomes: list[Outcome] = [
            Accepted(receipt=f"m-{r.key}") if r.key != "k3" else Permanent(reason="bad")
            for r in requests]
        return outcomes[:-1] if self.answer_short else outcomes


async def test_sends_started_together_share_requests_of_at_most_max_messages() -> None:
    provider = Batches()
    batcher = Batcher(provider, max_messages=4, linger_s=0.02)
    outcomes = await asyncio.gather(*(batcher.send(request(i)) for i in range(10)))
    # two full requests at once, the last two after the linger
    assert [len(c) for c in provider.calls[:2]] == [4, 4]
    assert outcomes[0] == Accepted(receipt="m-k0")
    assert outcomes[3] == Permanent(reason="bad")  # its own item, not its neighbours'
    assert all(o == Accepted(receipt=f"m-k{i}") for i, o in enumerate(outcomes) if i != 3)
    assert sorted(k for c in provider.calls for k in c) == sorted(f"k{i}" for i in range(10))
    assert (batcher.requests, batcher.messages) == (3, 10)


async def test_a_lone_message_leaves_after_the_linger() -> None:
    provider = Batches()
    batcher = Batcher(provider, max_messages=100, linger_s=0.01)
    outcome = await asyncio.wait_for(batcher.send(request(1)), 5)
    assert outcome == Accepted(receipt="m-k1") and provider.calls == [["k1"]]


async def test_a_send_that_stops_waiting_before_its_batch_leaves_is_not_sent() -> None:
    provider = Batches()
    batcher = Batcher(provider, max_messages=100, linger_s=0.05)
    gone = asyncio.ensure_future(batcher.send(request(1)))
    kept = asyncio.ensure_future(batcher.send(request(2)))
    await asyncio.sleep(0)
    gone.cancel()
    assert await kept == Accepted(receipt="m-k2")
    assert provider.calls == [["k2"]]


@pytest.mark.parametrize("fault", ["raises", "short"])
async def test_a_request_that_fails_or_answers_the_wrong_count_fails_each_send(
        fault: str) -> None:
    provider = (Batches(raises=OSError("reset")) if fault == "raises"
                else Batches(answer_short=True))
    batcher = Batcher(provider, max_messages=3, linger_s=0.0)
    results = await asyncio.gather(*(batcher.send(request(i)) for i in range(3)),
                                   return_exceptions=True)
    expected = OSError if fault == "raises" else BatchAnswerMismatch
    assert all(isinstance(r, expected) for r in results), results


async def test_a_request_past_its_deadline_is_cut_off_for_every_send() -> None:
    provider = Batches(hang=asyncio.Event())
    batcher = Batcher(provider, max_messages=2, linger_s=0.0, deadline_s=0.05)
    results = await asyncio.gather(*(batcher.send(request(i)) for i in range(2)),
                                   return_exceptions=True)
    assert all(isinstance(r, SendDeadlineExceeded) for r in results), results


async def test_close_sends_what_is_gathered() -> None:
    provider = Batches()
    batcher = Batcher(provider, max_messages=100, linger_s=60.0)
    waiting = asyncio.ensure_future(batcher.send(request(1)))
    await asyncio.sleep(0)
    await batcher.close()
    assert await waiting == Accepted(receipt="m-k1")


async def test_a_batch_table_on_a_provider_without_a_batch_endpoint_is_refused(
        tmp_path: Path) -> None:
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "channels": {"email": {"batch": {"max_messages": 50},
                               "provider": {"kind": "sandbox-twin"}}},
    })
    runtime = await build_runtime(settings)
    try:
        with pytest.raises(ConfigurationError) as refused:
            runtime.worker("email")
    finally:
        await runtime.close()
    assert refused.value.field == "channels.email.batch"
    assert "no batch endpoint" in str(refused.value)


@pytest.mark.parametrize(("table", "field"), [
    ({"max_messages": 1}, "max_messages"), ({"linger_s": -1}, "linger_s"),
    ({"max_messages": 100, "linger": 1}, "linger")])
def test_bad_batch_settings_name_their_field(table: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Settings.parse({"store": "sqlite:///:memory:",
                        "channels": {"email": {"batch": table,
                                               "provider": {"kind": "sandbox-twin"}}}})
    assert f"channels.email.batch.{field}" in str(refused.value)


async def test_without_a_batch_table_a_worker_sends_one_request_per_message(
        tmp_path: Path) -> None:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 't.db'}",
                               "channels": {"email": {"provider": {"kind": "sandbox-twin"}}}})
    runtime = await build_runtime(settings)
    try:
        assert runtime.worker("email").batcher is None
    finally:
        await runtime.close()
