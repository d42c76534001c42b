"""``PublishRoute`` serves ``POST /v1/queue/publish`` ahead of the documented FastAPI
route: every request, good or bad, gets the answer the documented route alone gives,
and the requests it takes are the valid ones."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apikit import Api, dumps, open_api, publish_body, publish_headers
from starlette.types import Receive, Scope, Send

from tidings.api.publish import PublishRoute

URL = "/v1/queue/publish"


def without_publish_route(api: Api) -> None:
    """The app as it is without ``PublishRoute``: the documented route serves all."""
    routes = api.app.router.routes
    routes[:] = [r for r in routes if not isinstance(r, PublishRoute)]


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[Api, Api]]:
    for name in ("served", "documented"):
        (tmp_path / name).mkdir()
    async with open_api(tmp_path / "served") as served, \
            open_api(tmp_path / "documented") as documented:
        without_publish_route(documented)
        yield served, documented


def _case(api: Api, name: str) -> tuple[bytes, dict[str, str]]:
    """One request by name: (body, headers), the same on either app."""
    good = dumps(publish_body("cust_0001"))
    headers = publish_headers(api, "key-1")
    if name == "good":
        return good, headers
    if name == "replay":
        return good, headers
    if name == "conflict":
        return dumps(publish_body("cust_0002")), headers
    if name == "channel queue":
        return dumps(publish_body("cust_0003", queue="transactional-email",
                                  template="receipt", email="c3@example.com")), \
            publish_headers(api, "key-2")
    if name == "no token":
        return good, {k: v for k, v in headers.items() if k != "Authorization"}
    if name == "wrong scope":
        return good, {**headers, **api.auth("viewer")}
    if name == "not a token":
        return good, {**headers, "Authorization": "Bearer tid_nope"}
    if name == "not json media":
        return good, {**headers, "Content-Type": "text/plain"}
    if name == "bad json":
        return b'{"queue": "weekly-digest", ', headers
    if name == "bad json, no token":
        return b'{"queue": ', {k: v for k, v in headers.items() if k != "Authorization"}
    if name == "bad body, no token":
        return dumps({"queue": 1}), {k: v for k, v in headers.items() if k != "Authorization"}
    if name == "nested too deep":
        return b'{"queue": "weekly-digest", "payload": ' + b'[' * 5000 + b']' * 5000 + b'}', \
            headers
    if name == "no key":
        return good, {k: v for k, v in headers.items() if k != "Idempotency-Key"}
    if name == "key with a space":
        return good, {**headers, "Idempotency-Key": "a b"}
    if name == "key too long":
        return good, {**headers, "Idempotency-Key": "k" * 256}
    if name == "bad field":
        return dumps(publish_body("cust 1")), publish_headers(api, "key-3")
    if name == "extra field":
        return dumps({**publish_body(), "extra": 1}), publish_headers(api, "key-4")
    if name == "a list":
        return dumps([1, 2]), publish_headers(api, "key-5")
    if name == "not in the audience":
        return dumps(publish_body("cust_0404")), publish_headers(api, "key-6")
    if name == "unknown queue":
        return dumps(publish_body(queue="nope")), publish_headers(api, "key-7")
    raise AssertionError(name)


CASES = ["good", "replay", "conflict", "channel queue", "no token", "wrong scope",
         "not a token", "not json media", "bad json", "bad json, no token",
         "bad body, no token", "nested too deep", "no key", "key with a space",
         "key too long", "bad field", "extra field", "a list", "not in the audience",
         "unknown queue"]
_TOKEN_ID = re.compile(r"tid_[0-9a-f]{12}")


async def _answer(api: Api, name: str) -> tuple[int, Any, dict[str, str]]:
    body, headers = _case(api, name)
    response = await api.client.post(URL, content=body, headers=headers)
    kept = {k: v for k, v in response.headers.items()
            if k in ("content-type", "retry-after", "www-authenticate", "idempotent-replayed")}
    # Each app has its own tokens: their ids are the one expected difference.
    text = _TOKEN_ID.sub("tid_<id>", response.text)
    return response.status_code, json.loads(text), kept


async def test_every_answer_is_the_documented_routes_answer(pair: tuple[Api, Api]) -> None:
    served, documented = pair
    for name in CASES:
        mine, theirs = await _answer(served, name), await _answer(documented, name)
        assert mine == theirs, name
    assert await served.intents() == await documented.intents() == 3


async def test_the_valid_publishes_are_the_ones_it_serves(tmp_path: Path) -> None:
    async with open_api(tmp_path) as api:
        served: list[str] = []
        route = next(r for r in api.app.router.routes if isinstance(r, PublishRoute))
        serve = route.handle

        async def spy(scope: Scope, receive: Receive, send: Send) -> None:
            try:
                await serve(scope, receive, send)
            finally:  # a refused credential raises, for the app's error handler
                served.append("handed on" if scope.get("tidings.publish_handed_on")
                              else "served")

        route.handle = spy  # type: ignore[method-assign]
        for name in ("good", "replay", "bad field", "no key", "no token"):
            body, headers = _case(api, name)
            await api.client.post(URL, content=body, headers=headers)

    # A refused credential is answered here too (the same check, the same 401).
    assert served == ["served", "served", "handed on", "handed on", "served"]


async def test_what_it_serves_is_logged_and_counted_under_the_routes_template(
        pair: tuple[Api, Api], caplog: pytest.LogCaptureFixture) -> None:
    served, documented = pair
    with caplog.at_level(logging.INFO, logger="tidings.api.access"):
        for api in (served, documented):
            body, headers = _case(api, "good")
            assert (await api.client.post(URL, content=body, headers=headers)).status_code == 202
    routes = [getattr(r, "route", None) for r in caplog.records if r.msg == "request"]
    assert routes == [URL, URL]
