"""Lost answers on the real adapters, end to end on the embedded store and the fake
clock: each adapter against its provider's fake (which keeps no idempotency key, so a
second send of a key would be a second message). A send the provider took but whose
answer was lost is found by the adapter's lookup and never sent again; one that never
arrived is not found and sent once more under the same key."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.fake_http_providers import (
    FakeApi,
    FakeJsonMailer,
    FakePostmark,
    FakeSendGrid,
    FakeTwilio,
    Scenario,
    mock_transport,
)
from tidings.config.providers import (
    HttpProviderSettings,
    PostmarkProviderSettings,
    SendGridProviderSettings,
    TwilioProviderSettings,
)
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.states import State
from tidings.providers.base import Provider
from tidings.providers.build import build_provider_from
from tidings.runtime import Runtime, build_runtime

T0 = 1_780_000_000.0
BASE = "https://provider.test"
ENV = {"TWILIO_AUTH_TOKEN": "tw-1", "SENDGRID_API_KEY": "SG.2", "POSTMARK_SERVER_TOKEN": "pm-3",
       "MAILER_TOKEN": "m-4"}


@dataclass(frozen=True)
class Shape:
    api: type[FakeApi]
    kind: str
    settings: Callable[[], Any]
    to: str


SHAPES = {
    "postmark": Shape(FakePostmark, "email", lambda: PostmarkProviderSettings(
        from_address="news@tidings.test", base_url=BASE), "ada@example.com"),
    "sendgrid": Shape(FakeSendGrid, "email", lambda: SendGridProviderSettings(
        from_address="news@tidings.test", base_url=BASE), "ada@example.com"),
    "twilio": Shape(FakeTwilio, "sms", lambda: TwilioProviderSettings(
        account_sid=FakeTwilio.account_sid, from_number="+15550001111", base_url=BASE,
        status_callback="https://hooks.test/v1/webhooks/twilio"), "+15557654321"),
    "http": Shape(FakeJsonMailer, "email", lambda: HttpProviderSettings(
        url=f"{BASE}/emails", body={"to": "to", "text": "text", "tags.key": "key"},
        headers={"Authorization": "Bearer ${MAILER_TOKEN}"}, message_id_path="data.id",
        lookup_url=f"{BASE}/emails/by-ref/{{key}}", lookup_status_path="data.status"),
        "ada@example.com"),
}


@dataclass
class Line:
    rt: Runtime
    clock: FakeClock
    api: FakeApi
    shape: Shape

    async def send(self, name: str, scenario: Scenario) -> str:
        """Given a send of ``name`` that the provider side meets with ``scenario``."""
        self.api.scenario = scenario
        address = "email" if self.shape.kind == "email" else "phone"
        [key] = await self.rt.notify(key=name, recipient={"id": name, address: self.shape.to},
                                     channels=[self.shape.kind], template="shipped/v1")
        worker = self.rt.worker(self.shape.kind, "w1")
        while await worker.run_once():
            pass
        return key

    async def settle(self) -> None:
        self.api.scenario = Scenario.ACCEPT
        self.clock.advance(5)
        await self.rt.reconciler().run_pass(now=self.clock.now())
        self.clock.advance(1)  # a resend's backoff (retry.base_s): the uncertain send failed
        worker = self.rt.worker(self.shape.kind, "w2")
        while await worker.run_once():
            pass

    def copies(self, key: str) -> int:
        return sum(1 for m in self.api.messages if m.key == key)

    async def intent(self, key: str) -> Any:
        found = await self.rt.store.intent_get(key)
        assert found is not None
        return found


@pytest.fixture(params=sorted(SHAPES))
async def line(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Line]:
    shape = SHAPES[request.param]
    clock = FakeClock(T0)
    api = shape.api(clock.now)
    folder = tmp_path / "templates" / "shipped" / "v1"
    folder.mkdir(parents=True)
    (folder / "sms.txt").write_text("Your order shipped.")
    (folder / "subject.txt").write_text("Shipped")
    (folder / "body.txt").write_text("Your order shipped.")
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "reconciler": {"uncertain_after_s": 1.0},
        "channels": {shape.kind: {"kind": shape.kind, "templates": str(tmp_path / "templates"),
                            "lookup_settle_s": 0, "accept_test_domains": True}},
    })
    client = httpx.AsyncClient(transport=mock_transport(api))
    provider: Provider = build_provider_from(shape.settings(), channel=shape.kind, clock=clock,
                                             client=client, env=ENV)
    rt = await build_runtime(settings, clock=clock, providers={shape.kind: provider},
                             campaigns=[])
    try:
        yield Line(rt=rt, clock=clock, api=api, shape=shape)
    finally:
        await rt.close()
        await client.aclose()


async def test_a_lost_answer_is_found_and_never_sent_again(line: Line) -> None:
    # given a send the provider took, whose answer was lost
    key = await line.send("order-1", Scenario.ACCEPT_THEN_DROP)
    assert (await line.intent(key)).state is State.UNCERTAIN

    # when the reconciler settles it by the channel's default policy (lookup)
    await line.settle()

    # then it is accepted under the provider's own id, and the provider holds one copy
    intent = await line.intent(key)
    assert intent.state is State.ACCEPTED
    assert intent.receipt == line.api.receipt_of(key)
    assert line.copies(key) == 1
    assert "resolved_accepted" in [e.type for e in await line.rt.store.events_for(key)]


async def test_a_send_that_never_arrived_is_sent_once_more(line: Line) -> None:
    key = await line.send("order-2", Scenario.DROP_AFTER_SEND)
    assert line.copies(key) == 0

    await line.settle()

    intent = await line.intent(key)
    assert intent.state is State.ACCEPTED and line.copies(key) == 1


async def test_a_failing_read_api_holds_instead_of_resending(line: Line) -> None:
    key = await line.send("order-3", Scenario.ACCEPT_THEN_DROP)
    line.api.lookup_scenario = Scenario.TRY_LATER

    await line.settle()
    assert (await line.intent(key)).state is State.UNCERTAIN
    line.clock.advance(3600)  # hold_s
    await line.settle()

    assert (await line.intent(key)).state is State.HELD
    assert line.copies(key) == 1
