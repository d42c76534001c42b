"""``tidings.Client``: the runtime's door for code with no event loop, judged by what a
worker then delivers to the sandbox (its own counts), on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tidings import Client, ClientError, InvalidInput, Settings, build_runtime
from tidings.core.clock import FakeClock
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.sandbox import SandboxConfig, SandboxCore

#: A channel on the in-process sandbox, named as such: no channel has a provider by default.
TWIN = {"provider": {"kind": "sandbox-twin"}}

T0 = 1_790_000_000.0
THREADS = 50


def settings_for(store: str) -> Settings:
    return Settings.parse({"store": store, "channels": {"email": TWIN}})


def recipient(i: int) -> dict[str, str]:
    return {"id": f"cust_{i}", "email": f"cust{i}@example.com"}


async def deliver(settings: Settings) -> dict[str, Any]:
    """Drain the email queue with a worker of its own; the sandbox's counts."""
    clock = FakeClock(time.time(), auto_advance=True)  # the client wrote on the real clock
    core = SandboxCore(SandboxConfig(), now=clock.now, seed=1)
    provider = SandboxTwinProvider(core=core, channel="email", clock=clock)
    async with await build_runtime(settings, clock=clock,
                                   providers={"email": provider}) as runtime:
        worker = runtime.worker("email", "w1")
        while await worker.run_once():
            pass
    stats: dict[str, Any] = core.stats()["channels"]["email"]
    return stats


def notify_from_threads(client: Client, count: int) -> list[list[str]]:
    found: list[list[str]] = [[] for _ in range(count)]
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            found[i] = client.notify(key=f"order-{i}", recipient=recipient(i),
                                     channels=["email"], template="t")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    return found


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'client.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


def test_notify_from_many_threads_is_delivered_once_each(store_url: str) -> None:
    settings = settings_for(store_url)
    with Client(settings) as client:
        keys = notify_from_threads(client, THREADS)
        assert keys == [[f"order-{i}:email"] for i in range(THREADS)]
        # A retried call (the same key) is no second intent.
        assert client.notify(key="order-0", recipient=recipient(0), channels=["email"],
                             template="t") == ["order-0:email"]
    stats = asyncio.run(deliver(settings))
    assert stats["accepted"] == THREADS
    assert stats["accepted_keys"] == THREADS


def test_same_errors_as_the_runtime(tmp_path: Path) -> None:
    with Client(settings_for(f"sqlite:///{tmp_path / 'c.db'}")) as client:
        with pytest.raises(InvalidInput) as raised:
            client.notify(key="k", recipient=recipient(1), channels=["fax"], template="t")
        assert "fax" in str(raised.value)
        with pytest.raises(InvalidInput):
            client.notify_many(None)  # type: ignore[arg-type]
        assert client.notify_many([]) == []


def test_inspect_cancel_and_preferences(tmp_path: Path) -> None:
    with Client(settings_for(f"sqlite:///{tmp_path / 'c.db'}")) as client:
        (key,) = client.notify(key="order-7", recipient=recipient(7), channels=["email"],
                               template="t", due_at=time.time() + 10**7)
        (delivery,) = client.inspect("order-7")
        assert delivery.key == key
        assert client.inspect(recipient="cust_7")[0].key == key
        assert client.cancel("order-7") == {key: client.inspect(key)[0].intent.state}
        pref = client.set_preference("cust_7", "email", opted_out=True)
        assert client.preferences("cust_7") == [pref]
        assert client.delete_preference("cust_7", "email") is True


def test_a_store_url_is_enough(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no tidings.toml here: the defaults and this store
    with Client(f"sqlite:///{tmp_path / 'u.db'}") as client:
        assert client.settings.store == f"sqlite:///{tmp_path / 'u.db'}"
        assert client.preferences("cust_1") == []  # no channel declared, nothing stored


def test_a_store_url_with_the_channels_of_tidings_toml(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs' Client("postgresql://…"): the URL names the store, ./tidings.toml the
    channels; with no tidings.toml the refusal says where channels are declared."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'u.db'}"
    with Client(url) as bare, pytest.raises(InvalidInput) as raised:
        bare.notify(key="k", recipient=recipient(1), channels=["email"], template="t")
    assert raised.value.field == "channels[0]"
    assert "declared: none (channels are declared in the settings" in raised.value.message
    (tmp_path / "tidings.toml").write_text(
        'store = "sqlite:///other.db"\n'
        '[channels.email.provider]\nkind = "sandbox-twin"\n')
    with Client(url) as client:
        assert client.settings.store == url
        assert client.notify(key="k", recipient=recipient(1), channels=["email"],
                             template="t") == ["k:email"]


def test_a_script_that_never_closes_its_client_exits_quietly(store_url: str,
                                                             tmp_path: Path) -> None:
    """Every snippet of the docs ends without client.close(): the client closes itself at
    interpreter exit, so the runtime's tasks (the PostgreSQL pool's workers) end instead
    of being reported destroyed while pending."""
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        "from tidings import Client, Settings\n"
        "client = Client(Settings.parse({'store': sys.argv[1], 'channels': {'email': "
        "{'provider': {'kind': 'sandbox-twin'}}}}))\n"
        "client.notify(key='k', recipient={'id': 'c1', 'email': 'c1@example.com'}, "
        "channels=['email'], template='t')\n"
        "print('notified')\n")
    run = subprocess.run([sys.executable, str(script), store_url], capture_output=True,
                         text=True, timeout=120, check=False)
    assert (run.returncode, run.stdout, run.stderr) == (0, "notified\n", "")
    assert asyncio.run(deliver(settings_for(store_url)))["accepted"] == 1


def test_inside_an_event_loop_it_says_to_use_the_runtime(tmp_path: Path) -> None:
    client = Client(settings_for(f"sqlite:///{tmp_path / 'c.db'}"))

    async def misuse() -> None:
        client.notify(key="k", recipient=recipient(1), channels=["email"], template="t")

    with pytest.raises(ClientError, match="build_runtime"):
        asyncio.run(misuse())
    client.close()


def test_after_close_it_says_closed(tmp_path: Path) -> None:
    client = Client(settings_for(f"sqlite:///{tmp_path / 'c.db'}"))
    client.notify(key="k", recipient=recipient(1), channels=["email"], template="t")
    client.close()
    client.close()  # idempotent
    with pytest.raises(ClientError, match="closed"):
        client.cancel("k")


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_process_gets_its_own_loop_and_runtime(store_url: str) -> None:
    settings = settings_for(store_url)
    with Client(settings) as client:
        client.notify(key="parent-1", recipient=recipient(1), channels=["email"], template="t")
        pid = os.fork()
        if pid == 0:  # the child, as a gunicorn worker forked after the parent used it
            code = 0
            try:
                client.notify(key="child-1", recipient=recipient(2), channels=["email"],
                              template="t")
                client.close()
            except BaseException:
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # The parent's runtime (and its connection) survived the child's close.
        client.notify(key="parent-2", recipient=recipient(3), channels=["email"], template="t")
    stats = asyncio.run(deliver(settings))
    assert stats["accepted"] == 3


FORK_RUNS = 20


def _child_first_call(client: Client) -> int:
    """In a forked child: the client's first call, and its answer as an exit code."""
    try:
        client.notify(key=f"child-{os.getpid()}", recipient=recipient(os.getpid()),
                      channels=["email"], template="t")
        client.close()
    except BaseException:
        return 1
    return 0


def _wait_for(pid: int, within_s: float) -> int | None:
    """The child's exit code, or None (and the child killed) if it did not end in time."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_fork_during_the_first_call_never_hangs_the_child(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """gunicorn --preload with threads: a process forks while another of its threads is
    in the client's first call. The child inherited the start-up lock held and waited
    for ever; it now starts a runtime of its own, within timeout_s."""
    import tidings.runtime

    real_build = tidings.runtime.build_runtime

    async def slow_build(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.08)  # a start-up long enough for every fork to land inside it
        return await real_build(*args, **kwargs)

    monkeypatch.setattr(tidings.runtime, "build_runtime", slow_build)
    settings = settings_for(store_url)
    outcomes = []
    for run in range(FORK_RUNS):
        client = Client(settings, timeout_s=10)
        first = threading.Thread(target=client.notify, kwargs={
            "key": f"parent-{run}", "recipient": recipient(run), "channels": ["email"],
            "template": "t"})
        first.start()
        time.sleep((0.005, 0.02, 0.05)[run % 3])
        pid = os.fork()
        if pid == 0:
            os._exit(_child_first_call(client))
        outcome = _wait_for(pid, within_s=20)  # the child's call is bounded by 10 s
        first.join(timeout=30)
        client.close()
        assert outcome is not None, f"run {run}: the child's first call hung"
        outcomes.append(outcome)
    assert outcomes == [0] * FORK_RUNS


def test_a_slow_start_up_is_bounded_by_timeout_s(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Callers that come while the runtime starts wait on it within their timeout, and a
    later call gets the runtime once it has started."""
    import tidings.runtime

    real_build = tidings.runtime.build_runtime

    async def slow_build(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(1.0)
        return await real_build(*args, **kwargs)

    monkeypatch.setattr(tidings.runtime, "build_runtime", slow_build)
    client = Client(settings_for(f"sqlite:///{tmp_path / 'c.db'}"), timeout_s=0.2)
    began = time.monotonic()
    with pytest.raises(ClientError, match="still starting"):
        client.preferences("cust_1")
    assert time.monotonic() - began < 0.9
    client.timeout_s = 10
    assert client.preferences("cust_1") == []  # the same start-up, not a second one
    client.close()
