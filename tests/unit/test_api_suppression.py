"""``/v1/suppressions`` as a caller with the wrong token, a typo or a hostile body meets
it, on both stores: every route an operator's alone (a viewer's token 403, none 401);
an address in any spelling is one entry; pages walk the list once and the last says
so; a removal is on the address's history (who, when, why); a bad body or query is a
422 naming the field, never a 500 (fuzzed); a CSV import is all or nothing with the
bad line and column named, and an export imports again to the same list; ``/metrics``
counts the list and the sends it stopped."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from apikit import T0, TWIN, Api, open_api
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.core.states import State

CHANNELS = {"email": {"kind": "email", **TWIN}, "sms": {"kind": "sms", **TWIN}}


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'api.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def api(tmp_path: Path, store_url: str) -> AsyncIterator[Api]:
    async with open_api(tmp_path, store=store_url, channels=CHANNELS) as opened:
        yield opened


def operator_by(api: Api) -> str:
    """Who the operator's token is on the audit trail: its name and id."""
    token_id = api.tokens["operator"].split("_")[1]
    return f"token operator token ({token_id})"


def refused(response: httpx.Response, status: int, field: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["field"] == field, response.text


async def add(api: Api, address: str, kind: str = "email", **extra: Any) -> httpx.Response:
    return await api.client.post("/v1/suppressions", json={
        "address": address, "kind": kind, **extra}, headers=api.auth("operator"))


async def listed(api: Api, **params: Any) -> list[tuple[str, str, str]]:
    answer = await api.client.get("/v1/suppressions", params=params,
                                  headers=api.auth("operator"))
    assert answer.status_code == 200, answer.text
    return [(r["address"], r["kind"], r["reason"]) for r in answer.json()["suppressions"]]


async def import_csv(api: Api, text: str | bytes) -> httpx.Response:
    return await api.client.post("/v1/suppressions/import", content=text, headers={
        **api.auth("operator"), "Content-Type": "text/csv"})


async def export_csv(api: Api, **params: Any) -> str:
    answer = await api.client.get("/v1/suppressions/export", params=params,
                                  headers=api.auth("operator"))
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/csv")
    return answer.text


# ---------------------------------------------------------------- scopes

ROUTES = [
    ("GET", "/v1/suppressions", None, None),
    ("POST", "/v1/suppressions", {"address": "ann@example.com", "kind": "email"}, None),
    ("POST", "/v1/suppressions/remove", {"address": "ann@example.com", "kind": "email"}, None),
    ("POST", "/v1/suppressions/import", None, "address,kind\nbob@example.com,email\n"),
    ("GET", "/v1/suppressions/export", None, None),
    ("GET", "/v1/suppressions/history?kind=email&address=ann@example.com", None, None),
]


@pytest.mark.parametrize(("method", "path", "body", "text"), ROUTES,
                         ids=[f"{m} {p.split('?')[0]}" for m, p, _, _ in ROUTES])
async def test_every_route_is_an_operators_alone(api: Api, method: str, path: str,
                                                 body: Any, text: str | None) -> None:
    def call(headers: dict[str, str]) -> Any:
        if text is not None:
            headers = {**headers, "Content-Type": "text/csv"}
        return api.client.request(method, path, json=body, content=text, headers=headers)

    for scope in ("viewer", "publish", "trigger"):
        denied = await call(api.auth(scope))
        assert denied.status_code == 403, (scope, denied.text)
    assert (await call({})).status_code == 401
    assert await listed(api) == []  # nothing a refused caller sent was stored

    allowed = await call(api.auth("operator"))
    assert allowed.status_code == 200, allowed.text


# ---------------------------------------------------------------- one entry per address


async def test_an_address_in_any_spelling_is_one_entry(api: Api) -> None:
    first = await add(api, "Foo@Example.COM ")
    again = await add(api, "foo@example.com", reason="hard_bounce")
    phone = await add(api, "+1 (555) 000-1234", "sms")
    same_phone = await add(api, "0015550001234", "sms")

    assert first.json() == {"address": "foo@example.com", "kind": "email", "added": True,
                            "by": operator_by(api)}
    assert again.json()["added"] is False
    assert (phone.json()["address"], phone.json()["added"]) == ("+15550001234", True)
    assert same_phone.json()["added"] is False
    # The first entry stands: a later add does not change its reason.
    assert await listed(api) == [("+15550001234", "sms", "manual"),
                                 ("foo@example.com", "email", "manual")]
    refused(await add(api, "555-0001234", "sms"), 422, "body.address")


async def test_the_same_address_on_another_kind_is_another_entry(api: Api) -> None:
    await add(api, "ann@example.com")
    refused(await add(api, "ann@example.com", "sms"), 422, "body.address")
    refused(await add(api, "ann@example.com", "push"), 422, "body.kind")
    assert await listed(api, kind="email") == [("ann@example.com", "email", "manual")]
    assert await listed(api, kind="sms") == []


# ---------------------------------------------------------------- pages


@pytest.mark.parametrize("members", [7, 6])
async def test_pages_walk_the_list_once_and_the_last_says_so(api: Api, members: int) -> None:
    for i in range(members):
        await add(api, f"p{i}@example.com", reason="complaint" if i % 2 else "manual")

    seen: list[str] = []
    params: dict[str, Any] = {"limit": 3}
    pages = 0
    while True:
        answer = (await api.client.get("/v1/suppressions", params=params,
                                       headers=api.auth("operator"))).json()
        pages += 1
        seen += [r["address"] for r in answer["suppressions"]]
        if answer["next"] is None:
            break
        params = {"limit": 3, **answer["next"]}

    assert seen == [f"p{i}@example.com" for i in range(members)]
    assert pages == -(-members // 3)  # no empty page after a full last one
    assert [a for a, _, _ in await listed(api, reason="complaint")] == [
        f"p{i}@example.com" for i in range(1, members, 2)]


# ---------------------------------------------------------------- removal, audited


async def test_a_removal_is_on_the_addresses_history_who_when_and_why(api: Api) -> None:
    who = operator_by(api)
    await add(api, "Ann@Example.com", note="asked by phone")
    api.clock.advance(60)
    gone = await api.client.post("/v1/suppressions/remove", json={
        "address": "ANN@example.com ", "kind": "email", "note": "ticket 4411"},
        headers=api.auth("operator"))
    api.clock.advance(60)
    nothing = await api.client.post("/v1/suppressions/remove", json={
        "address": "ann@example.com", "kind": "email"}, headers=api.auth("operator"))
    history = await api.client.get("/v1/suppressions/history", params={
        "kind": "email", "address": "ann@EXAMPLE.com"}, headers=api.auth("operator"))

    assert gone.status_code == 200, gone.text
    assert gone.json()["removed"]["address"] == "ann@example.com"
    assert gone.json()["removed"]["detail"] == "asked by phone"
    assert nothing.json() == {"removed": None, "by": who}
    assert await listed(api) == []
    found = history.json()
    assert (found["address"], found["entry"]) == ("ann@example.com", None)
    assert [(e["type"], e["at"], e["by"]) for e in found["events"]] == [
        ("suppression_added", T0, who),
        ("suppression_removed", T0 + 60, who),
        ("suppression_removed", T0 + 120, who)]
    assert found["events"][0]["detail"] == "manual: asked by phone"
    assert found["events"][1]["detail"] == f"was manual from operator:{who}: ticket 4411"
    assert found["events"][2]["detail"] == "not suppressed"
    # The audit trail carries the address's surrogate, never the address.
    events = await api.runtime.store.events_for(
        f"suppression/email/{_surrogate('ann@example.com')}")
    assert len(events) == 3
    assert all("ann@" not in (e.detail or "") + e.key for e in events)


async def test_a_token_whose_name_no_audit_line_holds_still_acts_and_is_named(
        api: Api) -> None:
    long = await api.token("operator", name="on-call " + "x" * 300)
    folded = await api.token("operator", name="two\nlines")
    long_id, folded_id = long.split("_")[1], folded.split("_")[1]

    added = await api.client.post("/v1/suppressions", json={
        "address": "ann@example.com", "kind": "email"},
        headers={"Authorization": f"Bearer {long}"})
    imported = await api.client.post(
        "/v1/suppressions/import", content="address,kind\nbob@example.com,email\n",
        headers={"Authorization": f"Bearer {folded}", "Content-Type": "text/csv"})
    removed = await api.client.post("/v1/suppressions/remove", json={
        "address": "ann@example.com", "kind": "email"},
        headers={"Authorization": f"Bearer {folded}"})

    assert [a.status_code for a in (added, imported, removed)] == [200, 200, 200]
    by = added.json()["by"]
    assert len(by) == 200 and by.startswith("token on-call xxx")
    assert by.endswith(f"({long_id})")
    assert removed.json()["by"] == f"token two lines ({folded_id})"


def _surrogate(address: str) -> str:
    from tidings.core.surrogate import surrogate

    return surrogate(address)


async def test_the_history_of_an_address_never_suppressed_says_so(api: Api) -> None:
    answer = await api.client.get("/v1/suppressions/history", params={
        "kind": "sms", "address": "+44 20 7946 0000"}, headers=api.auth("operator"))

    assert answer.json() == {"address": "+442079460000", "kind": "sms", "entry": None,
                             "events": []}
    refused(await api.client.get("/v1/suppressions/history", params={"kind": "sms"},
                                 headers=api.auth("operator")), 422, "query.address")


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(("body", "field"), [
    ({"address": "not an address", "kind": "email"}, "body.address"),
    ({"address": "", "kind": "email"}, "body.address"),
    ({"address": "a@example.com", "kind": "fax"}, "body.kind"),
    ({"address": "a@example.com", "kind": "email", "reason": "because"}, "body.reason"),
    ({"address": "a@example.com", "kind": "email", "note": "two\nlines"}, "body.note"),
    ({"address": "a@example.com", "kind": "email", "by": "me"}, "body.by"),
    ({"kind": "email"}, "body.address"),
    ({"address": "a\u0000@example.com", "kind": "email"}, "body.address"),
])
async def test_a_bad_body_is_a_422_naming_the_field(api: Api, body: Any, field: str) -> None:
    refused(await api.client.post("/v1/suppressions", json=body,
                                  headers=api.auth("operator")), 422, field)
    assert await listed(api) == []


@pytest.mark.parametrize(("params", "field"), [
    ({"kind": "fax"}, "query.kind"),
    ({"reason": "because"}, "query.reason"),
    ({"limit": 0}, "query.limit"),
    ({"limit": 1001}, "query.limit"),
    ({"limit": "ten"}, "query.limit"),
])
async def test_a_bad_query_is_a_422_naming_the_parameter(api: Api, params: Any,
                                                         field: str) -> None:
    for path in ("/v1/suppressions", "/v1/suppressions/export"):
        if path.endswith("export") and "limit" in params:
            continue
        refused(await api.client.get(path, params=params, headers=api.auth("operator")),
                422, field)


BODY_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
    st.text(max_size=40), st.text(alphabet="+0123456789 ()-@.aéZ\u0000\u2028", max_size=20),
    st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=5),
                                                               st.integers(), max_size=2))
BODIES = st.one_of(
    st.fixed_dictionaries({"address": BODY_VALUES, "kind": st.sampled_from(
        ["email", "sms", "", "EMAIL", None, 1])}, optional={
        "reason": BODY_VALUES, "note": BODY_VALUES, "extra": BODY_VALUES}),
    BODY_VALUES)
CSV_CELLS = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)
CSV_TEXT = st.one_of(
    st.text(max_size=200),
    st.lists(st.lists(CSV_CELLS, min_size=0, max_size=5), max_size=6).map(
        lambda rows: "address,kind,reason,note\n" + "".join(
            ",".join(row) + "\n" for row in rows)),
    st.binary(max_size=100).map(lambda b: b.decode("latin-1")))


@pytest.fixture
def loop_api(tmp_path: Path, store_url: str) -> Iterator[tuple[asyncio.AbstractEventLoop, Api]]:
    """One API for every example of a fuzzed test, on a loop of the test's own."""
    loop = asyncio.new_event_loop()
    opened = open_api(tmp_path, store=store_url, channels=CHANNELS)
    api = loop.run_until_complete(opened.__aenter__())
    try:
        yield loop, api
    finally:
        loop.run_until_complete(opened.__aexit__(None, None, None))
        loop.close()


FUZZ = settings(max_examples=60, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.filter_too_much])


@FUZZ
@given(body=BODIES, route=st.sampled_from(["", "/remove"]))
def test_no_json_body_gets_a_500(loop_api: tuple[asyncio.AbstractEventLoop, Api],
                                 body: Any, route: str) -> None:
    loop, api = loop_api
    answer = loop.run_until_complete(api.client.post(
        f"/v1/suppressions{route}", content=json.dumps(body).encode(),
        headers={**api.auth("operator"), "Content-Type": "application/json"}))

    assert answer.status_code in (200, 422), answer.text
    if answer.status_code == 422:
        field = answer.json()["field"]
        assert field == "body" or field.startswith("body."), answer.text


@FUZZ
@given(text=CSV_TEXT)
def test_no_csv_body_gets_a_500(loop_api: tuple[asyncio.AbstractEventLoop, Api],
                                text: str) -> None:
    loop, api = loop_api
    before = loop.run_until_complete(api.runtime.store.suppression_list(limit=1000))
    answer = loop.run_until_complete(import_csv(api, text.encode("utf-8", "surrogatepass")))

    assert answer.status_code in (200, 422), answer.text
    if answer.status_code == 422:
        assert answer.json()["field"].startswith("body"), answer.text
        after = loop.run_until_complete(api.runtime.store.suppression_list(limit=1000))
        assert after == before  # a refused file stores nothing


@FUZZ
@given(params=st.dictionaries(st.sampled_from(["kind", "reason", "limit", "after_address",
                                               "after_kind", "address"]),
                              st.text(max_size=12), max_size=4))
def test_no_query_gets_a_500(loop_api: tuple[asyncio.AbstractEventLoop, Api],
                             params: dict[str, str]) -> None:
    loop, api = loop_api
    for path in ("", "/export", "/history"):
        answer = loop.run_until_complete(api.client.get(
            f"/v1/suppressions{path}", params=params, headers=api.auth("operator")))
        assert answer.status_code in (200, 422), (path, answer.text)


# ---------------------------------------------------------------- CSV


async def test_an_import_with_one_bad_row_stores_none_and_names_the_line_and_column(
        api: Api) -> None:
    await add(api, "kept@example.com", reason="complaint")
    text = ("address,kind,reason,note\n"
            "one@example.com,email,manual,\n"
            "+15550001111,sms,sms_stop,texted STOP\n"
            "two@example.com,email,unsubscribed,\n"  # not a reason
            "three@example.com,email,,\n")

    answer = await import_csv(api, text)

    refused(answer, 422, "body.line 4: reason")
    assert "unsubscribe" in answer.json()["message"]
    assert await listed(api) == [("kept@example.com", "email", "complaint")]

    fixed = await import_csv(api, text.replace("unsubscribed", "unsubscribe"))
    assert fixed.json() == {"rows": 4, "added": 4, "already": 0}
    assert ("+15550001111", "sms", "sms_stop") in await listed(api)


@pytest.mark.parametrize(("text", "field"), [
    ("address,kind\nbad address,email\n", "body.line 2: address"),
    ("address,kind\n+1555,sms\n", "body.line 2: address"),
    ("address,kind\na@example.com,\n", "body.line 2: kind"),
    ("address,kind\na@example.com,email,extra\n", "body.line 2"),
    ("address,kind,note\na@example.com,email,\"two\nlines\"\n", "body.line 3: note"),
    ("email,kind\na@example.com,email\n", "body.csv"),
    ("address,kind,colour\na@example.com,email,red\n", "body.csv"),
    ("address,kind,address\na@example.com,email,b@example.com\n", "body.csv"),
    ("", "body.csv"),
])
async def test_each_bad_file_is_refused_naming_where(api: Api, text: str, field: str) -> None:
    answer = await import_csv(api, text)

    refused(answer, 422, field)
    assert await listed(api) == []


def test_a_field_past_what_the_csv_reader_takes_names_its_line() -> None:
    from tidings.core.errors import InvalidInput
    from tidings.operate.suppression import read_csv

    with pytest.raises(InvalidInput) as refusal:
        read_csv("address,kind\nok@example.com,email\n\"" + "a" * 200_000 + "\",email\n")

    assert refusal.value.field == "line 3"
    assert "field larger than field limit" in refusal.value.message


async def test_a_file_that_is_not_utf8_is_refused(api: Api) -> None:
    refused(await import_csv(api, "address,kind\nj\xf6rg@example.com,email\n".encode("latin-1")),
            422, "body")


async def test_spreadsheet_habits_are_read(api: Api) -> None:
    text = ("\ufeffAddress , KIND\r\n"
            "Foo@Example.COM ,email\r\n"
            "foo@example.com,email\r\n"
            "\r\n"
            "+44 (20) 7946-0000,sms\r\n")

    answer = await import_csv(api, text.encode("utf-8"))

    assert answer.json() == {"rows": 3, "added": 2, "already": 1}, answer.text
    assert await listed(api) == [("+442079460000", "sms", "manual"),
                                 ("foo@example.com", "email", "manual")]


async def test_an_export_imports_again_to_the_same_list(tmp_path: Path, api: Api) -> None:
    await add(api, "ann@example.com", reason="hard_bounce", note='said "no", twice')
    await add(api, "+15550002222", "sms", reason="sms_stop")
    await add(api, "bob@example.com", reason="unsubscribe")
    # What a provider's report leaves: words over lines and longer than a note.
    from tidings.core.suppression import Reason, Suppression

    await api.runtime.store.suppression_add_many([Suppression(
        address="carl@example.com", kind="email", reason=Reason.COMPLAINT,
        source="webhook:sendgrid:m1", created_at=T0, key="order-1:c:email",
        detail="spam report:\n" + "x" * 600)], now=T0)
    exported = await export_csv(api)

    rows = list(csv.DictReader(io.StringIO(exported)))
    assert [r["address"] for r in rows] == ["+15550002222", "ann@example.com",
                                            "bob@example.com", "carl@example.com"]
    assert rows[0]["created_at"] == "2026-08-14T09:00:05+00:00"
    assert rows[3]["key"] == "order-1:c:email"
    assert await export_csv(api, kind="sms") == (
        "address,kind,reason,source,created_at,key,detail\n"
        f"+15550002222,sms,sms_stop,operator:{operator_by(api)},2026-08-14T09:00:05+00:00,,\n")

    async with open_api(tmp_path, store=f"sqlite:///{tmp_path / 'other.db'}",
                        channels=CHANNELS) as other:
        answer = await import_csv(other, exported)
        assert answer.json() == {"rows": 4, "added": 4, "already": 0}, answer.text
        again = list(csv.DictReader(io.StringIO(await export_csv(other))))
    same = ("address", "kind", "reason")
    assert [tuple(r[c] for c in same) for r in again] == [tuple(r[c] for c in same)
                                                          for r in rows]
    assert again[1]["detail"] == 'said "no", twice'
    assert again[3]["detail"] == ("spam report: " + "x" * 600)[:500]
    # Into the list it came from, it changes nothing.
    assert (await import_csv(api, exported)).json() == {"rows": 4, "added": 0, "already": 4}


# ---------------------------------------------------------------- metrics


async def test_metrics_count_the_list_and_the_sends_it_stopped(api: Api) -> None:
    await add(api, "held@example.com")
    await add(api, "+15550003333", "sms", reason="sms_stop")
    rt = api.runtime
    for n, (email, phone) in enumerate([("held@example.com", "+15550003333"),
                                        ("HELD@example.com", "+15550004444"),
                                        ("fine@example.com", None)]):
        recipient = {"id": f"c{n}", "email": email, **({"phone": phone} if phone else {})}
        await rt.notify(key=f"order-{n}:c{n}", recipient=recipient,
                        channels=["email", "sms"] if phone else ["email"], template="t")
    for channel in ("email", "sms"):
        worker = rt.worker(channel, "w1")
        while await worker.run_once():
            pass
    api.clock.advance(60)  # past the metrics' cache

    text = (await api.client.get("/metrics", headers=api.auth("viewer"))).text

    for line in ('tidings_suppressed_sends_total{channel="email",reason="manual"} 2.0',
                 'tidings_suppressed_sends_total{channel="sms",reason="sms_stop"} 1.0',
                 'tidings_suppressions{kind="email",reason="manual"} 1.0',
                 'tidings_suppressions{kind="sms",reason="sms_stop"} 1.0'):
        assert line in text, line
    intent = await rt.store.intent_get("order-1:c1:sms")
    assert intent is not None and intent.state is State.ACCEPTED
