"""What the framework doors refuse before any database is touched, each error naming
its field: a join on the SQLite store, what is no connection or session, the wrong
door for a session, ``settings.TIDINGS`` of the wrong shape, and Django on SQLite or
outside ``atomic()`` (in a process of its own: Django's settings are process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tidings import Client, ConfigurationError, InvalidInput, NotifyRequest, Settings
from tidings.admission.intake import join_groups
from tidings.contrib.django.conf import settings_from
from tidings.core.model import IntentDraft

NOW = 1_790_000_000.0
ADA = {"id": "73", "email": "ada@example.com"}


def draft(key: str, due_at: float) -> IntentDraft:
    return IntentDraft(key=key, channel="email", recipient_id="73", address="a@b.c",
                       template="t", data="{}", due_at=due_at)


def test_a_join_writes_what_is_due_later_selected_and_the_rest_by_the_transport() -> None:
    soon, later = draft("a:email", NOW), draft("b:email", NOW + 3600)
    assert join_groups([soon, later], now=NOW, horizon_s=60, enqueue_in_store=True) == [
        ([later], False), ([soon], True)]
    # A broker: everything selected, for the outbox relay once the caller commits.
    assert join_groups([soon, later], now=NOW, horizon_s=60, enqueue_in_store=False) == [
        ([later], False), ([soon], False)]


def test_the_sqlite_store_cannot_join_a_connection(tmp_path: Path) -> None:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 't.db'}",
                               "channels": {"email": {"provider": {"kind": "sandbox-twin"}}}})
    with Client(settings) as client:
        with pytest.raises(ConfigurationError, match=r"^connection: .*PostgreSQL store"):
            client.notify(key="o-1", recipient=ADA, channels=["email"], template="t",
                          connection=object())
        with pytest.raises(ConfigurationError, match=r"^connection: "):
            client.notify_many([NotifyRequest(key="o-1", recipient=ADA, channels=["email"],
                                              template="t")], connection=object())
        assert client.inspect("o-1") == []  # nothing written


def test_sqlalchemy_refuses_what_is_no_session_or_not_psycopg_3(tmp_path: Path) -> None:
    pytest.importorskip("sqlalchemy")
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from tidings.contrib import sqlalchemy as tsa

    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 't.db'}"})
    with Client(settings) as client:
        with pytest.raises(InvalidInput, match=r"^session: must be a SQLAlchemy Session"):
            tsa.notify(object(), client, key="k", recipient=ADA,  # type: ignore[call-overload]
                       channels=["email"], template="t")
        engine = create_engine(f"sqlite:///{tmp_path / 'app.db'}")
        with (Session(engine) as session,
              pytest.raises(InvalidInput, match=r"^session: .*psycopg 3 driver")):
            tsa.notify(session, client, key="k", recipient=ADA, channels=["email"],
                       template="t")
        engine.dispose()


def test_tidings_settings_from_a_path_a_dict_or_both(tmp_path: Path) -> None:
    toml = tmp_path / "tidings.toml"
    toml.write_text('store = "sqlite:///x.db"\n[channels.email]\nquota = "5/s"\n')
    assert settings_from(toml).channels["email"].quota == "5/s"
    assert settings_from(str(toml)).store.endswith("x.db")
    inline = settings_from({"store": "postgresql://h/db", "channels": {"sms": {}}})
    assert (inline.store, list(inline.channels)) == ("postgresql://h/db", ["sms"])
    both = settings_from({"config": toml, "store": "postgresql://h/db"})
    assert (both.store, both.channels["email"].quota) == ("postgresql://h/db", "5/s")


@pytest.mark.parametrize(("value", "field"), [
    (42, "TIDINGS"),
    ({"channels": {"email": {"quota": "lots"}}}, "TIDINGS.channels.email.quota"),
    ({"config": 7}, "TIDINGS.config"),
    ({"config": "/nowhere/tidings.toml"}, "TIDINGS.config"),
])
def test_tidings_settings_errors_name_the_setting(value: object, field: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        settings_from(value)
    assert raised.value.field == field


DJANGO_ON_SQLITE = '''
import json
import django
from django.conf import settings
settings.configure(DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                                          "NAME": ":memory:"}},
                   INSTALLED_APPS=["tidings.contrib.django"],
                   TIDINGS={"store": "sqlite:///unused.db"})
django.setup()
from django.db import transaction
import tidings.contrib.django as td
from tidings import InvalidInput
said = {}
for where in ("outside", "inside"):
    try:
        if where == "inside":
            with transaction.atomic():
                td.notify(key="k", recipient={"id": "1"}, channels=["email"], template="t")
        else:
            td.notify(key="k", recipient={"id": "1"}, channels=["email"], template="t")
    except InvalidInput as exc:
        said[where] = str(exc)
print(json.dumps(said))
'''

DJANGO_WITHOUT_THE_APP = '''
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=[])
django.setup()
import tidings.contrib.django as td
from tidings import ConfigurationError
try:
    td.client()
except ConfigurationError as exc:
    print(exc)
'''


def run_python(code: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_django_on_sqlite_is_refused_with_the_reason(tmp_path: Path) -> None:
    pytest.importorskip("django")
    said = json.loads(run_python(DJANGO_ON_SQLITE, tmp_path))
    for where in ("outside", "inside"):
        assert said[where].startswith("connection: Django's database 'default' is SQLite")
        assert "cannot join Django's transaction" in said[where]
    assert not (tmp_path / "unused.db").exists()  # refused before any client was built


def test_django_without_the_app_says_to_install_it(tmp_path: Path) -> None:
    pytest.importorskip("django")
    assert run_python(DJANGO_WITHOUT_THE_APP, tmp_path).startswith(
        'INSTALLED_APPS: add "tidings.contrib.django"')


DJANGO_CLIENT_LIFECYCLE = '''
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=["tidings.contrib.django"], TIDINGS={"store": "sqlite:///a.db"})
django.setup()
from django.test.utils import override_settings
import tidings.contrib.django as td
first = td.client()
assert td.client() is first
with override_settings(TIDINGS={"store": "sqlite:///b.db"}):
    second = td.client()
    assert second is not first and second.settings.store.endswith("b.db")
print(repr(first))
'''


def test_django_builds_one_client_and_a_new_one_when_tidings_changes(tmp_path: Path) -> None:
    pytest.importorskip("django")
    # The first client is closed when TIDINGS changes (override_settings in a test).
    assert run_python(DJANGO_CLIENT_LIFECYCLE, tmp_path) == "<tidings.Client closed>"
