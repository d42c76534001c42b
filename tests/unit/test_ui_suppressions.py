"""The dashboard's suppression page over ASGI, on both stores: an operator finds entries
by address (exactly or a part), channel and reason a page at a time, adds one, removes
one with a note (on the address's history as the API's removal is), exports the CSV
the API exports; a viewer's session is refused every route; a bad field is shown on
its form, named, and changes nothing."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from apikit import TWIN, Api, open_api

from tidings.api.ui.suppressions import PAGE_SIZE
from tidings.operate import suppression

CHANNELS = {"email": {"kind": "email", **TWIN}, "sms": {"kind": "sms", **TWIN}}
HTML = {"Accept": "text/html,application/xhtml+xml"}


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ui.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def api(tmp_path: Path, store_url: str) -> AsyncIterator[Api]:
    async with open_api(tmp_path, store=store_url, channels=CHANNELS,
                        base_url="https://tidings.test") as opened:
        yield opened


def field(html: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert match is not None, f"no {name} field in the page"
    return match[1]


async def session(api: Api, scope: str) -> str:
    """Given a browser logged in with a token of ``scope``; returns its CSRF token."""
    login = await api.client.get("/ui/login", headers=HTML)
    done = await api.client.post("/ui/login", headers=HTML, data={
        "nonce": field(login.text, "nonce"), "next": "/ui", "token": api.tokens[scope]})
    assert done.status_code == 303, done.text
    page = await api.client.get("/ui", headers=HTML)
    return field(page.text, "csrf")


def rows(html: str) -> list[str]:
    return re.findall(r'data-suppression="([^"]*)"', html)


async def seed(api: Api, *addresses: tuple[str, str]) -> None:
    for address, kind in addresses:
        assert await suppression.add(api.runtime.store, suppression.entry(address, kind),
                                     by="seed", now=api.clock.now()) is not None


async def post(api: Api, path: str, csrf: str, **data: str) -> httpx.Response:
    return await api.client.post(path, headers=HTML, data={"csrf": csrf, **data})


async def test_an_operator_adds_finds_and_removes_with_a_note_on_the_audit_trail(
    api: Api
) -> None:
    csrf = await session(api, "operator")

    added = await post(api, "/ui/suppressions/add", csrf, address="Ann@Example.com",
                       channel="email", note="asked by phone")
    assert added.status_code == 303, added.text
    assert added.headers["location"].endswith("done=added")
    page = await api.client.get(added.headers["location"], headers=HTML)
    assert rows(page.text) == ["email:ann@example.com"]
    assert "Address suppressed." in page.text and "operator:token operator token" in page.text

    removed = await post(api, "/ui/suppressions/remove", csrf, address="ann@example.com",
                         kind="email", note="customer asked again")
    assert removed.status_code == 303
    assert removed.headers["location"].endswith("done=removed")
    found = await suppression.history(api.runtime.store, address="ann@example.com",
                                      kind="email")
    token_id = api.tokens["operator"].split("_")[1]
    assert found.entry is None
    assert [(e.type, e.worker, e.detail) for e in found.events] == [
        ("suppression_added", f"token operator token ({token_id})", "manual: asked by phone"),
        ("suppression_removed", f"token operator token ({token_id})",
         f"was manual from operator:token operator token ({token_id}): customer asked again")]
    # The API sees what the page did.
    listed = await api.client.get("/v1/suppressions", headers=api.auth("operator"))
    assert listed.json()["suppressions"] == []


async def test_the_filter_finds_by_part_or_exact_address_channel_and_reason(api: Api) -> None:
    await seed(api, ("ann@example.com", "email"), ("bob@example.com", "email"),
               ("+15550100", "sms"))
    await suppression.add(api.runtime.store, suppression.entry(
        "ann@other.org", "email", reason="complaint"), by="seed", now=api.clock.now())
    csrf = await session(api, "operator")

    async def found(**params: str) -> list[str]:
        page = await post(api, "/ui/suppressions", csrf, **params)
        assert page.status_code == 200, page.text
        return rows(page.text)

    assert await found(address="ANN") == ["email:ann@example.com", "email:ann@other.org"]
    assert await found(address=" Ann@Example.COM ", match="exact") == ["email:ann@example.com"]
    assert await found(address="carl@example.com", match="exact") == []
    assert await found(channel="sms") == ["sms:+15550100"]
    assert await found(address="example", reason="manual") == [
        "email:ann@example.com", "email:bob@example.com"]
    assert await found(reason="complaint") == ["email:ann@other.org"]


async def test_pages_walk_the_list_once(api: Api) -> None:
    await seed(api, *[(f"c{n:03d}@example.com", "email") for n in range(PAGE_SIZE + 3)])
    await seed(api, ("zed@other.org", "email"))  # after the last match: the filter must carry
    csrf = await session(api, "operator")

    seen: list[str] = []
    pages = 0
    form: dict[str, str] | None = {"address": "EXAMPLE.com"}
    while form is not None:
        page = await post(api, "/ui/suppressions", csrf, **form)
        assert page.status_code == 200, page.text
        seen += rows(page.text)
        pages += 1
        # What the page's "Next page" form posts: the filter and where this page ended.
        nxt = re.search(r'aria-label="Next page">(.*?)</form>', page.text, re.S)
        form = None if nxt is None else {
            name: html.unescape(value) for name, value in re.findall(
                r'name="([^"]*)" value="([^"]*)"', nxt[1]) if name != "csrf"}
    assert seen == [f"email:c{n:03d}@example.com" for n in range(PAGE_SIZE + 3)]
    assert pages == 2
    # The whole list's first page is a GET; its next page carries no filter.
    first = await api.client.get("/ui/suppressions", headers=HTML)
    assert len(rows(first.text)) == PAGE_SIZE


@pytest.mark.parametrize(("path", "data", "field_name"), [
    ("/ui/suppressions/add", {"address": "not an address", "channel": "email"}, "address"),
    ("/ui/suppressions/add", {"address": "ann@example.com", "channel": "fax"}, "channel"),
    ("/ui/suppressions/add", {"address": "ann@example.com", "channel": ""}, "channel"),
    ("/ui/suppressions/remove", {"address": "ann@example.com", "kind": "email", "note": ""},
     "note"),
    ("/ui/suppressions/remove", {"address": "ann@", "kind": "email", "note": "n"}, "address"),
])
async def test_a_bad_field_is_shown_on_its_form_and_changes_nothing(
    api: Api, path: str, data: dict[str, str], field_name: str
) -> None:
    await seed(api, ("ann@example.com", "email"))
    csrf = await session(api, "operator")

    answer = await post(api, path, csrf, **data)

    assert answer.status_code == 422
    assert f'data-field="{field_name}"' in answer.text, answer.text
    assert rows(answer.text) == ["email:ann@example.com"]
    if path.endswith("/add"):  # what was typed is kept on the form
        typed = re.search(r'id="add-address"[^>]*value="([^"]*)"', answer.text)
        assert typed is not None and typed[1] == data["address"]
    found = await suppression.history(api.runtime.store, address="ann@example.com",
                                      kind="email")
    assert [e.type for e in found.events] == ["suppression_added"]  # the seed's alone
    assert rows((await api.client.get("/ui/suppressions", headers=HTML)).text) == [
        "email:ann@example.com"]


async def test_a_bad_filter_is_named(api: Api) -> None:
    csrf = await session(api, "operator")
    for params, name in (({"channel": "fax"}, "channel"), ({"reason": "whim"}, "reason"),
                         ({"match": "like"}, "match"),
                         ({"address": "ann@", "match": "exact"}, "address"),
                         ({"address": "x" * 321}, "address")):
        page = await post(api, "/ui/suppressions", csrf, **params)
        assert page.status_code == 422 and f'data-field="{name}"' in page.text, params


async def test_a_viewer_is_refused_every_route_and_nothing_changes(api: Api) -> None:
    await seed(api, ("ann@example.com", "email"))
    csrf = await session(api, "viewer")

    overview = await api.client.get("/ui", headers=HTML)
    assert "/ui/suppressions" not in overview.text  # not in the viewer's nav
    refused: list[Any] = [
        await api.client.get("/ui/suppressions", headers=HTML),
        await post(api, "/ui/suppressions", csrf, address="ann"),
        await api.client.get("/ui/suppressions/export", headers=HTML),
        await post(api, "/ui/suppressions/add", csrf, address="bob@example.com",
                   channel="email"),
        await post(api, "/ui/suppressions/remove", csrf, address="ann@example.com",
                   kind="email", note="n"),
    ]
    assert [r.status_code for r in refused] == [403] * 5
    assert all("ann@example.com" not in r.text for r in refused)
    listed = await suppression.listing(api.runtime.store)
    assert [(s.address, s.kind) for s in listed] == [("ann@example.com", "email")]


async def test_a_form_without_the_session_csrf_token_is_refused(api: Api) -> None:
    await session(api, "operator")
    answer = await post(api, "/ui/suppressions/add", "wrong", address="bob@example.com",
                        channel="email")
    assert answer.status_code == 403
    assert await suppression.listing(api.runtime.store) == []


async def test_the_export_is_the_apis(api: Api) -> None:
    await seed(api, ("ann@example.com", "email"), ("+15550100", "sms"))
    await session(api, "operator")

    mine = await api.client.get("/ui/suppressions/export", params={"channel": "email"},
                                headers=HTML)
    theirs = await api.client.get("/v1/suppressions/export", params={"kind": "email"},
                                  headers=api.auth("operator"))
    assert mine.status_code == 200 and mine.headers["content-type"].startswith("text/csv")
    assert "attachment" in mine.headers["content-disposition"]
    assert mine.text == theirs.text
    assert mine.text.splitlines()[0] == ",".join(suppression.EXPORT_COLUMNS)
    assert [line.split(",")[:2] for line in mine.text.splitlines()[1:]] == [
        ["ann@example.com", "email"]]
