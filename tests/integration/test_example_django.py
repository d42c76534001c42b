"""examples/django_app on the real PostgreSQL, each step a process of its own as a
deployment runs them: ``manage.py migrate``; orders placed through the view (one
commits, one breaks a CHECK and rolls back) and ``tidings.contrib.django.notify``'s
refusals; ``manage.py tidings_worker`` delivering to a sandbox server, whose counts are
the witness; ``tidings_scheduler --once`` and ``tidings_reconcile``.

Django's tables live in a schema of their own whose search_path lacks tidings' (the
store is the test's schema): the join sets the store's for its writes. Needs a
server (skips without one, fails under CI).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from support.pg_urls import schema_of, without_search_path

pytest.importorskip("django")

from tidings.sandbox import SandboxConfig, SandboxServer, serve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_app"
GUARD_S = 120.0  # only against a hang

PLACE_ORDERS = '''
import json
from django.db import transaction
from django.test import Client
import tidings.contrib.django as td
from tidings import InvalidInput
from orders.models import Order

def order(i, quantity):
    return json.dumps({"id": i, "customer_id": "73", "email": "ada@example.com",
                       "lines": [{"sku": "tea", "quantity": 1},
                                 {"sku": "cake", "quantity": quantity}]})

ADA = {"id": "73", "email": "ada@example.com"}
http, out = Client(), {}
for name, body in (("placed", order(1, 2)), ("refused", order(2, 0))):
    answer = http.post("/orders", body, content_type="application/json")
    out[name] = [answer.status_code, answer.json()]
try:
    td.notify(key="outside", recipient=ADA, channels=["email"], template="t")
except InvalidInput as exc:
    out["outside_atomic"] = str(exc)
with transaction.atomic():
    Order.objects.create(id=3, customer_id="73", email="ada@example.com")
    try:
        td.notify(key="order-3", recipient=ADA, channels=["fax"], template="t")
    except InvalidInput as exc:
        out["bad_channel"] = str(exc)
    out["order_3"] = td.notify(key="order-3", recipient=ADA, channels=["email"],
                               template="order-confirmed")
print(json.dumps(out))
'''


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=EXAMPLE, env=env,
                          capture_output=True, text=True, timeout=GUARD_S, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    server = await serve(SandboxConfig(), "127.0.0.1", 0)
    yield server
    await server.close()


@pytest.fixture
def app_env(pg_url: str, sandbox: SandboxServer) -> Any:
    app_schema = f"{schema_of(pg_url)}_app"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {app_schema}")
    app_url = f"{without_search_path(pg_url)}?options=-csearch_path%3D{app_schema}"
    yield {**os.environ, "DATABASE_URL": app_url, "TIDINGS_STORE": pg_url,
           "SANDBOX_URL": sandbox.url, "DJANGO_SETTINGS_MODULE": "shop.settings",
           "PYTHONUNBUFFERED": "1"}, app_schema
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {app_schema} CASCADE")


async def test_orders_commit_with_their_notification_and_the_commands_deliver(
        app_env: Any, sandbox: SandboxServer, pg_url: str, tmp_path: Path) -> None:
    env, app_schema = app_env
    await asyncio.to_thread(manage, env, "migrate", "--noinput")
    placed = await asyncio.to_thread(manage, env, "shell", "-c", PLACE_ORDERS)
    out = json.loads(placed.stdout.strip().splitlines()[-1])
    assert out["placed"] == [201, {"order": 1, "notified": ["order-1:email"]}]
    assert out["refused"][0] == 409 and "quantity_positive" in out["refused"][1]["error"]
    assert "connection: notify must run inside transaction.atomic(" in out["outside_atomic"]
    assert out["bad_channel"].startswith("channels[0]: ")
    assert out["order_3"] == ["order-3:email"]  # the refusal left the block usable

    with psycopg.connect(pg_url) as conn:
        orders = conn.execute(f"SELECT id FROM {app_schema}.orders_order ORDER BY id")
        assert orders.fetchall() == [(1,), (3,)]
        intents = conn.execute("SELECT key FROM intents ORDER BY key").fetchall()
        assert intents == [("order-1:email",), ("order-3:email",)]

    log = (tmp_path / "worker.log").open("wb")
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "manage.py", "tidings_worker", "--channel", "email", cwd=EXAMPLE,
        env=env, stdout=log, stderr=log)
    log.close()
    try:
        for _ in range(int(GUARD_S / 0.1)):
            if sandbox.core.stats()["channels"].get("email", {}).get("accepted_keys") == 2:
                break
            assert worker.returncode is None, (tmp_path / "worker.log").read_text()[-3000:]
            await asyncio.sleep(0.1)  # the sandbox server has no event to wait on
    finally:
        worker.send_signal(signal.SIGTERM)
        code = await worker.wait()
    assert code == 0, (tmp_path / "worker.log").read_text()[-3000:]
    stats = sandbox.core.stats()["channels"]["email"]
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (2, 0)
    assert sandbox.core.lookup("order-1:email") is not None
    assert sandbox.core.lookup("order-3:email") is not None
    assert sandbox.core.lookup("order-2:email") is None

    await asyncio.to_thread(manage, env, "tidings_scheduler", "--once")
    swept = await asyncio.to_thread(manage, env, "tidings_reconcile", "--json")
    assert isinstance(json.loads(swept.stdout), dict)


def test_the_examples_own_tests_pass_with_tidings_testing(pg_url: str) -> None:
    """The example's tests (tidings.testing's plug-in, assert_notified, the outbox), run
    as a user runs them: pytest on the example, its DATABASE_URL a throw-away one."""
    import os
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(EXAMPLE)], env={**os.environ, "DATABASE_URL": pg_url},
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "4 passed" in run.stdout


async def test_manage_py_migrate_brings_tidings_schema_and_agrees_with_tidings_db_migrate(
        app_env: Any, pg_url: str) -> None:
    """tidings' tables were outside Django's migration graph: manage.py migrate now
    applies tidings' own migrations (the app's 0001_schema, and what is pending after
    every migrate), idempotently, and tidings db migrate then finds nothing to do."""
    env, _ = app_env
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('intents')").fetchone() == (None,)
    await asyncio.to_thread(manage, env, "migrate", "--noinput")
    again = await asyncio.to_thread(manage, env, "migrate", "--noinput")
    assert "No migrations to apply" in again.stdout
    shown = await asyncio.to_thread(manage, env, "showmigrations", "tidings")
    assert "[X] 0001_schema" in shown.stdout
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('intents')").fetchone() != (None,)
    agreed = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "tidings", "db", "migrate", "--json",
                         "--store", pg_url], capture_output=True, text=True, timeout=GUARD_S,
        check=False)
    assert agreed.returncode == 0, agreed.stderr
    assert json.loads(agreed.stdout)["applied"] == []
