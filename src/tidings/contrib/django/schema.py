"""tidings' schema under ``manage.py migrate``: the store's own migrations, applied by
Django's.

The app's migration ``0001_schema`` puts tidings' tables in Django's migration graph
(``manage.py showmigrations tidings``; another app's migration may depend on it), and
every ``manage.py migrate`` then applies what a newer tidings brings (``post_migrate``),
so an upgrade needs no migration file of its own. Both run ``tidings db migrate``'s
function on the store ``settings.TIDINGS`` names: each migration of the store is applied
once, whoever asks first, so ``tidings db migrate`` and Django always agree.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from django.db import DEFAULT_DB_ALIAS


def apply_schema() -> list[int]:
    """Apply the store's pending migrations; the numbers applied now."""
    from tidings.contrib.django.conf import tidings_settings
    from tidings.processes.commands import migrate_store

    settings = tidings_settings()
    # On a thread of its own: manage.py migrate may itself run under an event loop
    # (call_command from async code), where asyncio.run refuses to start another.
    with concurrent.futures.ThreadPoolExecutor(1, "tidings-migrate") as pool:
        applied, _ = pool.submit(asyncio.run, migrate_store(settings)).result()
    return applied


def migrate_operation(apps: Any, schema_editor: Any) -> None:
    """The ``RunPython`` of ``0001_schema``: once, for the default database."""
    if schema_editor.connection.alias == DEFAULT_DB_ALIAS:
        apply_schema()


def on_post_migrate(*, using: str = DEFAULT_DB_ALIAS, **_: Any) -> None:
    """After every ``manage.py migrate`` of the default database: what is pending."""
    if using == DEFAULT_DB_ALIAS:
        apply_schema()
