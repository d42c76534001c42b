"""The shop's routes: an order placed from a sync view or an async one, an async view
that notifies alone, and the admin."""

from django.contrib import admin
from django.urls import path
from orders.views import order_shipped, place_order, place_order_async

urlpatterns = [
    path("admin/", admin.site.urls),  # tidings' intents and timelines, read-only
    path("orders", place_order),
    path("async/orders", place_order_async),
    path("async/orders/<int:order_id>/shipped", order_shipped),
]
