"""One-click unsubscribe end to end: an email sent through the real SMTP adapter to an
aiosmtpd server carries List-Unsubscribe and List-Unsubscribe-Post; the URL in them,
POSTed as a mail client does to ``tidings api`` running as a process, unsubscribes;
and the next send to that address ends ``suppressed`` with no SMTP transaction, by the
server's own count of the messages it received."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

import support.api_process as api_process
from support.api_process import api_server
from support.crm import free_port
from support.smtp_side import SmtpSide, serve_smtp
from tidings.config.settings import Settings
from tidings.core.states import State
from tidings.runtime import build_runtime

pytestmark = pytest.mark.slow

SECRETS = {"TIDINGS_UNSUBSCRIBE_SECRETS": "acceptance-unsubscribe-secret"}


async def test_the_received_email_carries_both_headers_and_its_url_unsubscribes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smtp = await serve_smtp(SmtpSide())
    port = free_port()
    for name, text in (("subject.txt", "Welcome"), ("body.txt", "Hello {{ recipient_id }}")):
        path = tmp_path / "templates" / "welcome" / "v1" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    config = tmp_path / "tidings.toml"
    config.write_text(f'''
store = "sqlite:///{tmp_path / 'tidings.db'}"
[channels.email]
kind = "email"
templates = "{tmp_path / 'templates'}"
[channels.email.provider]
kind = "smtp"
host = "127.0.0.1"
port = {smtp.port}
security = "none"
from_address = "news@example.com"
[unsubscribe]
base_url = "http://127.0.0.1:{port}"
mailto = "unsubscribe@example.com"
notify_templates = ["welcome"]
''')
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    runtime = await build_runtime(Settings.load(config))
    try:
        async def send(key: str) -> State:
            [made] = await runtime.notify(key=key, recipient={
                "id": "cust_1042", "email": "ada@example.com"}, channels=["email"],
                template="welcome/v1")
            worker = runtime.worker("email")
            while await worker.run_once():
                pass
            intent = await runtime.store.intent_get(made)
            assert intent is not None
            return intent.state

        assert await send("welcome-1") == State.ACCEPTED
        [message] = smtp.side.messages
        listed = str(message["List-Unsubscribe"])
        assert str(message["List-Unsubscribe-Post"]) == "List-Unsubscribe=One-Click"
        urls = re.findall(r"<([^>]+)>", listed)
        assert [u.split(":", 1)[0] for u in urls] == ["http", "mailto"]
        assert urls[0].startswith(f"http://127.0.0.1:{port}/v1/unsubscribe/")

        monkeypatch.setattr(api_process, "free_port", lambda: port)
        with api_server(config, SECRETS):
            async with httpx.AsyncClient() as client:
                page = await client.get(urls[0])
                posted = await client.post(urls[0], content=b"List-Unsubscribe=One-Click",
                                           headers={"Content-Type":
                                                    "application/x-www-form-urlencoded"})
        assert page.status_code == 200 and "<form" in page.text
        assert posted.status_code == 200, posted.text

        assert await send("welcome-2") == State.SUPPRESSED
        assert len(smtp.side.messages) == 1  # no SMTP transaction for the second
        [preference] = await runtime.preferences("cust_1042")
        assert preference.opted_out
    finally:
        await runtime.close()
        await smtp.close()
