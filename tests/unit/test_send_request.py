"""What a provider receives: ``SendRequest.data`` a read-only mapping, ``data_json`` its
JSON text as the intent stores it."""

from __future__ import annotations

import dataclasses
import json
import pickle
from collections.abc import Mapping

import pytest

from tidings.core.model import Intent, SendData, SendRequest
from tidings.core.states import State
from tidings.delivery.compose import Composer, Ready
from tidings.providers import SendRequest as PublicSendRequest
from tidings.testing import FakeClock

STORED = '{"items":[1,2],"name":"Ada"}'


def request(**data: object) -> SendRequest:
    return SendRequest(key="k:email", channel="email", to="ada@example.com", template="t/v1",
                       recipient_id="c1", **data)  # type: ignore[arg-type]


def test_data_is_a_read_only_mapping_and_data_json_the_text_as_stored() -> None:
    sent = request(data_json=STORED)

    assert isinstance(sent.data, Mapping)
    assert dict(sent.data) == {"items": [1, 2], "name": "Ada"}
    assert sent.data["name"] == "Ada" and "items" in sent.data and len(sent.data) == 2
    assert sent.data_json == STORED  # forwarded as it is, never re-encoded
    with pytest.raises(TypeError):
        sent.data["name"] = "Grace"  # type: ignore[index]
    assert PublicSendRequest is SendRequest


def test_a_mapping_given_is_copied_and_its_json_is_the_compact_sorted_encoding() -> None:
    given = {"name": "Ada", "items": [1, 2]}
    sent = request(data=given)
    given["name"] = "Grace"

    assert sent.data["name"] == "Ada"
    assert sent.data_json == STORED
    assert request().data == {} and request().data_json == "{}"


def test_json_text_as_data_still_works_for_a_release_with_a_deprecation_warning() -> None:
    with pytest.deprecated_call(match="data_json"):
        sent = request(data=STORED)

    assert sent.data == {"items": [1, 2], "name": "Ada"} and sent.data_json == STORED
    with pytest.raises(TypeError, match="not both"):
        request(data={"a": 1}, data_json="{}")


def test_a_request_compares_copies_hashes_and_pickles_by_its_values() -> None:
    sent = request(data_json=STORED)

    assert sent == request(data={"name": "Ada", "items": [1, 2]})
    assert hash(sent) == hash(request(data_json=STORED))
    moved = dataclasses.replace(sent, to="grace@example.com")
    assert moved.to == "grace@example.com" and moved.data_json == STORED
    again = pickle.loads(pickle.dumps(sent))
    assert again == sent and again.data_json == STORED


def test_text_that_is_no_json_object_refuses_when_looked_at() -> None:
    sent = request(data_json="[1, 2]")

    assert sent.data_json == "[1, 2]"
    with pytest.raises(ValueError, match="not a JSON object"):
        dict(sent.data)
    with pytest.raises(ValueError, match="not JSON"):
        SendData(text="{").get("a")


def test_the_worker_hands_a_provider_the_mapping_of_the_intents_data() -> None:
    composer = Composer(store=None, kinds={"email": "email"}, clock=FakeClock())  # type: ignore[arg-type]
    intent = Intent(key="k:email", channel="email", recipient_id="c1", address="ada@example.com",
                    template="t/v1", data=STORED, campaign=None, occurrence=None,
                    state=State.CLAIMED, due_at=0.0, expires_at=None, created_at=0.0,
                    updated_at=0.0, selected_at=0.0, enqueued_at=0.0, accepted_at=None,
                    finished_at=None, attempts=1, failures=0, lease_owner="w", lease_token=1,
                    lease_expires_at=None, next_attempt_at=None, receipt=None,
                    provider_request_id=None, disposition=None, reason=None,
                    cancel_requested=False)

    ready = composer.compose_one(intent, None, now=0.0)

    assert isinstance(ready, Ready)
    assert json.loads(ready.request.data_json) == dict(ready.request.data)
    assert ready.request.data["items"] == [1, 2]
