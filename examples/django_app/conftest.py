"""The example's tests: tidings.testing's pytest plug-in, with the process's client of
``tidings.contrib.django``.

Run them: ``DATABASE_URL=postgresql://… pytest examples/django_app`` (a database the
tests may write to: Django's tables are migrated into it first; they skip without one).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import tidings

sys.path.insert(0, str(Path(__file__).resolve().parent))  # shop and orders
pytest_plugins = ["tidings.testing.pytest_plugin"]


@pytest.fixture(scope="session")
def django_ready() -> None:
    if not os.environ.get("DATABASE_URL"):
        pytest.skip("set DATABASE_URL to a PostgreSQL database the tests may write to")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


@pytest.fixture
def tidings_client(django_ready: None) -> tidings.Client:
    """The plug-in's fixtures (tidings_outbox, tidings_eager) on the process's client."""
    import tidings.contrib.django

    return tidings.contrib.django.client()
