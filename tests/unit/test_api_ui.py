"""The dashboard over ASGI: logging in with a token, the session cookie, CSRF on every
form that changes something, scopes, the live fragments, and what pages never show."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import fields
from pathlib import Path

import httpx
import pytest
from apikit import DAY, T0, Api, open_api

from tidings.api.auth import SESSION_COOKIE, Sessions, sessions_from
from tidings.api.ui.formatting import fmt_ago, fmt_duration, fmt_percent, fmt_rate, scrub
from tidings.api.ui.history import History, sparkline
from tidings.api.ui.session import LOGIN_COOKIE
from tidings.core.states import State
from tidings.core.surrogate import surrogate
from tidings.operate.readmodel import Counts
from tidings.stores.base import Change, ClaimKind

KEY = f"weekly-digest/{DAY}/cust_0001/email/v3"
DEAD = f"weekly-digest/{DAY}/cust_0002/email/v3"
HTML = {"Accept": "text/html,application/xhtml+xml"}
FRAGMENT = {"Accept": "text/html", "X-Tidings-Fragment": "1"}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    """Given the digest admitted for five customers, one email accepted and one dead
    (its message in the email dead letters)."""
    async with open_api(tmp_path, members=5, base_url="https://tidings.test") as opened:
        response = await opened.client.post("/v1/trigger/weekly-digest",
                                            headers=opened.auth("trigger"))
        assert response.status_code == 200
        await settle(opened, KEY, State.ACCEPTED, at=T0 + 10)
        await settle(opened, DEAD, State.DEAD, at=T0 + 11, reason="retry budget spent")
        await dead_letter(opened, DEAD, at=T0 + 12, reason="retry budget spent")
        opened.clock.advance(30)
        yield opened


async def settle(api: Api, key: str, state: State, *, at: float, reason: str = "r") -> None:
    [claim] = await api.runtime.store.intent_claim_many([key], owner="w1", lease_s=30,
                                                        now=at - 1)
    assert claim.kind is ClaimKind.CLAIMED and claim.token is not None
    assert claim.intent is not None
    applied = await api.runtime.store.intent_apply_many([Change(
        key=key, from_state=State.CLAIMED, to_state=state, event=state.value,
        lease_token=claim.token, reason=reason, receipt="rcpt-1",
        detail=surrogate(claim.intent.recipient_id))], now=at)
    assert applied == [key]


async def dead_letter(api: Api, key: str, *, at: float, reason: str) -> None:
    received = await api.runtime.transport.receive("email", max_messages=100, visibility_s=60,
                                                   now=at)
    [message] = [m for m in received if m.message_id == key]
    await api.runtime.transport.dead_letter("email", [(message.receipt, reason)], now=at)
    await api.runtime.transport.nack("email", [(m.receipt, 0.0) for m in received
                                               if m.message_id != key], now=at)


def field(html: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert match is not None, f"no {name} field in the page"
    return match[1]


async def log_in(api: Api, token: str, *, next_url: str = "/ui") -> httpx.Response:
    page = await api.client.get("/ui/login", params={"next": next_url}, headers=HTML)
    assert page.status_code == 200
    return await api.client.post("/ui/login", headers=HTML, data={
        "nonce": field(page.text, "nonce"), "next": next_url, "token": token})


async def session(api: Api, scope: str) -> str:
    """Given a browser logged in with a token of ``scope``; returns its CSRF token."""
    response = await log_in(api, api.tokens[scope])
    assert response.status_code == 303, response.text
    page = await api.client.get("/ui", headers=HTML)
    assert page.status_code == 200
    return field(page.text, "csrf")


def set_cookie(response: httpx.Response, name: str) -> str:
    [header] = [h for h in response.headers.get_list("set-cookie") if h.startswith(f"{name}=")]
    return header


# ---------------------------------------------------------------- logging in


async def test_logging_in_sets_an_httponly_strict_cookie_with_the_token_id_only(api: Api) -> None:
    response = await log_in(api, api.tokens["viewer"], next_url="/ui/dead-letters/sms?x=1")

    assert response.status_code == 303
    assert response.headers["location"] == "/ui/dead-letters/sms?x=1"
    header = set_cookie(response, SESSION_COOKIE).lower()
    assert "httponly" in header and "samesite=strict" in header and "path=/ui" in header
    value = api.client.cookies[SESSION_COOKIE]
    token_id, secret = api.tokens["viewer"].split("_")[1], api.tokens["viewer"].split("_", 2)[2]
    assert value.split(".")[:2] == [token_id, str(int(api.clock.now() + 12 * 3600))]
    assert secret not in value
    assert (await api.client.get("/ui", headers=HTML)).status_code == 200


@pytest.mark.parametrize(("token", "status", "message"), [
    ("", 401, "Paste an API token first."),
    ("tid_garbage", 401, "That is not a tidings token"),
    ("tid_000000000000_" + "x" * 43, 401, "Token is not valid."),
])
async def test_a_bad_token_is_refused_with_a_clear_message_and_no_session(
    api: Api, token: str, status: int, message: str
) -> None:
    response = await log_in(api, token)

    assert response.status_code == status
    assert message in response.text
    assert SESSION_COOKIE not in api.client.cookies


async def test_a_token_without_the_viewer_scope_cannot_log_in(api: Api) -> None:
    response = await log_in(api, api.tokens["publish"])

    assert response.status_code == 403
    assert "lacks the &#39;viewer&#39; scope (it has: publish)" in response.text
    assert SESSION_COOKIE not in api.client.cookies


async def test_a_login_post_without_its_forms_nonce_is_refused(api: Api) -> None:
    """A cross-site page cannot log a victim's browser in to the attacker's token."""
    response = await api.client.post("/ui/login", headers=HTML, data={
        "nonce": "forged", "next": "/ui", "token": api.tokens["operator"]})

    assert response.status_code == 403
    assert "had expired" in response.text
    assert SESSION_COOKIE not in api.client.cookies


@pytest.mark.parametrize("target", ["https://evil.example/ui", "//evil.example/ui",
                                    "/v1/status", "/ui/login", "/\\evil.example"])
async def test_the_next_page_after_login_is_always_a_dashboard_path(
    api: Api, target: str
) -> None:
    response = await log_in(api, api.tokens["viewer"], next_url=target)

    assert response.headers["location"] == "/ui"


async def test_a_dashboard_page_sends_a_browser_to_the_login_form(api: Api) -> None:
    browser = await api.client.get("/ui/dead-letters/email", params={"x": "1"}, headers=HTML)
    script = await api.client.get("/ui/live/overview", headers=FRAGMENT)
    client = await api.client.get("/ui")

    assert browser.status_code == 303
    assert browser.headers["location"] == "/ui/login?next=%2Fui%2Fdead-letters%2Femail%3Fx%3D1"
    assert (script.status_code, script.json()["field"]) == (401, "header.Authorization")
    assert (client.status_code, client.json()["field"]) == (401, "header.Authorization")


async def test_logging_out_needs_the_csrf_token_and_clears_the_cookie(api: Api) -> None:
    csrf = await session(api, "viewer")
    refused = await api.client.post("/ui/logout", headers=HTML, data={"csrf": "nope"})
    assert refused.status_code == 403

    response = await api.client.post("/ui/logout", headers=HTML, data={"csrf": csrf})

    assert response.status_code == 303 and response.headers["location"] == "/ui/login?bye=1"
    assert SESSION_COOKIE not in api.client.cookies
    assert (await api.client.get("/ui", headers=HTML)).status_code == 303


# ---------------------------------------------------------------- the session cookie


async def test_a_revoked_token_ends_its_session_at_once(api: Api) -> None:
    await session(api, "viewer")
    token_id = api.tokens["viewer"].split("_")[1]

    await api.runtime.store.api_token_revoke(token_id, now=api.clock.now())
    response = await api.client.get("/ui/live/overview", headers=FRAGMENT)

    assert response.status_code == 401
    assert response.json()["message"] == (f"token tid_{token_id} is revoked; log in again "
                                          "with another token")


async def test_a_session_expires_after_twelve_hours(api: Api) -> None:
    await session(api, "viewer")
    api.clock.advance(12 * 3600 - 1)
    assert (await api.client.get("/ui/live/overview", headers=FRAGMENT)).status_code == 200

    api.clock.advance(1)

    assert (await api.client.get("/ui/live/overview", headers=FRAGMENT)).status_code == 401


async def test_a_token_past_its_expiry_ends_its_session(api: Api) -> None:
    token = await api.token("viewer", expires_in_s=3600)
    assert (await log_in(api, token)).status_code == 303
    api.clock.advance(3599)
    assert (await api.client.get("/ui/live/overview", headers=FRAGMENT)).status_code == 200

    api.clock.advance(1)
    response = await api.client.get("/ui/live/overview", headers=FRAGMENT)
    again = await log_in(api, token)

    assert response.status_code == 401
    assert f"token tid_{token.split('_')[1]} expired at " in response.json()["message"]
    assert again.status_code == 401 and "expired at" in again.text


@pytest.mark.parametrize("base_url", ["https://tidings.test", "http://tidings.test"])
async def test_the_dashboard_cookies_are_secure_by_default_whatever_the_scheme(
        tmp_path: Path, base_url: str) -> None:
    # Behind a proxy that terminates TLS the API sees http: still Secure. (The proxy's
    # browser speaks https and sends the nonce back; here it is sent by hand.)
    async with open_api(tmp_path, base_url=base_url) as api:
        page = await api.client.get("/ui/login", headers=HTML)
        nonce = field(page.text, "nonce")
        response = await api.client.post(
            "/ui/login", headers={**HTML, "Cookie": f"{LOGIN_COOKIE}={nonce}"},
            data={"nonce": nonce, "next": "/ui", "token": api.tokens["viewer"]})

        assert response.status_code == 303, response.text
        assert "; secure" in set_cookie(page, LOGIN_COOKIE).lower()
        assert "; secure" in set_cookie(response, SESSION_COOKIE).lower()


async def test_insecure_cookies_allow_a_session_over_plain_http_when_set(tmp_path: Path
                                                                         ) -> None:
    async with open_api(tmp_path, api={"insecure_cookies": True}) as api:
        csrf = await session(api, "viewer")  # the cookie came back over http
        logout = await api.client.post("/ui/logout", headers=HTML, data={"csrf": csrf})

        assert "secure" not in set_cookie(logout, SESSION_COOKIE).lower()
        assert SESSION_COOKIE not in api.client.cookies


async def test_logging_out_clears_the_secure_cookie_with_the_same_attributes(api: Api
                                                                             ) -> None:
    csrf = await session(api, "viewer")

    response = await api.client.post("/ui/logout", headers=HTML, data={"csrf": csrf})

    cleared = set_cookie(response, SESSION_COOKIE).lower()
    assert "max-age=0" in cleared and "; secure" in cleared and "path=/ui" in cleared


async def test_a_forged_or_edited_cookie_is_refused(api: Api) -> None:
    await session(api, "viewer")
    real = api.client.cookies[SESSION_COOKIE]
    token_id, expiry, mac = real.split(".")
    operator_id = api.tokens["operator"].split("_")[1]
    forgeries = [
        f"{operator_id}.{expiry}.{mac}",  # another token's id
        f"{token_id}.{int(expiry) + 86400}.{mac}",  # a longer life
        Sessions(b"another secret").issue(token_id, now=api.clock.now()),
    ]
    for forged in forgeries:
        api.client.cookies.set(SESSION_COOKIE, forged, domain="tidings.test", path="/ui")

        response = await api.client.get("/ui/live/overview", headers=FRAGMENT)

        assert response.status_code == 401, forged


def test_sessions_are_signed_with_the_configured_secret_or_one_per_process() -> None:
    configured = sessions_from({"TIDINGS_UI_SECRET": "shared"})
    again = sessions_from({"TIDINGS_UI_SECRET": "shared"})
    cookie = configured.issue("0123456789ab", now=100.0)

    assert again.token_id(cookie, now=101.0) == "0123456789ab"
    assert sessions_from({}).token_id(cookie, now=101.0) is None
    assert configured.csrf_ok(cookie, again.csrf(cookie))
    assert not configured.csrf_ok(cookie, configured.csrf(cookie + "x"))
    assert not configured.csrf_ok(None, configured.csrf(cookie))


# ---------------------------------------------------------------- acting: scopes and CSRF


async def test_pausing_from_a_form_needs_the_csrf_token(api: Api) -> None:
    csrf = await session(api, "operator")
    form = {"scope": "channel", "name": "sms", "reason": "carrier incident"}

    missing = await api.client.post("/ui/admission/pause", headers=HTML, data=form)
    wrong = await api.client.post("/ui/admission/pause", headers=FRAGMENT,
                                  data={**form, "csrf": "0" * 64})

    assert missing.status_code == 403 and "reload the page" in missing.text
    assert (wrong.status_code, wrong.json()["field"]) == (403, "form.csrf")
    assert await api.runtime.store.switch_all() == []

    done = await api.client.post("/ui/admission/pause", headers=HTML, data={**form, "csrf": csrf})

    assert done.status_code == 303
    assert done.headers["location"] == "/ui?done=paused&scope=channel&name=sms#admission"
    [switch] = await api.runtime.store.switch_all()
    assert (switch.name, switch.paused, switch.reason) == ("sms", True, "carrier incident")
    page = (await api.client.get(done.headers["location"], headers=HTML)).text
    assert "Admission paused for channel sms." in page
    assert "carrier incident" in page


async def test_a_tripped_guardrail_is_a_banner_with_its_reason(api: Api) -> None:
    await session(api, "viewer")
    calm = (await api.client.get("/ui", headers=HTML)).text
    assert "data-guardrail" not in calm

    await api.runtime.store.switch_trip(
        scope="campaign", name="weekly-digest", now=api.clock.now(),
        reason="guardrail: rejection_rate 0.250 > 0.2 over 300s (10 of 40 sends)")
    page = (await api.client.get("/ui", headers=HTML)).text
    live = (await api.client.get("/ui/live/overview", headers=HTML)).text

    for html in (page, live):
        assert 'data-guardrail="campaign:weekly-digest"' in html
        assert "rejection_rate 0.250 &gt; 0.2 over 300s (10 of 40 sends)" in html


async def test_a_pause_of_an_unknown_name_is_refused_and_names_the_field(api: Api) -> None:
    csrf = await session(api, "operator")

    response = await api.client.post("/ui/admission/pause", headers=FRAGMENT, data={
        "scope": "channel", "name": "fax", "csrf": csrf})

    assert (response.status_code, response.json()["field"]) == (404, "form.name")
    assert await api.runtime.store.switch_all() == []


async def test_the_notice_after_an_action_never_echoes_the_query(api: Api) -> None:
    await session(api, "operator")

    page = await api.client.get("/ui", headers=HTML, params={
        "done": "paused", "scope": "channel", "name": "<script>alert(1)</script>"})

    assert "alert(1)" not in page.text and 'class="notice"' not in page.text


async def test_a_viewer_cannot_redrive_nor_sees_the_buttons(api: Api) -> None:
    csrf = await session(api, "viewer")
    page = await api.client.get("/ui/dead-letters/email", headers=HTML)
    assert DEAD in page.text
    assert "Redrive</button>" not in page.text and "Pause</button>" not in page.text

    response = await api.client.post("/ui/dead-letters/email/redrive", headers=HTML,
                                     data={"csrf": csrf})

    assert response.status_code == 403
    assert "needs an <code>operator</code> token" in response.text
    assert len(await api.runtime.transport.dead_letters("email", limit=10)) == 1


async def test_an_operator_redrives_one_dead_letter_from_the_list(api: Api) -> None:
    csrf = await session(api, "operator")
    [letter] = await api.runtime.transport.dead_letters("email", limit=10)

    response = await api.client.post("/ui/dead-letters/email/redrive", headers=HTML,
                                     data={"csrf": csrf, "id": letter.id})
    again = await api.client.post("/ui/dead-letters/email/redrive", headers=HTML,
                                  data={"csrf": csrf, "id": letter.id})

    assert response.headers["location"] == "/ui/dead-letters/email?redriven=1&kept=0"
    intent = await api.runtime.store.intent_get(DEAD)
    assert intent is not None and intent.state is State.RETRYABLE
    page = (await api.client.get(response.headers["location"], headers=HTML)).text
    assert "1 dead letter redriven." in page and "No dead letters on email" in page
    assert again.headers["location"] == "/ui/dead-letters/email?gone=1"


async def test_a_script_with_an_operator_bearer_token_needs_no_csrf(api: Api) -> None:
    response = await api.client.post("/ui/admission/pause", data={
        "scope": "campaign", "name": "weekly-digest"}, headers=api.auth("operator"))

    assert response.status_code == 303
    [switch] = await api.runtime.store.switch_all()
    assert (switch.scope, switch.paused) == ("campaign", True)


# ---------------------------------------------------------------- pages and fragments


async def test_the_overview_fragment_shows_channels_campaigns_and_switches(api: Api) -> None:
    await session(api, "viewer")
    await api.runtime.store.switch_set(scope="channel", name="sms", paused=True,
                                       now=api.clock.now(), reason="carrier incident")

    html = (await api.client.get("/ui/live/overview", headers=FRAGMENT)).text

    email = section(html, 'data-channel="email"')
    assert metric(email, "backlog") == "3" and metric(email, "dead-letters") == "1"
    assert metric(email, "oldest") == "35 s" and metric(email, "rate") == "0.2 /min"
    assert "Admission paused" in section(html, 'data-channel="sms"')
    digest = section(html, 'data-campaign="weekly-digest"')
    assert "1 accepted" in digest and "1 failed" in digest and "50.0 %" in digest
    assert "5 members, 8 intents" in digest
    assert "carrier incident" in section(html, 'data-switch="channel:sms"')
    assert "<html" not in html  # a fragment, not a page


async def test_a_channel_card_says_when_a_provider_is_out(api: Api) -> None:
    await session(api, "viewer")
    # as a worker of a channel with fallbacks records it (tidings.runtime.provider_said)
    await api.runtime.provider_said("email", "postmark", True, api.clock.now(), "HTTP 503")
    await api.runtime.provider_said("email", "sendgrid", False, api.clock.now(), "back")

    html = (await api.client.get("/ui/live/overview", headers=FRAGMENT)).text

    email = section(html, 'data-channel="email"')
    assert "Provider postmark out since" in email and 'title="HTTP 503"' in email
    assert "sendgrid" not in email  # back: nothing to say
    assert "Provider" not in section(html, 'data-channel="sms"')


async def test_the_overview_keeps_a_short_history_for_the_sparklines(api: Api) -> None:
    await session(api, "viewer")
    first = (await api.client.get("/ui/live/overview", headers=FRAGMENT)).text
    assert "fills in while this page stays open" in first

    api.clock.advance(5)
    html = (await api.client.get("/ui/live/overview", headers=FRAGMENT)).text

    assert 'class="spark"' in section(html, 'data-channel="email"')
    assert "last 5 s" in section(html, 'data-channel="email"')


async def search(api: Api, csrf: str, q: str, *, by: str = "auto",
                 live: bool = False) -> httpx.Response:
    """A search posted from the timeline's form (or its live refresh)."""
    return await api.client.post("/ui/live/timeline" if live else "/ui/timeline",
                                 headers=FRAGMENT if live else HTML,
                                 data={"q": q, "by": by, "csrf": csrf})


async def test_a_timeline_search_answers_the_three_questions(api: Api) -> None:
    csrf = await session(api, "viewer")

    delivered = (await search(api, csrf, KEY)).text
    dead = (await search(api, csrf, DEAD, live=True)).text
    waiting = (await search(api, csrf, f"weekly-digest/{DAY}/cust_0003/email/v3",
                            live=True)).text

    assert answers(delivered) == ["Yes", "Yes", "Yes"]
    assert "receipt rcpt-1" in delivered and surrogate("cust_0001") in delivered
    assert answers(dead) == ["Yes", "Yes", "No"]
    assert "dead: retry budget spent" in dead
    assert answers(waiting) == ["Yes", "Yes", "Not yet"]


async def test_a_timeline_search_by_recipient_id_or_surrogate(api: Api) -> None:
    csrf = await session(api, "viewer")

    by_id = (await search(api, csrf, "cust_0001", live=True)).text
    by_surrogate = (await search(api, csrf, surrogate("cust_0001"), live=True)).text

    assert "2 deliveries, found by recipient" in by_id
    assert f"weekly-digest/{DAY}/cust_0001/sms/v3" in by_id
    assert "1 delivery, found by recipient" in by_surrogate and KEY in by_surrogate


async def test_an_empty_or_fruitless_search_says_what_to_do(api: Api) -> None:
    csrf = await session(api, "viewer")

    empty = (await api.client.get("/ui/timeline", headers=HTML)).text
    nothing = (await search(api, csrf, "nope")).text

    assert "Paste a <strong>delivery key</strong>" in empty
    assert "Nothing found for “nope”" in nothing and "Keys are exact" in nothing


async def test_what_is_searched_for_never_goes_into_a_url(api: Api) -> None:
    csrf = await session(api, "viewer")
    typed = "c1@example.com"

    page = await search(api, csrf, typed)
    delivered = (await search(api, csrf, KEY)).text

    assert page.status_code == 200 and page.url.path == "/ui/timeline" and not page.url.query
    assert 'method="post" action="/ui/timeline"' in page.text
    assert 'method="get"' not in page.text
    # The live refresh posts the same search again; nothing typed is in an href or src.
    live = re.search(r'data-live-src="([^"]*)" data-live-body="([^"]*)"', delivered)
    assert live is not None and live[1] == "/ui/live/timeline"
    assert all(KEY not in url and "example.com" not in url
               for url in re.findall(r'(?:href|src|action)="([^"]*)"', delivered + page.text))
    # A query string is not a search: old links show the empty form.
    old = await api.client.get("/ui/timeline", params={"q": KEY}, headers=HTML)
    assert old.status_code == 200 and "Paste a <strong>delivery key</strong>" in old.text
    assert (await api.client.get("/ui/live/timeline", params={"q": KEY},
                                 headers=FRAGMENT)).status_code == 405


async def test_a_search_needs_the_sessions_csrf_token(api: Api) -> None:
    await session(api, "viewer")

    forged = await search(api, "forged", KEY)
    missing = await api.client.post("/ui/timeline", headers=HTML, data={"q": KEY})
    too_long = await search(api, field((await api.client.get("/ui/timeline", headers=HTML)).text,
                                       "csrf"), "x" * 601)

    assert forged.status_code == missing.status_code == 403
    assert "older than your session" in forged.text
    assert too_long.status_code == 422 and "at most 600 characters" in too_long.text


async def test_a_script_with_a_bearer_token_searches_without_csrf(api: Api) -> None:
    response = await api.client.post("/ui/live/timeline", data={"q": KEY},
                                     headers={**FRAGMENT, **api.auth("viewer")})

    assert response.status_code == 200 and answers(response.text) == ["Yes", "Yes", "Yes"]


async def test_a_dead_letters_key_opens_its_timeline_by_a_posted_form(api: Api) -> None:
    csrf = await session(api, "operator")
    html = (await api.client.get("/ui/dead-letters/email", headers=HTML)).text

    row = section(html, f'data-key="{DEAD}"')
    assert 'href="/ui/timeline?' not in html
    assert f'name="q" value="{DEAD}"' in row and 'value="key"' in row
    assert (await search(api, csrf, DEAD, by="key")).status_code == 200


async def test_dead_letters_list_and_empty_state(api: Api) -> None:
    await session(api, "operator")

    chosen = await api.client.get("/ui/dead-letters", headers=HTML)
    email = (await api.client.get("/ui/live/dead-letters/email", headers=FRAGMENT)).text
    sms = (await api.client.get("/ui/dead-letters/sms", headers=HTML)).text
    unknown = await api.client.get("/ui/dead-letters/fax", headers=HTML)

    assert chosen.headers["location"] == "/ui/dead-letters/email"
    assert f'data-key="{DEAD}"' in email and "retry budget spent" in email
    assert "Redrive</button>" in email
    assert "No dead letters on sms" in sms
    assert unknown.status_code == 404 and "unknown channel &#39;fax&#39;" in unknown.text


async def test_pages_never_show_addresses_phone_numbers_or_token_secrets(api: Api) -> None:
    csrf = await session(api, "operator")
    pages = ["/ui", "/ui/live/overview", "/ui/dead-letters/email", "/ui/timeline"]
    searches = ["cust_0001", KEY, DEAD, surrogate("cust_0003")]
    secrets = [t.split("_", 2)[2] for t in api.tokens.values()]
    rows = [await api.runtime.store.api_token_get(t.split("_")[1]) for t in api.tokens.values()]
    hashes = [r.secret_hash for r in rows if r is not None]
    shown = {path: (await api.client.get(path, headers=HTML)).text for path in pages}
    for q in searches:
        shown[f"search {q}"] = (await search(api, csrf, q)).text
        shown[f"live search {q}"] = (await search(api, csrf, q, live=True)).text

    for path, html in shown.items():
        assert "@example.com" not in html, path
        assert not re.search(r"\+1555\d+", html), path
        assert not any(s in html for s in secrets + hashes), path
        assert api.client.cookies[SESSION_COOKIE] not in html, path


async def test_pages_forbid_framing_inline_scripts_and_caching(api: Api) -> None:
    await session(api, "viewer")

    response = await api.client.get("/ui", headers=HTML)

    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cache-control"] == "no-store"
    assert "<script>" not in response.text and " style=" not in response.text


async def test_static_files_are_public_versioned_and_known_by_name_only(api: Api) -> None:
    page = (await api.client.get("/ui/login", headers=HTML)).text
    [css] = re.findall(r'href="(/ui/static/app\.css\?v=[0-9a-f]{12})"', page)

    response = await api.client.get(css)
    unknown = await api.client.get("/ui/static/..%2Fui.py")

    assert response.status_code == 200 and response.headers["content-type"].startswith("text/css")
    assert "max-age" in response.headers["cache-control"]
    assert unknown.status_code == 404


# ---------------------------------------------------------------- pure helpers


def test_numbers_read_with_their_units() -> None:
    assert [fmt_duration(s) for s in (None, 0, 0.2, 42, 200, 3600, 7500, 90000)] == [
        "—", "0 s", "< 1 s", "42 s", "3 min 20 s", "1 h", "2 h 5 min", "1 d 1 h"]
    assert [fmt_rate(r) for r in (None, 0, 0.05, 12.345, 1500)] == [
        "—", "0 /s", "3.0 /min", "12.3 /s", "1,500.0 /s"]
    assert [fmt_percent(x) for x in (None, 1.0, 0.99996, 0.5)] == [
        "—", "100.0 %", "99.9 %", "50.0 %"]
    assert fmt_ago(100.0, 160.0) == "1 min ago" and fmt_ago(100.0, 100.4) == "just now"
    assert fmt_ago(200.0, 100.0) == "in 1 min 40 s"


def test_free_text_is_scrubbed_of_addresses_and_phone_numbers() -> None:
    assert scrub("550 no such user ada@example.com, call +15550000042") == (
        "550 no such user ‹redacted›, call ‹redacted›")
    assert scrub(None) == "" and scrub("HTTP 503") == "HTTP 503"


def test_sparkline_points_scale_to_the_box() -> None:
    assert sparkline([]) == ""
    assert sparkline([5.0]) == "0,1.0 120.0,1.0"
    assert sparkline([0.0, 10.0, 5.0], width=100, height=12) == "0.0,11.0 50.0,1.0 100.0,6.0"


def counts(**given: int) -> Counts:
    """A channel's counts: zero but for ``given``."""
    zero = {f.name: 0 for f in fields(Counts)}
    return Counts(**{**zero, "sli": None, **given})


def test_history_keeps_one_reading_per_interval_and_a_bounded_number() -> None:
    history = History(size=3, every_s=2.0)
    for at in (0.0, 1.0, 2.0, 4.0, 6.0, 8.0):
        history.record(at, {"email": counts(backlog=int(at))})

    assert [s.at for s in history.series("email")] == [4.0, 6.0, 8.0]
    assert history.series("sms") == []


# ---------------------------------------------------------------- reading helpers


def section(html: str, marker: str) -> str:
    """The element that carries ``marker`` (an attribute), up to the next sibling card/row."""
    start = html.index(marker)
    ends = [i for i in (html.find("</article>", start), html.find("</tr>", start),
                        html.find("</li>", start)) if i != -1]
    return html[start:min(ends)]


def metric(card: str, name: str) -> str:
    match = re.search(rf'data-metric="{name}"[^>]*>(.*?)</dd>', card, flags=re.DOTALL)
    assert match is not None, name
    return re.sub(r"<[^>]+>", "", match[1]).strip()


def answers(html: str) -> list[str]:
    return re.findall(r'<strong class="answer-a">([^<]*)</strong>', html)
