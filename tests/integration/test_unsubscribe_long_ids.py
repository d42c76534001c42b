"""A recipient id of 2,000 characters gets its mail and its link unsubscribes: sent by a
worker through a real SMTP server process (aiosmtpd, ``tests/support/smtp_server.py``,
which refuses a line over RFC 5322's limit as servers do: ``500 Line too long``), the
link read from the message the server stored, posted to the API on both stores."""

from __future__ import annotations

import asyncio
import email.policy
import re
import sys
from collections.abc import AsyncIterator
from email.parser import BytesParser
from pathlib import Path

import httpx
import pytest

from tidings.api import create_app
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.states import State
from tidings.runtime import build_runtime

pytestmark = pytest.mark.slow

SERVER = Path(__file__).parents[1] / "support" / "smtp_server.py"
ENV = {"UNSUB_SECRETS": "unsub-current"}
LONG_ID = "cust-" + "9" * 1_995
T0 = 1_786_698_005.0


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'long.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def smtp_port(tmp_path: Path) -> AsyncIterator[int]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(SERVER), "--dir", str(tmp_path / "inbox"),
        stdout=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        announced = (await asyncio.wait_for(process.stdout.readline(), 30)).decode().strip()
        assert announced.startswith("listening on "), announced
        yield int(announced.rsplit(" ", 1)[1])
    finally:
        process.kill()
        await process.wait()


def link_in(raw: bytes) -> str:
    """The https link of the stored message's List-Unsubscribe, whitespace inside its
    angle brackets ignored (RFC 2369)."""
    message = BytesParser(policy=email.policy.compat32).parsebytes(raw)
    value = str(message["List-Unsubscribe"])
    [url] = [re.sub(r"\s", "", u) for u in re.findall(r"<([^>]*)>", value)
             if u.strip().startswith("https:")]
    return url


async def test_a_2000_character_recipient_id_gets_mail_and_its_link_unsubscribes(
        tmp_path: Path, store_url: str, smtp_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, text in (("subject.txt", "Welcome"), ("body.txt", "Hello.")):
        path = tmp_path / "templates" / "welcome" / "v1" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setenv("UNSUB_SECRETS", ENV["UNSUB_SECRETS"])
    settings = Settings.parse({
        "store": store_url,
        "channels": {"email": {
            "kind": "email", "templates": str(tmp_path / "templates"),
            "provider": {"kind": "smtp", "host": "127.0.0.1", "port": smtp_port,
                         "security": "none", "from_address": "news@tidings.test"}}},
        "unsubscribe": {"base_url": "https://notify.example.com",
                        "secret_env": "UNSUB_SECRETS", "mailto": "unsubscribe@example.com",
                        "notify_templates": ["welcome"]}})
    runtime = await build_runtime(settings, clock=FakeClock(T0, auto_advance=True),
                                  campaigns=[])
    try:
        async def send(key: str) -> State:
            [made] = await runtime.notify(
                key=key, recipient={"id": LONG_ID, "email": "ada@example.com"},
                channels=["email"], template="welcome/v1")
            worker = runtime.worker("email")
            while await worker.run_once():
                pass
            intent = await runtime.store.intent_get(made)
            assert intent is not None
            return intent.state

        assert await send("welcome-1") == State.ACCEPTED
        [stored] = sorted((tmp_path / "inbox" / "new").glob("*.eml"))
        raw = stored.read_bytes()
        assert max(len(line) for line in raw.split(b"\r\n")) <= 998
        url = link_in(raw)
        assert len(url) < 1_000

        app = create_app(runtime, env=ENV)
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="https://notify.example.com") as client:
            posted = await client.post(url, content=b"List-Unsubscribe=One-Click", headers={
                "Content-Type": "application/x-www-form-urlencoded"})
        assert posted.status_code == 200, posted.text
        [preference] = await runtime.preferences(LONG_ID)
        assert (preference.channel, preference.opted_out) == ("email", True)
        assert await send("welcome-2") in (State.SUPPRESSED, State.CANCELLED)
        assert len(list((tmp_path / "inbox" / "new").glob("*.eml"))) == 1
    finally:
        await runtime.close()
