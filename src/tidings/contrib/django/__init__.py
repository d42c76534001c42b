"""tidings in a Django project: ``notify`` inside ``transaction.atomic()`` on Django's own
database connection, one ``Client`` per process built lazily from ``settings.TIDINGS``,
and the ``tidings_worker``, ``tidings_scheduler`` and ``tidings_reconcile`` management
commands (add ``"tidings.contrib.django"`` to ``INSTALLED_APPS``).

::

    # settings.py
    INSTALLED_APPS = [..., "tidings.contrib.django"]
    TIDINGS = BASE_DIR / "tidings.toml"       # or a dict of the same shape (docs/frameworks.md)

    # a view
    with transaction.atomic():
        order = Order.objects.create(customer=customer)
        tidings.contrib.django.notify(key=f"order-{order.pk}", recipient={...},
                                      channels=["email"], template="order-confirmed/v1")

An async view awaits ``tidings.contrib.django.anotify(...)`` (in Django's sync thread,
inside the atomic block open there or one of its own). ``manage.py migrate`` brings
tidings' schema; the admin shows intents and their timelines, read-only.

Nothing here imports Django until it is used.
"""

from tidings.contrib.django.conf import tidings_settings
from tidings.contrib.django.transactional import (
    anotify,
    anotify_many,
    client,
    notify,
    notify_many,
)

__all__ = ["anotify", "anotify_many", "client", "notify", "notify_many", "tidings_settings"]
