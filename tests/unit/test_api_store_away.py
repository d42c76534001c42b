"""The store away (a restart, a full disk, no free connection) is a 503 with Retry-After
in the API's error shape, naming the store and never the server's words: the caller
retries. (That a failed write keeps nothing half-written is the stores' own tests'.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apikit import Api, dumps, open_api, publish_body, publish_headers

from tidings.core.errors import StoreError


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path) as opened:
        yield opened


def away(*args: Any, **kwargs: Any) -> Any:
    raise StoreError("postgresql://db: could not extend file: No space left on device")


async def test_a_read_while_the_store_is_away_is_a_503_to_retry(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api.runtime.store, "intent_summary", away)
    answer = await api.client.get("/v1/status", headers=api.auth("viewer"))
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "5"
    body = answer.json()
    assert (body["field"], body["message"]) == ("store", "temporarily unavailable; retry later")
    assert "No space left" not in answer.text and "postgresql://" not in answer.text


async def test_a_publish_while_the_store_is_away_is_a_503_to_retry(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    before = await api.runtime.store.intent_counts()
    # the publish's one write (its idempotency record, its intents and their messages)
    monkeypatch.setattr(api.runtime.store, "api_publish_many", away)
    answer = await api.client.post("/v1/queue/publish", content=dumps(publish_body()),
                                   headers=publish_headers(api, "k-away"))
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "5"
    assert answer.json()["field"] == "store"
    monkeypatch.undo()
    # and the same publish, sent again once the store is back, is admitted
    again = await api.client.post("/v1/queue/publish", content=dumps(publish_body()),
                                  headers=publish_headers(api, "k-away"))
    assert again.status_code == 202, again.text
    after = await api.runtime.store.intent_counts()
    assert sum(sum(c.values()) for c in after.values()) == sum(
        sum(c.values()) for c in before.values()) + 2
