"""The shop's own tests, with tidings.testing: the order's notification is written in
the view's transaction.atomic() and, in eager mode, delivered to an in-memory outbox at
its commit; a refused order notifies nothing."""

from __future__ import annotations

import itertools
import json
import time

import tidings
from tidings.testing import Outbox, assert_not_notified, assert_notified

_ids = itertools.count(time.time_ns() % 10**9)  # order ids a second run does not reuse


def post_order(order_id: int, quantity: int) -> int:
    from django.test import Client

    body = json.dumps({"id": order_id, "customer_id": "73", "email": "ada@example.com",
                       "lines": [{"sku": "tea", "quantity": 1},
                                 {"sku": "cake", "quantity": quantity}]})
    answer = Client().post("/orders", body, content_type="application/json")
    return answer.status_code


def test_an_order_is_notified_and_delivered_at_its_commit(
        tidings_client: tidings.Client, tidings_eager: Outbox) -> None:
    n = next(_ids)
    assert post_order(n, 2) == 201
    assert tidings_eager.keys() == [f"order-{n}:email"]  # sent when the atomic block committed
    assert_notified(tidings_client, key=f"order-{n}", channel="email", recipient="73",
                    template="order-confirmed", data={"order": n, "lines": 2},
                    state="accepted")


def test_a_refused_order_notifies_nothing(tidings_client: tidings.Client,
                                          tidings_eager: Outbox) -> None:
    n = next(_ids)
    assert post_order(n, 0) == 409  # a line of 0 breaks the CHECK: all of it rolls back
    assert_not_notified(tidings_client, key=f"order-{n}")
    assert tidings_eager.sent == []
