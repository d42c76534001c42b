"""Who may call what: every route has a scope, tokens are checked per request, and the
route map fails closed."""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from apikit import DAY, Api, open_api
from fastapi.routing import APIRoute
from hypothesis import given
from hypothesis import strategies as st

from tidings.api import ScopeMap, create_app, default_scope_map
from tidings.api.app import route_methods
from tidings.api.auth import PUBLIC, secrets_from
from tidings.api.tokens import (
    MAX_LIFETIME_S,
    Scope,
    check_lifetime,
    expired,
    grants,
    hash_secret,
    new_token,
    parse_scopes,
    split_token,
)
from tidings.core.durations import parse_duration
from tidings.core.errors import ConfigurationError, InvalidInput

#: Values for the path parameters of every route, to call each one concretely.
PATH_VALUES = {"campaign": "weekly-digest", "channel": "email", "date": DAY,
               "recipient_id": "cust_0001", "action": "cancel"}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path) as opened:
        yield opened


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: PATH_VALUES[m[1]], path)


def protected_routes(api: Api) -> list[tuple[str, str, str]]:
    """(method, path template, scope) of every route that needs credentials."""
    found = []
    for path, methods in route_methods(api.app.routes):
        for method in sorted(methods - {"HEAD"}):
            scope = api.app.state.scope_map.scope_for(method, path)
            if scope != PUBLIC:
                found.append((method, path, scope))
    return found


# ---------------------------------------------------------------- the route map


async def test_every_route_of_the_app_is_mapped_to_a_scope(api: Api) -> None:
    routes = route_methods(api.app.routes)
    assert {path for path, _ in routes} >= {"/v1/trigger/{campaign}", "/v1/queue/publish",
                                             "/metrics", "/v1/status", "/openapi.json"}
    unmapped = [f"{method} {path}" for path, methods in routes for method in methods
                if method != "HEAD" and api.app.state.scope_map.scope_for(method, path) is None]

    assert unmapped == []


async def test_an_app_with_an_unmapped_route_is_refused_at_build(api: Api) -> None:
    partial = default_scope_map()
    del partial.exact[("GET", "/v1/plan")]

    with pytest.raises(ConfigurationError, match=r"api: routes without a scope: GET /v1/plan"):
        create_app(api.runtime, scope_map=partial, env={})


async def test_a_route_added_after_the_build_without_a_scope_is_refused_at_request(
    api: Api,
) -> None:
    async def sneaky() -> dict[str, str]:
        return {"secret": "data"}

    api.app.router.routes.append(APIRoute("/v1/sneaky", sneaky, methods=["GET"],
                                          dependencies=api.app.router.dependencies))

    response = await api.client.get("/v1/sneaky", headers=api.auth("operator"))

    assert response.status_code == 403
    assert response.json()["field"] == "path"
    assert "not mapped to a scope" in response.json()["message"]


def test_a_prefix_maps_a_whole_group_of_future_routes() -> None:
    scopes = default_scope_map().prefix("/ui", Scope.VIEWER)

    assert scopes.scope_for("GET", "/ui") == "viewer"
    assert scopes.scope_for("GET", "/ui/campaigns/{campaign}") == "viewer"
    assert scopes.scope_for("GET", "/uix") is None
    assert scopes.scope_for("POST", "/v1/cancel") == "operator"  # exact entries win
    assert ScopeMap().unmapped([("/ui/x", {"GET", "HEAD"})]) == ["GET /ui/x"]


async def test_every_protected_route_refuses_a_call_without_a_token(api: Api) -> None:
    routes = protected_routes(api)
    assert len(routes) >= 10
    for method, path, _ in routes:
        response = await api.client.request(method, concrete(path))

        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["field"] == "header.Authorization"
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert await api.intents() == 0 and await api.occurrences() == 0


async def test_every_protected_route_refuses_a_token_without_its_scope(api: Api) -> None:
    for method, path, scope in protected_routes(api):
        others = [s for s in Scope if not grants([s.value], Scope(scope))]
        for other in others:
            response = await api.client.request(method, concrete(path),
                                                headers=api.auth(other.value), json={})

            assert response.status_code == 403, (method, path, other, response.text)
            assert f"lacks the {scope!r} scope" in response.json()["message"]
    assert await api.intents() == 0 and await api.occurrences() == 0


async def test_public_routes_need_no_token(api: Api) -> None:
    assert (await api.client.get("/healthz")).json()["ok"] is True
    schema = (await api.client.get("/openapi.json")).json()
    assert "/v1/queue/publish" in schema["paths"]


# ---------------------------------------------------------------- tokens


async def test_a_revoked_token_is_refused_at_once(api: Api) -> None:
    text = await api.token("viewer")
    assert (await api.client.get("/v1/status", headers={"Authorization": f"Bearer {text}"})
            ).status_code == 200
    token_id = text.split("_")[1]

    await api.runtime.store.api_token_revoke(token_id, now=api.clock.now())
    response = await api.client.get("/v1/status", headers={"Authorization": f"Bearer {text}"})

    assert response.status_code == 401
    assert response.json()["message"] == f"token tid_{token_id} is revoked"


async def test_a_token_is_refused_from_its_expiry_on_with_the_reason(api: Api) -> None:
    text = await api.token("viewer", expires_in_s=3600)
    auth = {"Authorization": f"Bearer {text}"}
    token_id = text.split("_")[1]

    api.clock.advance(3599.5)
    assert (await api.client.get("/v1/status", headers=auth)).status_code == 200
    api.clock.advance(0.5)
    response = await api.client.get("/v1/status", headers=auth)

    assert response.status_code == 401
    assert response.json()["field"] == "header.Authorization"
    assert response.json()["message"] == f"token tid_{token_id} expired at 2026-08-14 10:00:05Z"
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_a_token_without_an_expiry_is_valid_ever_after(api: Api) -> None:
    text = await api.token("viewer")

    api.clock.advance(10 * 365 * 86400)

    assert (await api.client.get("/v1/status", headers={"Authorization": f"Bearer {text}"})
            ).status_code == 200


def test_a_new_token_carries_its_expiry_from_now() -> None:
    _, row = new_token(name="cron", scopes=["trigger"], now=100.0, expires_in_s=90.0)
    _, forever = new_token(name="cron", scopes=["trigger"], now=100.0)

    assert row.expires_at == 190.0 and forever.expires_at is None
    assert not expired(row, 189.9) and expired(row, 190.0)
    assert not expired(forever, 1e12)


@pytest.mark.parametrize("seconds", [0.0, -1.0, math.inf, math.nan, MAX_LIFETIME_S + 1])
def test_a_lifetime_is_above_zero_and_at_most_a_century(seconds: float) -> None:
    with pytest.raises(InvalidInput) as raised:
        new_token(name="cron", scopes=["trigger"], now=100.0, expires_in_s=seconds)

    assert raised.value.field == "expires_in"


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("15m", 900), ("12h", 43_200), ("30d", 2_592_000), (" 7D ", 604_800),
    ("36500d", MAX_LIFETIME_S),
])
def test_expires_in_takes_a_number_and_a_unit(text: str, seconds: float) -> None:
    assert check_lifetime(parse_duration(text, "expires_in")) == seconds


@pytest.mark.parametrize("text", ["", "d", "0s", "-5m", "inf", "nan", "1e3s", "30 days",
                                  "36501d"])
def test_anything_else_is_refused_as_expires_in(text: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        check_lifetime(parse_duration(text, "expires_in"))

    assert raised.value.field == "expires_in"


@given(st.integers(1, 36_500), st.sampled_from([("s", 1), ("m", 60), ("h", 3600),
                                                ("d", 86400)]))
def test_every_lifetime_up_to_a_century_reads_back(count: int, unit: tuple[str, int]) -> None:
    seconds = check_lifetime(parse_duration(f"{count}{unit[0]}", "expires_in"))

    assert seconds == count * unit[1]
    _, row = new_token(name="cron", scopes=["viewer"], now=1e9, expires_in_s=seconds)
    assert row.expires_at == 1e9 + seconds


@pytest.mark.parametrize("header", [
    "Bearer", "Basic dXNlcjpwYXNz", "Bearer not-a-token",
    "Bearer tid_000000000000_" + "x" * 43,  # well formed, unknown id
])
async def test_malformed_or_unknown_credentials_are_refused(api: Api, header: str) -> None:
    response = await api.client.get("/v1/status", headers={"Authorization": header})

    assert response.status_code == 401
    assert response.json()["field"] == "header.Authorization"


async def test_a_token_with_a_wrong_secret_is_refused(api: Api) -> None:
    token_id = api.tokens["viewer"].split("_")[1]
    forged = f"tid_{token_id}_" + "A" * 43

    response = await api.client.get("/v1/status", headers={"Authorization": f"Bearer {forged}"})

    assert response.status_code == 401
    assert response.json()["message"] == "token is not valid"


async def test_the_operator_scope_includes_viewing(api: Api) -> None:
    response = await api.client.get("/v1/status", headers=api.auth("operator"))

    assert response.status_code == 200


def test_a_new_token_is_shown_once_and_stored_hashed() -> None:
    text, row = new_token(name=" on-call ", scopes=["operator,viewer", "publish"], now=5.0)

    parts = split_token(text)
    assert parts is not None
    token_id, secret = parts
    assert row.id == token_id and row.name == "on-call"
    assert row.scopes == ("operator", "publish", "viewer")
    assert row.secret_hash == hash_secret(secret) and secret not in row.secret_hash
    assert text not in repr(row)


def test_scope_names_are_checked_and_errors_name_the_field() -> None:
    with pytest.raises(InvalidInput, match="scope: unknown scope 'admin'"):
        parse_scopes(["viewer", "admin"])
    with pytest.raises(InvalidInput, match="scope: name at least one scope"):
        parse_scopes([" , "])
    with pytest.raises(InvalidInput, match="name: must not be empty"):
        new_token(name=" ", scopes=["viewer"], now=0.0)


def test_trigger_secrets_are_read_comma_separated() -> None:
    assert secrets_from(" a , b,, ") == (b"a", b"b")
    assert secrets_from(None) == () and secrets_from("") == ()
