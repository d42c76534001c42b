"""``POST /orders``: the order, its notification and its lines in one
``transaction.atomic()``; a line with quantity 0 breaks the CHECK and none of it stays."""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

import tidings.contrib.django
from orders.models import Order, OrderLine


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    try:
        with transaction.atomic():
            order = Order.objects.create(id=body["id"], customer_id=body["customer_id"],
                                         email=body["email"])
            keys = tidings.contrib.django.notify(
                key=f"order-{order.id}", recipient={"id": order.customer_id,
                                                    "email": order.email},
                channels=["email"], template="order-confirmed",
                data={"order": order.id, "lines": len(body["lines"])})
            OrderLine.objects.bulk_create(
                OrderLine(order=order, sku=line["sku"], quantity=line["quantity"])
                for line in body["lines"])
    except IntegrityError as exc:
        return JsonResponse({"error": f"order {body['id']} refused: {exc}"}, status=409)
    return JsonResponse({"order": order.id, "notified": keys}, status=201)


def _place(body: dict) -> list[str]:  # type: ignore[type-arg]
    """The order, its notification and its lines in one transaction (sync: Django runs
    transactions in its sync code)."""
    with transaction.atomic():
        order = Order.objects.create(id=body["id"], customer_id=body["customer_id"],
                                     email=body["email"])
        keys = tidings.contrib.django.notify(
            key=f"order-{order.id}", recipient={"id": order.customer_id, "email": order.email},
            channels=["email"], template="order-confirmed",
            data={"order": order.id, "lines": len(body["lines"])})
        OrderLine.objects.bulk_create(
            OrderLine(order=order, sku=line["sku"], quantity=line["quantity"])
            for line in body["lines"])
    return list(keys)


async def place_order_async(request: HttpRequest) -> JsonResponse:
    """``POST /async/orders``: the same from an async view, its transaction awaited whole
    through ``sync_to_async``."""
    body = json.loads(request.body)
    try:
        keys = await sync_to_async(_place)(body)
    except IntegrityError as exc:
        return JsonResponse({"error": f"order {body['id']} refused: {exc}"}, status=409)
    return JsonResponse({"order": body["id"], "notified": keys}, status=201)


async def order_shipped(request: HttpRequest, order_id: int) -> JsonResponse:
    """``POST /async/orders/<id>/shipped``: a notification alone, from an async view
    (``anotify``: in a transaction of its own)."""
    order = await Order.objects.aget(id=order_id)
    keys = await tidings.contrib.django.anotify(
        key=f"shipped-{order.id}", recipient={"id": order.customer_id, "email": order.email},
        channels=["email"], template="order-shipped", data={"order": order.id})
    return JsonResponse({"order": order.id, "notified": keys}, status=201)
