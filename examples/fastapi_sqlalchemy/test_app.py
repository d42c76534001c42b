"""The shop's own tests, with tidings.testing: what an order notified, asserted with no
worker, and its mail delivered to an in-memory outbox (no provider, no sandbox)."""

from __future__ import annotations

import itertools
import time

import tidings
from conftest import TestClient
from tidings.testing import Outbox, assert_not_notified, assert_notified, deliver

_ids = itertools.count(time.time_ns() % 10**9)  # order ids a second run does not reuse


def order(order_id: int, quantity: int) -> dict[str, object]:
    return {"id": order_id, "customer_id": "73", "email": "ada@example.com",
            "lines": [{"sku": "tea", "quantity": 1}, {"sku": "cake", "quantity": quantity}]}


def test_a_placed_order_is_notified_and_delivered_once(
        http: TestClient, tidings_client: tidings.Client, tidings_outbox: Outbox) -> None:
    n = next(_ids)
    placed = http.post("/orders", json=order(n, 2))
    assert placed.status_code == 201, placed.text

    assert_notified(tidings_client, key=f"order-{n}", channel="email", recipient="73",
                    template="order-confirmed", data={"order": n, "lines": 2})
    # The notify joined the session's transaction: sent once that has committed.
    [sent] = deliver(tidings_client)
    assert (sent.key, sent.to) == (f"order-{n}:email", "ada@example.com")
    assert deliver(tidings_client) == []


def test_a_refused_order_notifies_nothing(http: TestClient,
                                          tidings_client: tidings.Client) -> None:
    n = next(_ids)
    refused = http.post("/orders", json=order(n, 0))  # a line of 0 breaks the CHECK
    assert refused.status_code == 409
    assert_not_notified(tidings_client, key=f"order-{n}")
