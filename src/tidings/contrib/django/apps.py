"""The Django app (``"tidings.contrib.django"`` in ``INSTALLED_APPS``): it holds the
process's one ``Client``, built on first use from ``settings.TIDINGS``.

The client is the app config's, not a module's global: it is made when first asked for
(never at import or start-up), once per process (a forked worker makes its own, as
``Client`` does), and dropped when a test changes ``TIDINGS``.
"""

from __future__ import annotations

import threading
from typing import Any

from django.apps import AppConfig

from tidings.client import Client


class TidingsConfig(AppConfig):
    """tidings' app: the management commands, and ``client()``."""

    name = "tidings.contrib.django"
    label = "tidings"
    verbose_name = "tidings"
    default = True

    def __init__(self, app_name: str, app_module: Any) -> None:
        super().__init__(app_name, app_module)
        self._lock = threading.Lock()
        self._client: Client | None = None

    def ready(self) -> None:
        from django.core.signals import setting_changed
        from django.db.models.signals import post_migrate

        from tidings.contrib.django.schema import on_post_migrate

        setting_changed.connect(self._on_setting_changed, dispatch_uid="tidings-settings")
        # manage.py migrate brings tidings' schema up to date, every time (schema.py).
        post_migrate.connect(on_post_migrate, sender=self, dispatch_uid="tidings-schema")

    def client(self) -> Client:
        """The process's client, built from ``settings.TIDINGS`` on first use."""
        with self._lock:
            if self._client is None:
                from tidings.contrib.django.conf import tidings_settings

                self._client = Client(tidings_settings())
            return self._client

    def close_client(self) -> None:
        """Close the client (a later ``client()`` builds a new one)."""
        with self._lock:
            found, self._client = self._client, None
        if found is not None:
            found.close()

    def _on_setting_changed(self, *, setting: str, **_: Any) -> None:
        if setting == "TIDINGS":
            self.close_client()
