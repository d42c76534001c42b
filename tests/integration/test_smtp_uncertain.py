"""SMTP's documented trade-off, against an aiosmtpd server that takes the whole message
and then drops the connection before its reply: SMTP cannot be asked, so ``hold``
leaves one copy in the inbox and a held intent for an operator, while ``resend`` (the
explicit at-least-once choice) delivers a second copy with the same Message-ID."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support.fake_http_providers import Scenario
from support.smtp_side import LocalSmtp, SmtpSide, serve_smtp
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.states import State
from tidings.runtime import Runtime, build_runtime

T0 = 1_780_000_000.0


@pytest.fixture
async def smtp() -> AsyncIterator[LocalSmtp]:
    local = await serve_smtp(SmtpSide())
    try:
        yield local
    finally:
        await local.close()


async def runtime_for(tmp_path: Path, smtp: LocalSmtp, policy: str) -> tuple[Runtime, FakeClock]:
    folder = tmp_path / "templates" / "shipped" / "v1"
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text("Shipped")
    (folder / "body.txt").write_text("Your order shipped.")
    clock = FakeClock(T0)
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "reconciler": {"uncertain_after_s": 1.0},
        "channels": {"email": {
            "kind": "email", "templates": str(tmp_path / "templates"), "uncertain": policy,
            "provider": {"kind": "smtp", "host": "127.0.0.1", "port": smtp.port,
                         "security": "none", "from_address": "news@example.com"}}},
    })
    return await build_runtime(settings, clock=clock, campaigns=[]), clock


@pytest.mark.parametrize(("policy", "copies", "final"), [
    ("hold", 1, State.HELD), ("resend", 2, State.ACCEPTED)])
async def test_a_connection_dropped_after_data(tmp_path: Path, smtp: LocalSmtp, policy: str,
                                               copies: int, final: State) -> None:
    # given a server that takes the message, then drops the connection before its reply
    runtime, clock = await runtime_for(tmp_path, smtp, policy)
    try:
        smtp.side.scenario = Scenario.DROP_AFTER_SEND
        [key] = await runtime.notify(key="order-1", recipient={"id": "c1",
                                                               "email": "ada@example.com"},
                                     channels=["email"], template="shipped/v1")
        worker = runtime.worker("email", "w1")
        while await worker.run_once():
            pass
        assert (await runtime.store.intent_get(key)).state is State.UNCERTAIN  # type: ignore[union-attr]
        smtp.side.scenario = Scenario.ACCEPT

        # when the reconciler settles it by the channel's policy, and the worker goes on
        for _ in range(3):
            clock.advance(2)
            await runtime.reconciler().run_pass(now=clock.now())
            while await worker.run_once():
                pass
        intent = await runtime.store.intent_get(key)
    finally:
        await runtime.close()

    # then the inbox holds one copy (hold) or two with the same Message-ID (resend)
    assert intent is not None and intent.state is final
    assert smtp.side.keys_received == [key] * copies
    assert len({str(m["Message-ID"]) for m in smtp.side.messages}) == 1
