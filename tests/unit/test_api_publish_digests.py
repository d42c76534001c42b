"""``POST /v1/queue/publish`` to a digest queue (``[api.queues.<name>.digest]``): each
message is an item of its customer's digest window, a repeat is the same item, the
Idempotency-Key replays the answer (and names the item: a retry whose answer was lost
is the same item), the window becomes one intent when it closes, and
bad settings or payloads are refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from apikit import dumps, open_api, publish_body, publish_headers

from tidings.config.settings import Settings
from tidings.core.digest import digest_intent_key
from tidings.core.errors import ConfigurationError

QUEUES = {"queues": {"comments": {"channel": "email", "digest": {
    "key": "comments:{customer_id}", "window_s": 300, "max_items": 3}}}}


def comment(n: int, customer: str = "cust_0001") -> dict[str, Any]:
    return publish_body(customer, queue="comments", template="comment-v1",
                        email=f"{customer}@example.com", text=f"comment {n}")


async def test_messages_become_items_of_one_digest_per_customer(tmp_path: Path) -> None:
    async with open_api(tmp_path, api=QUEUES) as api:
        answers = []
        for n in (1, 2):
            response = await api.client.post("/v1/queue/publish", content=dumps(comment(n)),
                                             headers=publish_headers(api, f"k{n}"))
            assert response.status_code == 202, response.text
            answers.append(response.json())
        other = await api.client.post("/v1/queue/publish",
                                      content=dumps(comment(1, "cust_0002")),
                                      headers=publish_headers(api, "k3"))

        first, second = (a["digests"][0] for a in answers)
        assert answers[0]["keys"] == [] and answers[0]["new"] == 0
        assert first["digest_key"] == "comments:cust_0001" and first["created"]
        assert second["window_id"] == first["window_id"] and second["items"] == 2
        assert other.json()["digests"][0]["window_id"] != first["window_id"]
        assert await api.intents() == 0  # nothing sent until the window closes

        # the same request again: the stored answer, nothing added
        replay = await api.client.post("/v1/queue/publish", content=dumps(comment(1)),
                                       headers=publish_headers(api, "k1"))
        assert replay.json() == answers[0]
        assert replay.headers.get("Idempotent-Replayed") == "true"
        assert (await api.runtime.store.digest_pending()).items == 3

        api.clock.advance(300)
        closed = await api.runtime.close_digests()
        assert (closed.windows, closed.admitted) == (2, 2)
        intent = await api.runtime.store.intent_get(
            digest_intent_key(first["window_id"], "email"))
        assert intent is not None
        data = json.loads(intent.data)
        assert data["count"] == 2 and data["digest_key"] == "comments:cust_0001"
        assert [item["text"] for item in data["items"]] == ["comment 1", "comment 2"]


async def test_the_item_cap_admits_the_digest_at_once(tmp_path: Path) -> None:
    async with open_api(tmp_path, api=QUEUES) as api:
        for n in (1, 2, 3):
            response = await api.client.post("/v1/queue/publish", content=dumps(comment(n)),
                                             headers=publish_headers(api, f"k{n}"))
            assert response.status_code == 202, response.text
        assert await api.intents() == 1
        assert (await api.runtime.store.digest_pending()).windows == 0


@pytest.mark.parametrize(("digest", "field", "says"), [
    ({"window_s": 60, "key": "{nope}"}, "api.queues.comments.digest.key", "names nope"),
    ({"window_s": 60, "key": "{"}, "api.queues.comments.digest.key", "not a key template"),
    ({"window_s": 0}, "api.queues.comments.digest.window_s", ""),
    ({"window_s": 60, "max_items": 0}, "api.queues.comments.digest.max_items", ""),
    ({"window_s": 60, "max_wait_s": 600}, "api.queues.comments.digest", "sliding"),
    ({}, "api.queues.comments.digest.window_s", ""),
    # the rules of notify(digest=), at load rather than at every publish
    ({"window_s": 34_560_000}, "api.queues.comments.digest.window_s", "at most a year"),
    ({"window_s": 5, "key": "a b {customer_id}"}, "api.queues.comments.digest.key",
     "without whitespace"),
    ({"window_s": 5, "key": "k" * 150 + "{customer_id}{customer_id}"},
     "api.queues.comments.digest.key", "550 characters (with a customer_id of 200)"),
    ({"window_s": 60, "sliding": True, "max_wait_s": 40_000_000},
     "api.queues.comments.digest.max_wait_s", "at most a year"),
])
def test_bad_digest_settings_are_refused_naming_the_field(
        tmp_path: Path, digest: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Settings.parse({"store": f"sqlite:///{tmp_path / 's.db'}",
                        "channels": {"email": {"kind": "email"}},
                        "api": {"queues": {"comments": {"channel": "email",
                                                        "digest": digest}}}})
    assert refused.value.field == field
    assert says in str(refused.value)


def test_a_settings_file_with_a_digest_no_publish_could_use_is_refused_at_load(
        tmp_path: Path) -> None:
    config = tmp_path / "tidings.toml"
    config.write_text(f'''
store = "sqlite:///{tmp_path / 's.db'}"
[channels.email]
kind = "email"
[api.queues.q]
channel = "email"
digest = {{ window_s = 34560000 }}
''')
    with pytest.raises(ConfigurationError) as refused:
        Settings.load(config)
    assert refused.value.field == "api.queues.q.digest.window_s"
    assert str(refused.value).count("digest") == 1


def test_a_campaign_queue_takes_no_digest(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="channel queues only"):
        Settings.parse({"store": f"sqlite:///{tmp_path / 's.db'}",
                        "channels": {"email": {"kind": "email"}},
                        "api": {"queues": {"q": {"campaign": "weekly", "digest": {
                            "window_s": 60}}}}})
