"""The secrets canary: unique addresses, phone numbers and secrets go through a small flow
with failures, and not one of them comes out where an operator (or anyone holding the
logs, a scrape or an error body) could read it.

Real processes: the sandbox provider (HTTP), an SMTP server that echoes refused
recipients in its replies, ``tidings api`` and one ``tidings worker`` per channel, all
with ``--log-format json --log-level debug`` and their output captured to files. The
channels are ``email`` (the sandbox adapter), ``sms`` (the generic JSON-over-HTTP
adapter against the sandbox, with a bearer token from the environment) and ``mail``
(SMTP with a login whose password comes from the environment). Intents come in
through the API's publish endpoint, a signed cron trigger of an SMTP campaign, and
``notify``; some addresses are rejected, some always fail until their retry budget is
spent, the sandbox answers 429s over its quota and drops some responses. Requests with
bad tokens, a bad signature and malformed bodies that quote canary values go to the
API too.

Then every captured log line, the ``/metrics`` text, every API error body, every
dead-letter row (in the store and through the API) and the ledger's free-text columns
are searched for each canary: 0 hits. The flow must really have failed in the ways it
was meant to (the sandbox's own counts), and the logs must be JSON lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sqlite3
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.crm import QUERY, free_port, write_crm
from tidings.api import sign
from tidings.api.tokens import new_token
from tidings.config.settings import Settings
from tidings.core.errors import InvalidInput
from tidings.core.states import DONE, State
from tidings.runtime import Runtime, build_runtime

pytestmark = pytest.mark.slow

TIDINGS = [sys.executable, "-m", "tidings"]
LOGGING = ["--log-format", "json", "--log-level", "debug"]
SMTP_SERVER = Path(__file__).parents[1] / "support" / "smtp_server.py"
SETTLE_S = 120.0


def _hex() -> str:
    return uuid.uuid4().hex


def _email() -> str:
    return f"canary-{_hex()}@example.com"


def _phone(rng: random.Random) -> str:
    return f"+1555{rng.randrange(10**7):07d}"


@dataclass
class Canaries:
    """Every value that must never come out, with the addresses sorted by their fate."""

    rng: random.Random = field(default_factory=random.Random)
    email_ok: list[str] = field(default_factory=list)
    email_rejected: list[str] = field(default_factory=list)
    email_failing: list[str] = field(default_factory=list)
    email_malformed: str = ""
    phone_ok: list[str] = field(default_factory=list)
    phone_rejected: list[str] = field(default_factory=list)
    phone_failing: list[str] = field(default_factory=list)
    mail_ok: list[str] = field(default_factory=list)
    mail_refused: str = ""      # SMTP 550 at RCPT, the reply quoting the address
    mail_greylisted: str = ""   # SMTP 451 at RCPT until the retry budget is spent
    smtp_password: str = ""
    sms_token: str = ""
    trigger_secret: str = ""
    forged_token: str = ""
    api_tokens: list[str] = field(default_factory=list)

    @classmethod
    def make(cls) -> Canaries:
        c = cls(rng=random.Random(uuid.uuid4().int))
        c.email_ok = [_email() for _ in range(4)]
        c.email_rejected = [_email() for _ in range(2)]
        c.email_failing = [_email() for _ in range(2)]
        c.email_malformed = f"canary-{_hex()}@@example.com"
        c.phone_ok = [_phone(c.rng) for _ in range(4)]
        c.phone_rejected = [_phone(c.rng)]
        c.phone_failing = [_phone(c.rng)]
        c.mail_ok = [_email() for _ in range(2)]
        c.mail_refused = f"rcpt-550@canary-{_hex()}.example.com"
        c.mail_greylisted = f"rcpt-451@canary-{_hex()}.example.com"
        c.smtp_password = f"smtp-pw-{_hex()}"
        c.sms_token = f"sms-token-{_hex()}"
        c.trigger_secret = f"trigger-secret-{_hex()}"
        c.forged_token = f"tid_{_hex()[:12]}_{(_hex() + _hex())[:43]}"
        return c

    def needles(self) -> dict[str, str]:
        """What to search for: each value whole, and its unique part alone (so a
        fragment, or a phone number without its '+', is found too)."""
        found: dict[str, str] = {}
        emails = [*self.email_ok, *self.email_rejected, *self.email_failing,
                  self.email_malformed, *self.mail_ok, self.mail_refused, self.mail_greylisted]
        for address in emails:
            found[address] = address
            found[f"{address} (unique part)"] = address.split("canary-")[1][:32]
        for phone in (*self.phone_ok, *self.phone_rejected, *self.phone_failing):
            found[phone] = phone
            found[f"{phone} (digits)"] = phone[1:]
        for name, secret in (("smtp password", self.smtp_password),
                             ("sms token", self.sms_token),
                             ("trigger secret", self.trigger_secret),
                             ("forged token", self.forged_token)):
            found[name] = secret
            found[f"{name} (unique part)"] = secret.rsplit("_", 1)[-1].rsplit("-", 1)[-1]
        for index, token in enumerate(self.api_tokens):
            found[f"api token {index} (secret part)"] = token.split("_", 2)[2]
        return found


@dataclass
class Procs:
    """Child processes, each one's output in a file of its own."""

    directory: Path
    env: dict[str, str]
    started: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)

    def log(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    async def start(self, name: str, *args: str, announce_on_stdout: bool = False
                    ) -> tuple[asyncio.subprocess.Process, str]:
        """Start a process; with ``announce_on_stdout`` return its first stdout line."""
        with self.log(name).open("ab") as out:
            process = await asyncio.create_subprocess_exec(
                *args, env=self.env, stdin=asyncio.subprocess.DEVNULL, stderr=out,
                stdout=asyncio.subprocess.PIPE if announce_on_stdout else out)
        self.started[name] = process
        if not announce_on_stdout:
            return process, ""
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line, f"{name} exited: {self.log(name).read_text()[-2000:]}"
        return process, line.decode().strip()

    async def wait_for_line(self, name: str, text: str, timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.log(name).read_text().splitlines():
                if text in line:
                    return line
            process = self.started[name]
            assert process.returncode is None, self.log(name).read_text()[-3000:]
            await asyncio.sleep(0.1)
        raise AssertionError(f"{name} never said {text!r}: {self.log(name).read_text()}")

    async def stop_all(self) -> dict[str, int | None]:
        for process in self.started.values():
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for name, process in self.started.items():
            try:
                codes[name] = await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                codes[name] = await process.wait()
        return codes


def write_settings(tmp_path: Path, c: Canaries, *, sandbox: str, smtp_port: int) -> Path:
    members = [*c.mail_ok, c.mail_refused, c.mail_greylisted]
    crm = write_crm(tmp_path / "crm.db",
                    [(f"member_{i:02d}", address) for i, address in enumerate(members)])
    note = tmp_path / "templates" / "note" / "v1"
    note.mkdir(parents=True)
    (note / "subject.txt").write_text("A note for {{ recipient_id }}")
    (note / "body.txt").write_text("Hello {{ recipient_id }}, this is a note.\n")
    path = tmp_path / "tidings.toml"
    path.write_text(f'''
store = "sqlite:///{tmp_path / 'tidings.db'}"

[channels.email]
kind = "email"
quota = "200/s"
provider = {{ kind = "sandbox", url = "{sandbox}", timeout_s = 1.0 }}

[channels.sms]
kind = "sms"
quota = "100/s"
quota_safety = 1.0
[channels.sms.provider]
kind = "http"
url = "{sandbox}/v1/sms/messages"
headers = {{ Authorization = "Bearer ${{CANARY_SMS_TOKEN}}" }}
body = {{ to = "to", template = "template", recipient_id = "recipient_id", data = "data" }}
deduplicates = true
timeout_s = 1.0

[channels.mail]
kind = "email"
quota = "50/s"
templates = "templates"
[channels.mail.provider]
kind = "smtp"
host = "127.0.0.1"
port = {smtp_port}
security = "none"
username = "canary-user"
password_env = "CANARY_SMTP_PASSWORD"
from_address = "notes@tidings.test"
timeout_s = 5.0

[campaigns.notes]
cron = "* * * * *"
channels = ["mail"]
template = "note"
version = 1
audience = {{ sql = {{ url = "sqlite:///{crm}", query = "{QUERY}" }} }}

[retry]
max_failures = 2
base_s = 0.1
cap_s = 0.3
rate_limit_floor_s = 0.1
rate_limit_cap_s = 1.0

[worker]
reconcile_every_s = 0.5

[reconciler]
uncertain_after_s = 0.3

[api]
trigger_early_s = 0  # the occurrence due now, not the next minute's

[api.queues.direct-email]
channel = "email"
[api.queues.direct-sms]
channel = "sms"
''')
    return path


def sandbox_settings(tmp_path: Path, c: Canaries) -> Path:
    path = tmp_path / "sandbox.json"
    path.write_text(json.dumps({
        # Over the sms quota in the first second on purpose: 429s from the sandbox.
        "quotas": {"email": 200, "sms": 2},
        "rate_limit": 0.05, "retry_after_s": 1, "retry_after_missing_share": 0.5,
        "server_error": 0.05, "lost_response": 0.05, "timeout": 0.02, "hang_s": 2,
        "reject_addresses": [*c.email_rejected, *c.phone_rejected],
        "fail_addresses": [*c.email_failing, *c.phone_failing],
        "dedupe": True,
    }))
    return path


@dataclass
class Flow:
    canaries: Canaries
    procs: Procs
    runtime: Runtime
    api: str
    sandbox: str
    tokens: dict[str, str]
    error_bodies: list[str] = field(default_factory=list)


@pytest.fixture
async def flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Flow]:
    c = Canaries.make()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TIDINGS_LOG")},
           "CANARY_SMTP_PASSWORD": c.smtp_password, "CANARY_SMS_TOKEN": c.sms_token,
           "TIDINGS_TRIGGER_SECRETS": c.trigger_secret, "PYTHONUNBUFFERED": "1"}
    for name in ("CANARY_SMTP_PASSWORD", "CANARY_SMS_TOKEN"):
        monkeypatch.setenv(name, env[name])
    procs = Procs(tmp_path, env)
    try:
        _, said = await procs.start(
            "sandbox", *TIDINGS, *LOGGING, "sandbox", "--port", "0", "--seed", "11",
            "--config", str(sandbox_settings(tmp_path, c)), announce_on_stdout=True)
        sandbox = said[said.index("http://"):]
        _, said = await procs.start(
            "smtp", sys.executable, str(SMTP_SERVER), "--dir", str(tmp_path / "inbox"),
            "--login", f"canary-user:{c.smtp_password}", announce_on_stdout=True)
        assert said.startswith("listening on "), said
        config = write_settings(tmp_path, c, sandbox=sandbox, smtp_port=int(said.split()[-1]))
        runtime = await build_runtime(Settings.load(config))
        tokens = {}
        for scope in ("publish", "viewer"):
            text, row = new_token(name=f"canary {scope}", scopes=[scope],
                                  now=runtime.clock.now())
            await runtime.store.api_token_insert(row)
            tokens[scope] = text
        c.api_tokens = list(tokens.values())
        port = free_port()
        await procs.start("api", *TIDINGS, *LOGGING, "api", "--config", str(config),
                          "--port", str(port))
        for channel in ("email", "sms", "mail"):
            await procs.start(f"worker-{channel}", *TIDINGS, *LOGGING, "worker",
                              "--channel", channel, "--config", str(config))
        await procs.wait_for_line("api", "listening on http://")
        yield Flow(canaries=c, procs=procs, runtime=runtime, api=f"http://127.0.0.1:{port}",
                   sandbox=sandbox, tokens=tokens)
        await runtime.close()
    finally:
        await procs.stop_all()


async def publish(f: Flow, http: httpx.AsyncClient, queue: str, customer: str,
                  **payload: str) -> httpx.Response:
    today = datetime.now(UTC).date().isoformat()
    body = {"queue": queue, "payload": {"customer_id": customer, "schedule_day": today,
                                        "template": "receipt-v1", **payload}}
    return await http.post("/v1/queue/publish", json=body, headers={
        "Authorization": f"Bearer {f.tokens['publish']}", "Idempotency-Key": customer})


async def admit_everything(f: Flow, http: httpx.AsyncClient) -> None:
    """The good traffic: publishes, a signed trigger, notify."""
    c = f.canaries
    direct = ([("direct-email", "email", a) for a in
               (*c.email_ok, *c.email_rejected, *c.email_failing)]
              + [("direct-sms", "phone", p) for p in
                 (*c.phone_ok, *c.phone_rejected, *c.phone_failing)])
    for index, (queue, kind, address) in enumerate(direct):
        answer = await publish(f, http, queue, f"pub_{index:02d}", **{kind: address})
        assert answer.status_code == 202, answer.text

    body = b'{"campaign":"notes"}'
    ts = int(time.time())
    triggered = await http.post("/v1/trigger/notes", content=body, headers={
        "X-Tidings-Timestamp": str(ts), "Content-Type": "application/json",
        "X-Tidings-Signature": sign(c.trigger_secret, timestamp=ts, method="POST",
                                    target="/v1/trigger/notes", body=body)})
    assert triggered.status_code == 200, triggered.text
    assert triggered.json()["pass"]["admitted"] == 4

    recipients = [(c.email_ok[0], c.phone_ok[0]), (c.email_rejected[0], c.phone_failing[0]),
                  (c.email_malformed, c.phone_rejected[0])]
    for index, (email, phone) in enumerate(recipients):
        await f.runtime.notify(key=f"shipment-{index}:cust_{index}",
                               recipient={"id": f"cust_{index}", "email": email, "phone": phone},
                               channels=["sms"] if email == c.email_malformed
                               else ["email", "sms"], template="shipment/v1",
                               data={"status": "out for delivery"})
    # An address no send can use is refused by notify itself; its refusal is searched
    # for the canary like every other error text.
    with pytest.raises(InvalidInput) as refused:
        await f.runtime.notify(key="shipment-2:cust_2", recipient={
            "id": "cust_2", "email": c.email_malformed}, channels=["email"],
            template="shipment/v1")
    assert refused.value.field == "recipient.email"
    f.error_bodies.append(str(refused.value))


async def send_bad_requests(f: Flow, http: httpx.AsyncClient) -> None:
    """Refused requests that quote canary values; their answers are kept for the search."""
    c = f.canaries
    email, phone = c.email_ok[1], c.phone_ok[1]
    publish_auth = {"Authorization": f"Bearer {f.tokens['publish']}", "Idempotency-Key": "bad",
                    "Content-Type": "application/json"}
    ts = int(time.time())
    answers = [
        await http.post("/v1/queue/publish", content=b"{}", headers={
            "Authorization": f"Bearer {c.forged_token}", "Idempotency-Key": "x",
            "Content-Type": "application/json"}),
        await http.get("/v1/status", headers={"Authorization": f"Bearer {c.sms_token}"}),
        await http.get("/metrics", headers={"Authorization": c.smtp_password}),
        await http.post("/v1/trigger/notes", content=b"{}", headers={
            "X-Tidings-Timestamp": str(ts),
            "X-Tidings-Signature": sign(c.smtp_password, timestamp=ts, method="POST",
                                        target="/v1/trigger/notes", body=b"{}")}),
        await http.post("/v1/queue/publish", headers=publish_auth,
                        content=f'{{"queue": "direct-email", "payload": {{"email": "{email}", '
                                f'"phone": {phone}}}'.encode()),
        await http.post("/v1/queue/publish", headers=publish_auth, json={
            "queue": "direct-email", "payload": {"customer_id": "x", "schedule_day": email,
                                                 "email": email}}),
        await http.post("/v1/queue/publish", headers=publish_auth, json={
            "queue": email, "payload": {"customer_id": "x", "schedule_day": "2026-01-01",
                                        "email": email, "template": "r-v1"}}),
        await http.post("/v1/queue/publish", headers=publish_auth, json={
            "queue": "direct-sms", "payload": {"customer_id": "y", "schedule_day": "2026-01-01",
                                               "template": "r-v1"}, phone: email}),
        await http.post("/v1/queue/publish", headers=publish_auth, json={
            "queue": "direct-sms", "payload": {"customer_id": f"{phone}/{email}",
                                               "schedule_day": "2026-01-01",
                                               "template": "r-v1", "phone": phone}}),
        await http.post(f"/v1/trigger/{email}", content=b"{}",
                        headers={"Authorization": f"Bearer {f.tokens['publish']}"}),
        await http.get("/v1/timeline", params={"recipient": phone},
                       headers={"Authorization": f"Bearer {f.tokens['viewer']}"}),
        await http.get(f"/v1/dead-letters/{email}",
                       headers={"Authorization": f"Bearer {f.tokens['viewer']}"}),
        await http.get(f"/no-such-route/{email}?phone={phone}"),
    ]
    assert all(a.status_code >= 400 for a in answers), [(a.status_code, a.text)
                                                         for a in answers]
    f.error_bodies += [a.text for a in answers]


async def settle(f: Flow) -> dict[str, dict[str, int]]:
    """Wait until every intent is in a final state (or held for an operator: a lost
    answer on a channel without a lookup is never resent on its own) and every queue is
    empty."""
    deadline = time.monotonic() + SETTLE_S
    counts: dict[str, dict[str, int]] = {}
    while time.monotonic() < deadline:
        counts = await f.runtime.store.intent_counts()
        done = all(state in DONE or state == State.HELD
                   for by in counts.values() for state in by)
        if counts and done:
            now = f.runtime.clock.now()
            depths = [await f.runtime.transport.depth(ch, now=now) for ch in counts]
            if not any(d.ready or d.delayed or d.in_flight for d in depths):
                return counts
        for name, process in f.procs.started.items():
            assert process.returncode is None, (name, f.procs.log(name).read_text()[-3000:])
        await asyncio.sleep(0.25)
    raise AssertionError(f"did not settle in {SETTLE_S:.0f} s: {counts}")


def dead_letters(db: Path) -> list[str]:
    """Every dead-letter row of the store (message id, body and reason)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT message_id, body, reason FROM dead_letters").fetchall()
    return [" | ".join(str(v) for v in row) for row in rows]


def ledger_text(db: Path) -> list[str]:
    """The store's free text: events' detail, intents' and occurrences' reasons."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = [*conn.execute("SELECT detail FROM events WHERE detail IS NOT NULL"),
                *conn.execute("SELECT reason FROM intents WHERE reason IS NOT NULL"),
                *conn.execute("SELECT reason FROM occurrences WHERE reason IS NOT NULL")]
    return [str(row[0]) for row in rows]


async def test_no_canary_comes_out_of_logs_metrics_error_bodies_or_dead_letters(
    flow: Flow, tmp_path: Path,
) -> None:
    f = flow
    async with httpx.AsyncClient(base_url=f.api, timeout=30) as http:
        await admit_everything(f, http)
        await send_bad_requests(f, http)
        counts = await settle(f)
        viewer = {"Authorization": f"Bearer {f.tokens['viewer']}"}
        metrics = (await http.get("/metrics", headers=viewer)).text
        dead_api = [(await http.get(f"/v1/dead-letters/{ch}", headers=viewer)).text
                    for ch in ("email", "sms", "mail")]
    async with httpx.AsyncClient(timeout=30) as http:
        sandbox = (await http.get(f"{f.sandbox}/v1/stats")).json()["channels"]
    codes = await f.procs.stop_all()

    # The flow failed the ways it was meant to, by the sandbox's and the ledger's counts.
    assert codes["api"] == 0 and all(codes[f"worker-{ch}"] == 0 for ch in ("email", "sms",
                                                                          "mail")), codes
    assert sum(ch["rejected"] for ch in sandbox.values()) >= 3
    assert sum(ch["server_errors"] for ch in sandbox.values()) >= 4
    assert sum(ch["refused_quota"] + ch["refused_injected"] for ch in sandbox.values()) > 0
    states = {state for by in counts.values() for state in by}
    assert {"accepted", "rejected", "dead"} <= states, counts
    assert counts["mail"].get("dead") == 1 and counts["mail"].get("rejected") == 1, counts
    dead_rows = dead_letters(tmp_path / "tidings.db")
    assert len(dead_rows) >= 3 and "tidings_dead_letters" in metrics

    # The logs are there, one JSON object per line, and say what happened.
    logged: list[dict[str, Any]] = []
    log_text = ""
    for name in ("api", "worker-email", "worker-sms", "worker-mail", "sandbox"):
        text = f.procs.log(name).read_text()
        log_text += text
        for line in text.splitlines():
            if line.startswith("tidings api listening on http://"):
                continue  # the API's start-up announcement, on stderr by design
            entry = json.loads(line)
            assert {"timestamp", "level", "logger", "event"} <= set(entry), line
            logged.append(entry)
    outcomes = {(e.get("channel"), e.get("outcome")) for e in logged if e["event"] == "send"}
    assert {("email", "accepted"), ("email", "rejected"), ("email", "dead"),
            ("sms", "rate_limited"), ("mail", "rejected"), ("mail", "dead")} <= outcomes
    assert all(e["recipient"].startswith("r_") for e in logged if e["event"] == "send")
    routes = {(e["route"], e["status"]) for e in logged if e["event"] == "request"}
    assert ("/v1/queue/publish", 202) in routes and ("/v1/trigger/{campaign}", 401) in routes
    assert any(e["event"] == "page admitted" for e in logged)

    # Not one canary, anywhere.
    places = {"logs": log_text, "metrics": metrics, "error bodies": "\n".join(f.error_bodies),
              "dead letters": "\n".join(dead_rows), "dead letters (API)": "\n".join(dead_api),
              "ledger": "\n".join(ledger_text(tmp_path / "tidings.db"))}
    hits = [(what, where) for what, needle in f.canaries.needles().items()
            for where, text in places.items() if needle in text]
    assert hits == []
