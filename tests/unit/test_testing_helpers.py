"""tidings.testing for an application's own tests: what it notified, asserted with no
worker; an in-memory outbox its sends go to; eager delivery; the pytest fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tidings import Client, Settings, State, build_runtime
from tidings.testing import (
    Outbox,
    aeager,
    anotifications,
    assert_not_notified,
    assert_notified,
    deliver,
    eager,
    notifications,
    outbox,
)

ADA = {"id": "c1", "email": "ada@example.com"}


def settings(tmp_path: Path) -> Settings:
    # The providers the settings name are never built: the outbox stands in front.
    return Settings.parse({"store": f"sqlite:///{tmp_path / 't.db'}", "channels": {
        "email": {"provider": {"kind": "sendgrid", "from_address": "shop@example.com",
                               "api_key_env": "NO_SUCH_KEY_IN_TESTS"}},
        "sms": {"kind": "sms", "provider": {"kind": "sandbox-twin"}}}})


def test_assert_notified_reads_what_the_code_notified_with_no_worker(tmp_path: Path) -> None:
    with Client(settings(tmp_path)) as client:
        client.notify(key="order-1", recipient=ADA, channels=["email"],
                      template="order-confirmed", data={"order": 1, "total": "9.50"})
        client.notify(key="order-2", recipient={**ADA, "phone": "+15550100"},
                      channels=["email", "sms"], template="order-confirmed")

        [found] = assert_notified(client, key="order-1", channel="email", recipient="c1",
                                  template="order-confirmed", data={"order": 1})
        assert (found.key, found.state, found.address) == (
            "order-1:email", State.ENQUEUED, "ada@example.com")
        assert_notified(client, key="order-2", count=2)
        assert_notified(client, key="order-2:sms", channel="sms")
        assert_not_notified(client, key="order-3")
        assert_not_notified(client, key="order-1", data={"order": 2})
        with pytest.raises(AssertionError, match=r"found 0; notified: order-1:email "
                                                 r"\(order-confirmed to c1, enqueued\)"):
            assert_notified(client, key="order-1", template="welcome")
        with pytest.raises(AssertionError, match="expected no notification"):
            assert_not_notified(client, channel="sms")
        assert len(notifications(client).filter(recipient="c1")) == 3


def test_deliver_sends_to_the_outbox_and_eager_sends_at_once(tmp_path: Path) -> None:
    with Client(settings(tmp_path)) as client:
        box = outbox(client)
        client.notify(key="order-1", recipient=ADA, channels=["email"], template="t")
        assert box.sent == []  # no worker yet
        [sent] = deliver(client)
        assert (sent.key, sent.to, box.keys()) == ("order-1:email", "ada@example.com",
                                                   ["order-1:email"])
        assert_notified(client, key="order-1", state=State.ACCEPTED)
        assert deliver(client) == []  # nothing left

        with eager(client, box):
            client.notify(key="order-2", recipient=ADA, channels=["email"], template="t")
            assert box.keys()[-1] == "order-2:email"  # delivered before notify returned
        assert "notify" not in vars(client)  # the client is itself again
        client.notify(key="order-3", recipient=ADA, channels=["email"], template="t")
        assert box.keys() == ["order-1:email", "order-2:email"]


async def test_the_async_runtime_eager_and_its_notifications(tmp_path: Path) -> None:
    async with await build_runtime(settings(tmp_path)) as runtime:
        async with aeager(runtime) as box:
            await runtime.notify(key="order-1", recipient=ADA, channels=["email"],
                                 template="t")
            assert box.keys() == ["order-1:email"]
        found = await anotifications(runtime)
        assert_notified(found, key="order-1", state="accepted")
        assert isinstance(runtime.providers["email"], Outbox)


def test_the_pytest_fixtures(tmp_path: Path) -> None:
    """An application's suite enables the plug-in; its tidings.toml names the channels."""
    (tmp_path / "tidings.toml").write_text(
        '[channels.email.provider]\nkind = "sendgrid"\nfrom_address = "shop@example.com"\n')
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tidings.testing.pytest_plugin"]\n')
    (tmp_path / "test_app.py").write_text(textwrap.dedent('''
        from tidings.testing import assert_notified, deliver

        def place_order(client, n):  # the application's own code
            client.notify(key=f"order-{n}", recipient={"id": "c1", "email": "a@example.com"},
                          channels=["email"], template="order-confirmed")

        def test_eager(tidings_client, tidings_eager):
            place_order(tidings_client, 1)
            assert tidings_eager.keys() == ["order-1:email"]
            assert_notified(tidings_client, key="order-1", state="accepted")

        def test_outbox(tidings_client, tidings_outbox):
            place_order(tidings_client, 2)
            assert_notified(tidings_client, key="order-2", state="enqueued")
            assert [r.key for r in deliver(tidings_client)] == ["order-2:email"]
    '''))
    env = {k: v for k, v in os.environ.items() if k != "TIDINGS_CONFIG"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "no:asyncio", "-W", "error", str(tmp_path)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout
