"""The shop's own tests, with tidings.testing: the order's notification is written in
the view's transaction.atomic() and, in eager mode, delivered to an in-memory outbox at
its commit; a refused order notifies nothing; async views notify too."""

from __future__ import annotations

import itertools
import json
import time

from asgiref.sync import sync_to_async

import tidings
from tidings.testing import Outbox, assert_not_notified, assert_notified, notifications

_ids = itertools.count(time.time_ns() % 10**9)  # order ids a second run does not reuse


def order_body(order_id: int, quantity: int) -> str:
    return json.dumps({"id": order_id, "customer_id": "73", "email": "ada@example.com",
                       "lines": [{"sku": "tea", "quantity": 1},
                                 {"sku": "cake", "quantity": quantity}]})


def post_order(order_id: int, quantity: int) -> int:
    from django.test import Client

    answer = Client().post("/orders", order_body(order_id, quantity),
                           content_type="application/json")
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


async def test_an_async_view_notifies_with_its_rows_and_alone(
        tidings_client: tidings.Client, tidings_eager: Outbox) -> None:
    from django.test import AsyncClient

    n = next(_ids)
    http = AsyncClient()
    placed = await http.post("/async/orders", order_body(n, 2),
                             content_type="application/json")
    assert placed.status_code == 201, placed.content
    refused = await http.post("/async/orders", order_body(n + 1, 0),
                              content_type="application/json")
    assert refused.status_code == 409
    shipped = await http.post(f"/async/orders/{n}/shipped")
    assert shipped.status_code == 201, shipped.content
    assert tidings_eager.keys() == [f"order-{n}:email", f"shipped-{n}:email"]
    found = await sync_to_async(notifications)(tidings_client)
    assert_notified(found, key=f"shipped-{n}", template="order-shipped", state="accepted")
    assert_not_notified(found, key=f"order-{n + 1}")


def test_the_admin_shows_intents_and_their_timelines_read_only(
        tidings_client: tidings.Client, tidings_eager: Outbox) -> None:
    from django.contrib.admin.utils import quote
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    n = next(_ids)
    assert post_order(n, 2) == 201
    staff = User.objects.create_superuser(f"ops-{n}", f"ops-{n}@example.com", "pw")
    http = Client()
    http.force_login(staff)
    listed = http.get(reverse("admin:tidings_intent_changelist"), {"q": f"order-{n}"})
    assert listed.status_code == 200 and f"order-{n}:email" in listed.text
    page = http.get(reverse("admin:tidings_intent_change", args=[quote(f"order-{n}:email")]))
    assert page.status_code == 200
    timeline = page.text.split("<th>detail</th></tr>", 1)[1]
    assert [t for t in ("enqueued", "claimed", "accepted") if t in timeline] == [
        "enqueued", "claimed", "accepted"]
    assert "ada@example.com" not in page.text  # the address is not shown
    assert http.get(reverse("admin:tidings_intent_add")).status_code == 403
    deleted = http.post(reverse("admin:tidings_intent_delete",
                                args=[quote(f"order-{n}:email")]), {"post": "yes"})
    assert deleted.status_code == 403
    assert_notified(tidings_client, key=f"order-{n}", state="accepted")  # still there
