"""A provider of the user's own, named in settings by its factory's import path: built
by the runtime (so by every process: worker, reconcile, API), sending for real (judged by
the sandbox server's counts), and refused at start-up naming the field when it cannot be."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidings import Client, ConfigurationError, Settings, State, build_runtime
from tidings.core.clock import FakeClock
from tidings.sandbox import SandboxConfig, SandboxCore, serve


def plugin_settings(store: str, factory: str, url: str = "http://127.0.0.1:9") -> Settings:
    return Settings.parse({"store": store, "channels": {"email": {"provider": {
        "kind": "plugin", "factory": factory, "options": {"url": url}}}}})


async def test_the_runtime_builds_and_sends_through_the_plugin(tmp_path: Path) -> None:
    clock = FakeClock(time.time(), auto_advance=True)
    core = SandboxCore(SandboxConfig(), now=clock.now, seed=1)
    server = await serve(core=core)
    try:
        settings = plugin_settings(f"sqlite:///{tmp_path / 'p.db'}", "support.plugin_provider:make",
                                   server.url)
        async with await build_runtime(settings, clock=clock) as runtime:
            provider = runtime.provider("email")
            assert provider.name == "my-plugin"
            await runtime.notify(key="order-1", recipient={"id": "1", "email": "a@example.com"},
                                 channels=["email"], template="t")
            worker = runtime.worker("email", "w1")
            while await worker.run_once():
                pass
            assert provider.sent == ["order-1:email"]  # type: ignore[attr-defined]
        stats = core.stats()["channels"]["email"]
        assert (stats["accepted"], stats["accepted_keys"]) == (1, 1)
    finally:
        await server.close()


@pytest.mark.parametrize(("factory", "says"), [
    ("no_such_module_anywhere:make", "cannot import"),
    ("support.plugin_provider:nothing", "no callable"),
])
async def test_a_plugin_that_cannot_be_imported_is_refused_at_start_up_naming_the_field(
        tmp_path: Path, factory: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        await build_runtime(plugin_settings(f"sqlite:///{tmp_path / 'p.db'}", factory))
    assert raised.value.field == "channels.email.provider.factory"
    assert says in raised.value.message


async def test_a_plugin_that_builds_no_provider_is_refused_where_it_would_send(
        tmp_path: Path) -> None:
    settings = plugin_settings(f"sqlite:///{tmp_path / 'p.db'}",
                               "support.plugin_provider:not_a_provider")
    async with await build_runtime(settings) as runtime:
        for build in (lambda: runtime.worker("email", "w1"), runtime.reconciler,
                      runtime.uncertain_policies):
            with pytest.raises(ConfigurationError) as raised:
                build()
            assert raised.value.field == "channels.email.provider.factory"
            assert "which has no send" in raised.value.message


def test_a_web_process_without_the_providers_secrets_notifies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A provider whose factory reads its API key made every notify() fail in a process
    that only enqueues (ConfigurationError channels.email.provider.factory: ... raised
    KeyError: 'ACME_KEY'). The provider is built where it sends: the web process needs
    the store alone, the worker the key."""
    monkeypatch.delenv("ACME_KEY", raising=False)
    settings = plugin_settings(f"sqlite:///{tmp_path / 'p.db'}",
                               "support.plugin_provider:make_with_key")
    with Client(settings) as web:
        assert web.notify(key="order-1", recipient={"id": "1", "email": "a@example.com"},
                          channels=["email"], template="t") == ["order-1:email"]
        assert web.inspect("order-1")[0].intent.state == State.ENQUEUED

    async def a_worker_without_the_key() -> None:
        async with await build_runtime(settings) as worker_process:
            with pytest.raises(ConfigurationError) as raised:
                worker_process.worker("email", "w1")
            assert raised.value.field == "channels.email.provider.factory"
            assert "KeyError" in raised.value.message

    asyncio.run(a_worker_without_the_key())


async def test_the_worker_builds_the_provider_with_its_key_and_sends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_KEY", "k-123")
    clock = FakeClock(time.time(), auto_advance=True)
    core = SandboxCore(SandboxConfig(), now=clock.now, seed=1)
    server = await serve(core=core)
    try:
        settings = plugin_settings(f"sqlite:///{tmp_path / 'p.db'}",
                                   "support.plugin_provider:make_with_key", server.url)
        async with await build_runtime(settings, clock=clock) as runtime:
            await runtime.notify(key="order-1", recipient={"id": "1", "email": "a@example.com"},
                                 channels=["email"], template="t")
            assert runtime.providers == {}  # admission built no provider
            worker = runtime.worker("email", "w1")
            while await worker.run_once():
                pass
        assert core.stats()["channels"]["email"]["accepted_keys"] == 1
    finally:
        await server.close()


def test_a_factory_that_is_no_import_path_is_a_settings_error() -> None:
    with pytest.raises(ConfigurationError, match="factory"):
        plugin_settings("sqlite:///x.db", "not a path")


def test_the_cli_loads_the_plugin_from_tidings_toml(tmp_path: Path) -> None:
    (tmp_path / "tidings.toml").write_text(
        'store = "sqlite:///p.db"\n[channels.email.provider]\nkind = "plugin"\n'
        'factory = "support.plugin_provider:not_a_provider"\n')
    tests = Path(__file__).resolve().parents[1]  # where the plug-in's package is
    env = {**os.environ, "PYTHONPATH": str(tests)}
    for command in (["db", "migrate"], ["status"]):
        run = subprocess.run([sys.executable, "-m", "tidings", *command], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, check=False, env=env)
    assert run.returncode == 2, run
    assert "channels.email.provider.factory" in run.stderr


# ---------------------------------------------------------------- by entry point

PLUGIN_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "acme-mail-tidings"
version = "0.1"

[project.entry-points."tidings.providers"]
acme = "acme_mail_tidings:make"
"""

PLUGIN_MODULE = '''\
"""A provider plug-in found by its entry point: it sends through the sandbox's HTTP API."""

from tidings.providers.sandbox import SandboxHttpProvider


def make(*, channel, clock, options):
    provider = SandboxHttpProvider(options["url"], channel, clock=clock)
    provider.name = "acme"
    return provider
'''


def install_plugin(tmp_path: Path) -> Path:
    """The tiny plug-in package, installed (pip, its entry points in its dist-info) into a
    folder of its own: the folder to put on the path."""
    source = tmp_path / "acme-mail-tidings"
    (source / "acme_mail_tidings").mkdir(parents=True)
    (source / "pyproject.toml").write_text(PLUGIN_PYPROJECT)
    (source / "acme_mail_tidings" / "__init__.py").write_text(PLUGIN_MODULE)
    target = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                          "--target", str(target), str(source)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    assert list(target.glob("acme_mail_tidings-0.1.dist-info/entry_points.txt"))
    return target


def entry_point_settings(store: str, name: str, url: str = "http://127.0.0.1:9") -> Settings:
    return Settings.parse({"store": store, "channels": {"email": {"provider": {
        "kind": "plugin", "entry_point": name, "options": {"url": url}}}}})


async def test_an_entry_point_no_package_offers_is_refused_naming_the_field(
        tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as raised:
        await build_runtime(entry_point_settings(f"sqlite:///{tmp_path / 'p.db'}",
                                                 "no-such-plugin"))
    assert raised.value.field == "channels.email.provider.entry_point"
    assert "no installed package offers 'no-such-plugin'" in raised.value.message


@pytest.mark.parametrize("provider", [
    {"kind": "plugin"},
    {"kind": "plugin", "factory": "support.plugin_provider:make", "entry_point": "acme"},
    {"kind": "plugin", "entry_point": "not a name"},
])
def test_a_plugin_names_its_factory_once(provider: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match=r"channels\.email\.provider"):
        Settings.parse({"store": "sqlite:///x.db", "channels": {"email": {
            "provider": provider}}})


@pytest.mark.slow
async def test_tidings_worker_sends_through_an_installed_plugin_found_by_entry_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip installs a tiny plug-in package that registers its factory under
    [project.entry-points."tidings.providers"]; tidings.toml names it by that name alone,
    and a real `tidings worker` process delivers through it (the sandbox's counts)."""
    site = install_plugin(tmp_path)
    monkeypatch.syspath_prepend(str(site))  # this process admits, so it checks the name
    clock = FakeClock(time.time(), auto_advance=True)
    core = SandboxCore(SandboxConfig(), now=clock.now, seed=1)
    server = await serve(core=core)
    store = f"sqlite:///{tmp_path / 'p.db'}"
    (tmp_path / "tidings.toml").write_text(
        f'store = "{store}"\n[channels.email.provider]\nkind = "plugin"\n'
        f'entry_point = "acme"\noptions = {{ url = "{server.url}" }}\n')
    worker: asyncio.subprocess.Process | None = None
    try:
        async with await build_runtime(entry_point_settings(store, "acme", server.url)
                                       ) as runtime:
            await runtime.notify(key="order-1", recipient={"id": "1", "email": "a@example.com"},
                                 channels=["email"], template="t")
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", "worker", "--channel", "email", cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(site)}, stderr=asyncio.subprocess.PIPE)
        deadline = time.monotonic() + 60
        while core.stats()["channels"].get("email", {}).get("accepted_keys", 0) < 1:
            assert worker.returncode is None, "the worker ended"
            assert time.monotonic() < deadline, "nothing delivered in 60 s"
            await asyncio.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(worker.communicate(), 60)
        assert worker.returncode == 0, stderr.decode()
        assert core.stats()["channels"]["email"]["accepted_keys"] == 1
    finally:
        if worker is not None and worker.returncode is None:
            worker.kill()
            await worker.wait()
        await server.close()
