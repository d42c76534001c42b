"""Recipient preferences over HTTP and through the runtime, judged by what a worker then
does: an opted-out recipient's intent is cancelled (opted_out) with no provider call;
one in quiet hours is deferred to their end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from apikit import T0, Api, open_api

from tidings.core.states import State


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path, members=3) as opened:
        yield opened


async def test_put_get_delete_a_preference(api: Api) -> None:
    put = await api.client.put("/v1/preferences/cust_0001/email", headers=api.auth("publish"),
                               json={"quiet_start": "22:00", "quiet_end": "07:00",
                                     "timezone": "Europe/London"})
    listed = await api.client.get("/v1/preferences/cust_0001", headers=api.auth("viewer"))
    deleted = await api.client.delete("/v1/preferences/cust_0001/email",
                                      headers=api.auth("publish"))
    again = await api.client.delete("/v1/preferences/cust_0001/email",
                                    headers=api.auth("publish"))

    assert put.status_code == 200 and put.json()["quiet_end"] == "07:00"
    assert [p["channel"] for p in listed.json()["preferences"]] == ["email"]
    assert (deleted.json()["deleted"], again.json()["deleted"]) == (True, False)
    assert await api.runtime.preferences("cust_0001") == []


@pytest.mark.parametrize(("path", "body", "status", "field"), [
    ("/v1/preferences/c/fax", {}, 404, "path.channel"),
    ("/v1/preferences/c/email", {"timezone": "Mars/Olympus"}, 422, "body.timezone"),
    ("/v1/preferences/c/email", {"quiet_start": "22:00"}, 422, "body.quiet_end"),
    ("/v1/preferences/c/email", {"quiet_start": "25:00", "quiet_end": "07:00"}, 422,
     "body.quiet_start"),
    ("/v1/preferences/c/email", {"opted_out": "maybe"}, 422, "body.opted_out"),
])
async def test_bad_preferences_name_their_field_and_store_nothing(
        api: Api, path: str, body: dict[str, object], status: int, field: str) -> None:
    response = await api.client.put(path, headers=api.auth("publish"), json=body)

    assert (response.status_code, response.json()["field"]) == (status, field)
    assert await api.runtime.preferences("c") == []


async def test_a_viewer_cannot_write_preferences(api: Api) -> None:
    response = await api.client.put("/v1/preferences/c/email", headers=api.auth("viewer"),
                                    json={"opted_out": True})
    assert response.status_code == 403
    assert await api.runtime.preferences("c") == []


async def test_the_worker_honours_opt_out_and_quiet_hours(api: Api) -> None:
    rt = api.runtime
    await rt.set_preference("out", "email", opted_out=True)
    # T0 is 09:00 UTC: a window of 08:00-10:00 UTC is on now and ends at 10:00.
    await rt.set_preference("night", "email", quiet_start="08:00", quiet_end="10:00")
    keys = {}
    for who in ("out", "night", "free"):
        [keys[who]] = await rt.notify(key=f"k-{who}", recipient={"id": who,
                                      "email": f"{who}@example.com"},
                                      channels=["email"], template="t/v1")

    worker = rt.worker("email")
    while await worker.run_once():
        pass

    out, night, free = [await rt.store.intent_get(keys[w]) for w in ("out", "night", "free")]
    assert out is not None and (out.state, out.reason) == (State.CANCELLED, "opted_out")
    assert out.attempts == 1 and worker.stats.sent == 1  # only "free" reached the provider
    assert night is not None and night.state == State.RETRYABLE
    assert night.next_attempt_at == pytest.approx(T0 - 5 + 3600)  # 10:00 UTC
    assert free is not None and free.state == State.ACCEPTED
    assert "deferred" in [e.type for e in await rt.store.events_for(keys["night"])]
