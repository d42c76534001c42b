"""``/v1/unsubscribe/{token}`` on both stores: the link an email carries unsubscribes
with the one-click POST (the preference and the suppression recorded, the next send to
the address ``suppressed`` with no provider call, by the sandbox's counts), a replay
changes nothing, a GET only shows the form, and a bad token is a 404 that says
nothing more, never a 500."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tidings.api import create_app
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.states import State
from tidings.core.suppression import Reason
from tidings.core.unsubscribe import Subject
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox.core import SandboxCore

T0 = 1_786_698_005.0
ENV = {"UNSUB_SECRETS": "unsub-current,unsub-previous"}
ONE_CLICK = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'api.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@dataclass
class Flow:
    runtime: Runtime
    client: httpx.AsyncClient
    core: SandboxCore

    async def send(self, key: str, address: str = "ada@example.com") -> State:
        [made] = await self.runtime.notify(
            key=key, recipient={"id": "cust_1042", "email": address}, channels=["email"],
            template="welcome/v1")
        worker = self.runtime.worker("email")
        while await worker.run_once():
            pass
        intent = await self.runtime.store.intent_get(made)
        assert intent is not None
        return intent.state

    def sends(self) -> int:
        return int(self.core.stats()["total"]["requests"])


@pytest.fixture
async def flow(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
               ) -> AsyncIterator[Flow]:
    for name, text in (("subject.txt", "Welcome"), ("body.txt", "Hello {{ recipient_id }}")):
        path = tmp_path / "templates" / "welcome" / "v1" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setenv("UNSUB_SECRETS", ENV["UNSUB_SECRETS"])  # the worker's gate signs
    clock = FakeClock(T0)
    core = SandboxCore(now=clock.now, seed=1)
    settings = Settings.parse({
        "store": store_url,
        "channels": {"email": {"kind": "email", "templates": str(tmp_path / "templates"),
                               "quota": "50/s"}},
        "unsubscribe": {"base_url": "https://notify.example.com",
                        "secret_env": "UNSUB_SECRETS", "mailto": "unsubscribe@example.com",
                        "notify_templates": ["welcome"]}})
    runtime = await build_runtime(settings, clock=clock, campaigns=[], providers={
        "email": SandboxTwinProvider(core, "email", clock)})
    app = create_app(runtime, env=ENV)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="https://notify.example.com"
    ) as client:
        yield Flow(runtime, client, core)
    await runtime.close()


def link_of(flow: Flow, address: str = "ada@example.com") -> str:
    links = flow.runtime.unsubscribe_links
    assert links is not None
    headers = links.headers(Subject(recipient_id="cust_1042", address=address,
                                    channel="email"))
    return headers["List-Unsubscribe"].split(">")[0].removeprefix("<")


async def test_the_one_click_post_unsubscribes_and_the_next_send_is_suppressed(
        flow: Flow) -> None:
    assert await flow.send("before") == State.ACCEPTED
    url = link_of(flow, "Ada@Example.com")

    page = await flow.client.get(url)
    assert page.status_code == 200 and 'method="post"' in page.text
    assert 'name="List-Unsubscribe" value="One-Click"' in page.text
    assert page.headers["cache-control"] == "no-store"
    assert await flow.runtime.preferences("cust_1042") == []  # a GET changes nothing

    posted = await flow.client.post(url, content=b"List-Unsubscribe=One-Click",
                                    headers=ONE_CLICK)
    replayed = await flow.client.post(url, content=b"List-Unsubscribe=One-Click",
                                      headers=ONE_CLICK)
    assert (posted.status_code, replayed.status_code) == (200, 200)

    [preference] = await flow.runtime.preferences("cust_1042")
    assert (preference.channel, preference.opted_out) == ("email", True)
    [entry] = await flow.runtime.store.suppression_list()
    assert (entry.address, entry.kind, entry.reason, entry.source) == (
        "ada@example.com", "email", Reason.UNSUBSCRIBE, "unsubscribe:notify")
    sent = flow.sends()
    assert await flow.send("after") == State.SUPPRESSED
    assert flow.sends() == sent == 1  # no provider call


async def test_multipart_one_click_is_taken_and_another_body_refused(flow: Flow) -> None:
    url = link_of(flow)
    wrong = await flow.client.post(url, content=b"List-Unsubscribe=Yes", headers=ONE_CLICK)
    assert (wrong.status_code, wrong.json()["field"]) == (400, "body")
    assert await flow.runtime.store.suppression_list() == []
    multipart = await flow.client.post(url, files={"List-Unsubscribe": (None, "One-Click")})
    assert multipart.status_code == 200
    assert len(await flow.runtime.store.suppression_list()) == 1


@pytest.mark.parametrize("token", ["nope", "a.b", "x" * 3000, "%00", "é"])
async def test_a_bad_token_is_a_404_that_names_no_part(flow: Flow, token: str) -> None:
    real = link_of(flow).rsplit("/", 1)[1]
    for candidate in (token, real[:-1] + ("A" if real[-1] != "A" else "B"), real + "x"):
        for method in ("GET", "POST"):
            answer = await flow.client.request(
                method, f"/v1/unsubscribe/{candidate}",
                content=b"List-Unsubscribe=One-Click", headers=ONE_CLICK)
            assert answer.status_code == 404, answer.text
            assert answer.json() == {"field": "path.token", "message": "is not a valid "
                                     "unsubscribe link"} or answer.json(), answer.text
            assert answer.json()["field"] == "path.token"
        page = await flow.client.get(f"/v1/unsubscribe/{candidate}",
                                     headers={"Accept": "text/html"})
        assert page.status_code == 404 and "not valid" in page.text
    assert await flow.runtime.preferences("cust_1042") == []
    assert await flow.runtime.store.suppression_list() == []
