"""The dashboard in a real browser: ``tidings api`` as a process, on a store holding
delivered, dead-lettered and paused work (seeded through the runtime and a worker
against the in-process sandbox twin), driven by headless Chromium with Playwright.

Screenshots of every page are kept in ``tests/artifacts/dashboard/``. Without
``/usr/bin/chromium`` the tests skip on a laptop and fail under ``CI``.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.api_process import TIDINGS, api_server, create_token
from support.crm import QUERY, write_crm
from tidings.config.settings import Settings
from tidings.core.clock import Clock, SystemClock
from tidings.core.surrogate import surrogate
from tidings.providers.base import Provider
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.runtime import build_runtime
from tidings.sandbox import SandboxConfig, SandboxCore

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "dashboard"
#: Two customers whose provider always fails (dead letters), one it rejects.
FAILING = ("c7@example.com", "c19@example.com")
REJECTED = ("c23@example.com",)
#: Waiting for the page's live refresh (every 4 s) or a navigation, never a fixed sleep.
WAIT_MS = 20_000


def need_chromium() -> None:
    if not CHROMIUM.exists():
        message = (f"{CHROMIUM} is missing: the dashboard's browser tests need Debian's "
                   "chromium package (apt-get install chromium)")
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@dataclass(frozen=True)
class Seeded:
    config: Path
    delivered: str
    dead: list[str]
    paused_sms: list[str]


def write_config(tmp_path: Path) -> Path:
    crm = write_crm(tmp_path / "crm.db")
    path = tmp_path / "tidings.toml"
    # Every minute, so an occurrence is due whenever the test runs; a retry budget of
    # one failure, so a failing address is dead-lettered by the first worker pass. The
    # weekly news starts paused: on a Monday within its grace hour it is due as well.
    path.write_text(f'''
store = "sqlite:///{tmp_path / 'dashboard.db'}"
[retry]
max_failures = 1
[channels.email]
provider = {{ kind = "sandbox-twin" }}
quota = "50/s"
[channels.sms]
provider = {{ kind = "sandbox-twin" }}
quota = "20/s"
[campaigns.digest]
cron = "* * * * *"
channels = ["email"]
template = "digest"
version = 2
audience = {{ sql = {{ url = "sqlite:///{crm}", query = "{QUERY}" }} }}
[campaigns.weekly-news]
cron = "0 9 * * 1"
start_paused = true
channels = ["email"]
template = "news"
version = 1
audience = {{ sql = {{ url = "sqlite:///{crm}", query = "{QUERY}" }} }}
''')
    return path


def twins(clock: Clock) -> dict[str, Provider]:
    core = SandboxCore(SandboxConfig(fail_addresses=FAILING, reject_addresses=REJECTED),
                       now=clock.now, seed=0)
    return {ch: SandboxTwinProvider(core=core, channel=ch, clock=clock) for ch in ("email", "sms")}


async def seed(config: Path) -> Seeded:
    """Given a digest occurrence admitted and worked through on email (27 accepted, 2
    dead-lettered, 1 rejected), three SMS notifications waiting, and admission paused
    for the sms channel and the weekly-news campaign."""
    settings = Settings.load(config)
    clock = SystemClock(settings.clock_offset_s)
    runtime = await build_runtime(settings, clock=clock, providers=twins(clock))
    try:
        result = await runtime.scheduler().run_pass(now=runtime.clock.now())
        assert result.admitted == 30, result
        worker = runtime.worker("email", "seed-worker")
        while await worker.run_once():
            pass
        for n in (41, 42, 43):
            await runtime.notify(key=f"shipment-48{n}", recipient={
                "id": f"cust_{n:03d}", "phone": f"+1555000{n:04d}"}, channels=["sms"],
                template="shipment", data={"parcel": n})
        now = runtime.clock.now()
        await runtime.store.switch_set(scope="channel", name="sms", paused=True, now=now,
                                       reason="carrier incident")
        await runtime.store.switch_set(scope="campaign", name="weekly-news", paused=True,
                                       now=now, reason="copy under review")
        [delivered] = [i.key for i in await runtime.store.intent_find_by_recipient("cust_001")]
        dead = [(await runtime.store.intent_find_by_recipient(f"cust_{n:03d}"))[0].key
                for n in (7, 19)]
        letters = await runtime.transport.dead_letters("email", limit=10)
        assert len(letters) == 2, letters
        return Seeded(config=config, delivered=delivered, dead=dead,
                      paused_sms=[f"shipment-48{n}:sms" for n in (41, 42, 43)])
    finally:
        await runtime.close()


async def admit_more(config: Path, count: int) -> None:
    """More email work arrives while the dashboard is open (no worker runs it)."""
    runtime = await build_runtime(Settings.load(config))
    try:
        for n in range(count):
            await runtime.notify(key=f"receipt-9{n:03d}", recipient={
                "id": f"cust_{100 + n:03d}", "email": f"late{n}@example.com"},
                channels=["email"], template="receipt")
    finally:
        await runtime.close()


@pytest.fixture
def seeded(tmp_path: Path) -> Seeded:
    need_chromium()
    return asyncio.run(seed(write_config(tmp_path)))


@pytest.fixture
def server(seeded: Seeded) -> Iterator[str]:
    with api_server(seeded.config, {"TIDINGS_UI_SECRET": "dashboard-acceptance-secret"}) as base:
        yield base


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")  # the header is sticky: shoot from the top
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def log_in(page: Any, base: str, token: str) -> None:
    page.goto(f"{base}/ui")
    page.wait_for_url("**/ui/login**")
    page.fill("#token", token)
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{base}/ui")


def test_an_operator_watches_searches_redrives_and_steers(
    seeded: Seeded, server: str, browser: Any
) -> None:
    from playwright.sync_api import expect

    token = create_token(seeded.config, "operator", name="operator on call")
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)

    # Logging in: the form, then the overview; the session is an HttpOnly cookie.
    page.goto(f"{server}/ui")
    page.wait_for_url("**/ui/login**")
    expect(page.locator("h1")).to_have_text("Log in to the dashboard")
    shot(page, "01-login")
    page.fill("#token", "tid_not-a-token")
    page.click("button:has-text('Log in')")
    expect(page.locator(".alert")).to_contain_text("not a tidings token")
    page.fill("#token", token)
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{server}/ui")
    [cookie] = [c for c in context.cookies() if c["name"] == "tidings_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    # Secure by default; the browser keeps it on http://127.0.0.1 (loopback is secure).
    assert cookie["secure"]
    assert cookie["value"].split(".")[0] == token.split("_")[1]  # the id, not the secret
    assert token.split("_", 2)[2] not in cookie["value"]

    # The overview: channels, campaigns with progress and SLI, admission switches.
    email = page.locator("[data-channel=email]")
    expect(email.locator("[data-metric=backlog]")).to_have_text("0")
    expect(email.locator("[data-metric=dead-letters]")).to_have_text("2")
    sms = page.locator("[data-channel=sms]")
    expect(sms.locator("[data-metric=backlog]")).to_have_text("3")
    expect(sms.locator(".pill")).to_have_text("Admission paused")
    digest = page.locator("[data-campaign=digest]")
    expect(digest).to_contain_text("27 accepted")
    expect(digest).to_contain_text("3 failed")
    expect(digest).to_contain_text("93.1 %")  # 27 of 29 eligible (a rejection is not)
    expect(page.locator("[data-switch='campaign:weekly-news']")).to_contain_text(
        "copy under review")
    expect(page.locator("#live")).to_have_attribute("data-state", "ok")

    # Live: more work arrives; the backlog number changes without a reload.
    with ThreadPoolExecutor(1) as apart:  # Playwright's own loop runs on this thread
        apart.submit(asyncio.run, admit_more(seeded.config, 4)).result(timeout=60)
    expect(email.locator("[data-metric=backlog]")).to_have_text("4", timeout=WAIT_MS)
    expect(email.locator(".spark")).to_be_visible(timeout=WAIT_MS)
    shot(page, "02-overview")

    # Timeline search: the three answers for a delivered key, then for a dead one.
    page.click("nav >> text=Timeline")
    page.wait_for_url("**/ui/timeline")
    shot(page, "03-timeline-empty")
    page.fill("#q", seeded.delivered)
    page.click("button:has-text('Search')")
    card = page.locator(f"[data-key='{seeded.delivered}']")
    for answer in ("selected", "enqueued", "accepted"):
        expect(card.locator(f"[data-answer={answer}] .answer-a")).to_have_text("Yes")
    expect(card).to_contain_text(surrogate("cust_001"))
    expect(card.locator("table.events")).to_contain_text("accepted")
    assert "c1@example.com" not in page.content()
    # Posted, not put in the URL; the live refresh posts it again and keeps the card.
    assert page.url == f"{server}/ui/timeline"
    expect(page.locator("#live")).to_have_attribute("title", re.compile("^Updated"),
                                                    timeout=WAIT_MS)
    expect(card.locator("[data-answer=accepted] .answer-a")).to_have_text("Yes")
    shot(page, "04-timeline-delivered")
    page.fill("#q", seeded.dead[0])
    page.click("button:has-text('Search')")
    dead_card = page.locator(f"[data-key='{seeded.dead[0]}']")
    expect(dead_card.locator("[data-answer=accepted] .answer-a")).to_have_text("No")
    expect(dead_card.locator("[data-answer=enqueued] .answer-a")).to_have_text("Yes")
    shot(page, "05-timeline-dead")

    # Dead letters: redrive one; it leaves the list, the other stays.
    page.click("nav >> text=Dead letters")
    page.wait_for_url("**/ui/dead-letters/email")
    rows = page.locator("tr[data-letter]")
    expect(rows).to_have_count(2)
    shot(page, "06-dead-letters")
    page.locator(f"tr[data-key='{seeded.dead[0]}'] button:has-text('Redrive')").click()
    expect(page.locator(".notice")).to_have_text("1 dead letter redriven.")
    expect(rows).to_have_count(1)
    expect(page.locator(f"tr[data-key='{seeded.dead[0]}']")).to_have_count(0)
    shot(page, "07-dead-letters-redriven")
    # A dead letter's key opens its timeline (a posted search, no key in the URL).
    page.locator(f"tr[data-key='{seeded.dead[1]}'] button:has-text('{seeded.dead[1]}')").click()
    page.wait_for_url(f"{server}/ui/timeline")
    expect(page.locator(f"[data-key='{seeded.dead[1]}'] [data-answer=accepted] .answer-a")
           ).to_have_text("No")

    # Steering: pause the email channel with a reason, see it, resume it.
    page.click("nav >> text=Overview")
    switch = page.locator("[data-switch='channel:email']")
    switch.locator("input[name=reason]").fill("provider maintenance")
    switch.locator("button:has-text('Pause')").click()
    expect(page.locator(".notice")).to_have_text("Admission paused for channel email.")
    expect(page.locator("[data-switch='channel:email']")).to_contain_text("provider maintenance")
    expect(page.locator("[data-channel=email] .pill")).to_have_text("Admission paused")
    shot(page, "08-overview-email-paused")
    page.locator("[data-switch='channel:email'] button:has-text('Resume')").click()
    expect(page.locator(".notice")).to_have_text("Admission resumed for channel email.")
    expect(page.locator("[data-switch='channel:email']")).to_contain_text("admitting")

    # A phone-sized screen still reads.
    page.set_viewport_size({"width": 390, "height": 844})
    shot(page, "09-overview-phone")

    # Logging out ends the session in this browser.
    page.set_viewport_size({"width": 1360, "height": 900})
    page.click("button:has-text('Log out')")
    page.wait_for_url("**/ui/login?bye=1")
    page.goto(f"{server}/ui/dead-letters/email")
    page.wait_for_url("**/ui/login**")
    # No script error; the one failed resource is the refused login (a 401 page).
    assert problems == ["Failed to load resource: the server responded with a status of "
                        "401 (Unauthorized)"]
    context.close()


def test_a_viewer_looks_but_cannot_act_and_a_revoked_token_ends_the_session(
    seeded: Seeded, server: str, browser: Any
) -> None:
    from playwright.sync_api import expect

    token = create_token(seeded.config, "viewer", name="viewer on call")
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    log_in(page, server, token)

    expect(page.locator(".role")).to_have_text("viewer · read only")
    expect(page.locator("[data-channel=email] [data-metric=dead-letters]")).to_have_text("2")
    expect(page.locator("#admission button")).to_have_count(0)
    expect(page.locator("#admission")).to_contain_text("log in with an operator token")
    page.goto(f"{server}/ui/dead-letters/email")
    expect(page.locator("tr[data-letter]")).to_have_count(2)
    expect(page.locator("#letters button:has-text('Redrive')")).to_have_count(0)
    expect(page.locator("#letters form[action$='/redrive']")).to_have_count(0)
    shot(page, "10-dead-letters-viewer")

    # Revoked from the command line: the very next refresh of the page logs it out.
    revoked = subprocess.run([*TIDINGS, "token", "revoke", token.split("_")[1], "--config",
                              str(seeded.config)], capture_output=True, text=True, timeout=60)
    assert revoked.returncode == 0, revoked.stderr
    page.wait_for_url("**/ui/login**", timeout=WAIT_MS)
    expect(page.locator("h1")).to_have_text("Log in to the dashboard")
    context.close()


async def suppression_of(config: Path, address: str) -> Any:
    """The store's own answer for ``address`` on email: its entry and audit events."""
    from tidings.operate import suppression

    runtime = await build_runtime(Settings.load(config))
    try:
        return await suppression.history(runtime.store, address=address, kind="email")
    finally:
        await runtime.close()


def test_an_operator_suppresses_an_address_and_takes_it_off_with_a_note(
    seeded: Seeded, server: str, browser: Any
) -> None:
    from playwright.sync_api import expect

    token = create_token(seeded.config, "operator", name="support lead")
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    log_in(page, server, token)

    page.click("nav >> text=Suppressions")
    page.wait_for_url("**/ui/suppressions")
    expect(page.locator(".empty-title")).to_have_text("The suppression list is empty")

    # A typo is refused on the form, naming the field, and what was typed stays.
    page.fill("#add-address", "dana@@example.com")
    page.click("button:has-text('Suppress')")
    expect(page.locator("#suppress .alert")).to_contain_text("address")
    expect(page.locator("#add-address")).to_have_value("dana@@example.com")

    page.fill("#add-address", "Dana@Example.com")
    page.select_option("#add-channel", "email")
    page.fill("#add-note", "asked on the phone")
    page.click("button:has-text('Suppress')")
    expect(page.locator(".notice")).to_have_text("Address suppressed.")
    row = page.locator("tr[data-suppression='email:dana@example.com']")
    expect(row).to_contain_text("manual")
    expect(row).to_contain_text("support lead")
    shot(page, "11-suppressions")
    with ThreadPoolExecutor(1) as apart:  # the store's word, not the page's
        found = apart.submit(asyncio.run, suppression_of(seeded.config, "dana@example.com")
                             ).result(timeout=60)
    assert found.entry is not None and found.entry.reason.value == "manual"

    # Found by a part of it; removed with a note (the browser wants one first).
    page.fill("#filter-address", "DANA")
    page.click("button:has-text('Find')")
    expect(page.locator("tr[data-suppression]")).to_have_count(1)
    assert page.url == f"{server}/ui/suppressions"  # posted: no address in the URL
    row.locator("button:has-text('Remove')").click()
    # The note is required: the browser posts nothing (no refusal came back).
    expect(row).to_have_count(1)
    expect(page.locator(".alert")).to_have_count(0)
    row.locator("input[name=note]").fill("customer opted in again")
    row.locator("button:has-text('Remove')").click()
    expect(page.locator(".notice")).to_contain_text("taken off the suppression list")
    expect(page.locator("tr[data-suppression]")).to_have_count(0)
    shot(page, "12-suppressions-removed")

    with ThreadPoolExecutor(1) as apart:
        found = apart.submit(asyncio.run, suppression_of(seeded.config, "dana@example.com")
                             ).result(timeout=60)
    token_id = token.split("_")[1]
    assert found.entry is None
    assert [(e.type, e.worker) for e in found.events] == [
        ("suppression_added", f"token support lead ({token_id})"),
        ("suppression_removed", f"token support lead ({token_id})")]
    assert found.events[1].detail.endswith(": customer opted in again")
    assert problems == []
    context.close()
