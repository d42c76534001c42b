"""Shared fixtures: throw-away PostgreSQL databases for the tests that need a server.

The server is ``$TIDINGS_TEST_PG`` (an admin URL), by default the local one CI starts
(``postgresql://postgres@127.0.0.1:5432/postgres``). A session creates one database
``tidings_test_<random>`` and drops it at the end; every test gets a schema of its own
in it, selected by the URL (``?options=-csearch_path%3D<schema>``), dropped after the
test. A schema costs about a tenth of a second to create, migrate and drop here;
``CREATE DATABASE … TEMPLATE`` cost four times as much (it syncs the new files to
disk), which is why the per-test unit is a schema. Without a server the tests that
need one skip with the reason, except under ``CI``, where they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

PG_ADMIN_URL = os.environ.get("TIDINGS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def pg_unreachable(reason: str) -> None:
    message = f"PostgreSQL not reachable at {PG_ADMIN_URL}: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def database_url(admin_url: str, name: str, schema: str | None = None) -> str:
    """``admin_url`` pointing at database ``name`` (and only ``schema`` in it, if given)."""
    query = f"options=-csearch_path%3D{schema}" if schema else ""
    return urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}", query=query))


def admin_execute(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(statement.encode())


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """The admin URL of a reachable server (skips, or fails under CI, otherwise)."""
    try:
        import psycopg
    except ImportError as exc:
        pg_unreachable(f"psycopg is not installed ({exc}); pip install -e '.[dev]'")
        raise
    try:
        psycopg.connect(PG_ADMIN_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        pg_unreachable(str(exc).strip() or type(exc).__name__)
    return PG_ADMIN_URL


#: Server-side bounds of the test databases (see ``pg_session_database``): far above what
#: any test waits on a lock or holds a transaction open, far below the run's patience.
PG_TEST_BOUNDS = {"lock_timeout": "60s", "idle_in_transaction_session_timeout": "120s"}


@pytest.fixture(scope="session")
def pg_session_database(pg_admin_url: str) -> Iterator[str]:
    """The name of a database of this test session, dropped at its end."""
    name = f"{os.environ.get('TIDINGS_TEST_PG_PREFIX', 'tidings_test')}_{uuid.uuid4().hex[:16]}"
    admin_execute(pg_admin_url, f"CREATE DATABASE {name}")
    # Bounds on every session of the tests in it: a statement waiting on a lock, or a
    # transaction left open by a connection nobody uses any more (a leaked pool, a child
    # that hung), errs after these instead of hanging the test (and the run) behind it.
    for setting, bound in PG_TEST_BOUNDS.items():
        admin_execute(pg_admin_url, f"ALTER DATABASE {name} SET {setting} = '{bound}'")
    try:
        yield name
    finally:
        # FORCE: a child process that died holding a connection must not keep it alive.
        admin_execute(pg_admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def pg_url(pg_admin_url: str, pg_session_database: str) -> Iterator[str]:
    """The URL of an empty schema of this test alone (no tidings tables yet)."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    session_url = database_url(pg_admin_url, pg_session_database)
    admin_execute(session_url, f"CREATE SCHEMA {schema}")
    try:
        yield database_url(pg_admin_url, pg_session_database, schema)
    finally:
        admin_execute(session_url, f"DROP SCHEMA IF EXISTS {schema} CASCADE")


# ------------------------------------------------------------------ brokers

REDIS_TEST_URL = os.environ.get("TIDINGS_TEST_REDIS", "redis://127.0.0.1:6379/0")
#: What every test's Redis key prefix starts with (runs sharing a server keep apart).
REDIS_TEST_PREFIX = os.environ.get("TIDINGS_TEST_REDIS_PREFIX", "tidings-test")


def server_unreachable(what: str, reason: str) -> None:
    """Skip a test that needs a server, with the reason; under ``CI``, fail it."""
    message = f"{what} not reachable: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def redis_delete_prefix(url: str, prefix: str) -> int:
    """Delete every key under ``prefix`` (SCAN + UNLINK; never FLUSHDB: the server is
    shared); returns how many."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        found = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(found), 500):
            client.unlink(*found[start:start + 500])
        return len(found)
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_server_url() -> str:
    """A reachable Redis server (``$TIDINGS_TEST_REDIS``; skips, or fails under CI)."""
    try:
        import redis
    except ImportError as exc:
        server_unreachable("Redis", f"redis-py is not installed ({exc}); "
                           "pip install -e '.[dev]'")
        raise
    try:
        client = redis.Redis.from_url(REDIS_TEST_URL, socket_timeout=3)
        client.ping()
        client.close()
    except redis.RedisError as exc:
        server_unreachable(f"Redis at {REDIS_TEST_URL}", str(exc) or type(exc).__name__)
    return REDIS_TEST_URL


@pytest.fixture
def redis_url(redis_server_url: str) -> Iterator[str]:
    """A transport URL whose keys are this test's alone (``?prefix=``), deleted after."""
    prefix = f"{REDIS_TEST_PREFIX}-{uuid.uuid4().hex[:12]}"
    yield f"{redis_server_url}?prefix={prefix}"
    redis_delete_prefix(redis_server_url, prefix)


# ---------------------------------------------------------------- RabbitMQ

AMQP_TEST_URL = os.environ.get("TIDINGS_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")


def rabbitmqctl(*args: str) -> None:
    """Run ``rabbitmqctl`` (it makes and deletes the test sessions' virtual hosts)."""
    from support.rabbitmq import rabbitmqctl_run

    rabbitmqctl_run(*args)


@pytest.fixture(scope="session")
def amqp_session_vhost() -> Iterator[str]:
    """A virtual host of this test session on the broker (``$TIDINGS_TEST_AMQP``),
    deleted at its end; skips, or fails under CI, when no broker answers or
    ``rabbitmqctl`` cannot make one."""
    import shutil
    import socket

    parts = urlsplit(AMQP_TEST_URL)
    what = f"RabbitMQ at {parts.hostname}:{parts.port or 5672}"
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), 3).close()
    except OSError as exc:
        server_unreachable(what, str(exc))
    if shutil.which("rabbitmqctl") is None:
        server_unreachable(what, "rabbitmqctl is not on PATH (it makes the test's vhost)")
    name = f"{os.environ.get('TIDINGS_TEST_PG_PREFIX', 'tidings_test')}_{uuid.uuid4().hex[:16]}"
    try:
        rabbitmqctl("add_vhost", name)
        rabbitmqctl("set_permissions", "-p", name, parts.username or "guest", ".*", ".*", ".*")
    except (RuntimeError, OSError) as exc:
        server_unreachable(what, str(exc))
    try:
        yield name
    finally:
        rabbitmqctl("delete_vhost", name)


def amqp_vhost_url(vhost: str, prefix: str) -> str:
    """``$TIDINGS_TEST_AMQP`` on virtual host ``vhost``, its queues under ``prefix``."""
    from urllib.parse import quote

    return urlunsplit(urlsplit(AMQP_TEST_URL)._replace(path=f"/{quote(vhost, safe='')}",
                                                       query=f"prefix={prefix}"))


@pytest.fixture
def amqp_url(amqp_session_vhost: str) -> Iterator[str]:
    """A transport URL whose queues are this test's alone (``?prefix=`` in the session's
    vhost); the queues of channels email and sms are deleted after it (the rest go with
    the vhost)."""
    import asyncio

    url = amqp_vhost_url(amqp_session_vhost, f"t{uuid.uuid4().hex[:12]}")
    yield url

    async def clean() -> None:
        from tidings.transports.rabbitmq import RabbitTransport

        transport = await RabbitTransport.open(url)
        try:
            await transport.delete_queues(["email", "sms"])
        finally:
            await transport.close()

    asyncio.run(clean())


# ------------------------------------------------------------------ run order

#: Tests that take half a minute or more on an idle 2-core machine (minutes on a loaded
#: one), by node-id prefix (a file or one test), in the order they are to start. With
#: ``--maxschedchunk=1`` (pyproject.toml) xdist sends each worker two tests to begin with,
#: then one more each time it is down to one, in this order: so these start first, and
#: the thousands of short tests fill the workers around them (a run ends no sooner than
#: its last long test's start plus its length).
#:
#: The kill loops SIGKILL a worker process every 2 s of wall time. On an overloaded
#: machine a restarted worker spends those 2 s importing, the loop gets less done per kill
#: and kills more: the four of them started at once beside the rest of the suite ran past
#: their 240 s guard and the 360 s timeout. So they come in pairs, the two of a pair
#: on one worker one after the other: two kill loops at a time, never four.
LONG_RUNNING = (
    "tests/acceptance/test_blast_radius.py::test_kills_every_two_seconds_expire_only",
    "tests/acceptance/test_crash_holds_wire.py::test_after_kills_only_sends_on_the_wire_are_"
    "held[sqlite]",
    "tests/acceptance/test_blast_radius.py",
    "tests/acceptance/test_crash_holds_wire.py",
    "tests/acceptance/test_api_bad_input.py",
    "tests/acceptance/test_fleet_hosts.py",
    "tests/acceptance/test_demo_real_providers.py",
    "tests/acceptance/test_soak_short.py",
    "tests/acceptance/test_cli.py::test_demo_keeps_its_contract",
    "tests/integration/test_fleet.py::test_32_claimers_race_over_10000_intents",
    "tests/integration/test_worker_takeover.py",
    "tests/integration/test_example_django.py",
    "tests/acceptance/test_api_process.py",
    "tests/integration/test_example_fastapi_sqlalchemy.py",
    "tests/scenarios/test_capacity_forecast.py",
    "tests/unit/test_api_schema.py",
)


def run_order(item: pytest.Item) -> int:
    """0.. for the long tests of ``LONG_RUNNING`` (in its order), then every test marked
    slow (it starts processes), then the rest."""
    for rank, prefix in enumerate(LONG_RUNNING):
        if item.nodeid.startswith(prefix):
            return rank
    return len(LONG_RUNNING) + (0 if item.get_closest_marker("slow") else 1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: the same order on every xdist worker (they must agree), files kept
    # together within a rank.
    items.sort(key=run_order)
