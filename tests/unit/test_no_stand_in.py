"""No silent stand-in: a channel declared without a provider is refused at start-up,
naming ``channels.<name>.provider``, instead of running on the in-process sandbox twin
(which marks every send accepted while nothing is delivered). The twin is there for
whoever names it; ``tidings init``'s folder names a real one and starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidings.cli.scaffold import write_starter
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.core.outcomes import LookupStatus
from tidings.providers.sandbox import SandboxHttpProvider, SandboxTwinProvider
from tidings.runtime import build_runtime
from tidings.sandbox.core import SandboxConfig, SandboxCore

T0 = 1_786_698_005.0


def settings(tmp_path: Path, **channels: dict[str, object]) -> Settings:
    return Settings.parse({"store": f"sqlite:///{tmp_path / 't.db'}", "channels": channels})


async def test_a_channel_without_a_provider_is_refused_before_the_store_is_opened(
        tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as refused:
        await build_runtime(settings(tmp_path, email={"provider": {"kind": "sandbox-twin"}},
                                     sms={"quota": "5/s"}))

    assert refused.value.field == "channels.sms.provider"
    assert "sandbox-twin" in refused.value.message and "delivers nothing" in refused.value.message
    assert not (tmp_path / "t.db").exists()


async def test_the_twin_named_by_kind_is_built_and_counts_what_it_accepted(
        tmp_path: Path) -> None:
    async with await build_runtime(settings(tmp_path, email={"provider": {
            "kind": "sandbox-twin"}}), clock=FakeClock(T0)) as runtime:
        provider = runtime.provider("email")
        assert isinstance(provider, SandboxTwinProvider)
        await runtime.notify(key="order-1", recipient={"id": "c1", "email": "c1@example.com"},
                             channels=["email"], template="receipt/v1")
        await runtime.worker("email").run_once()

        # The twin's own record of what it took: accepted, and nothing was delivered.
        assert (await provider.lookup("order-1:email")).status is LookupStatus.ACCEPTED


async def test_an_application_may_hand_the_provider_itself(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    own = SandboxTwinProvider(core=SandboxCore(SandboxConfig(), now=clock.now, seed=0),
                              channel="email", clock=clock)

    async with await build_runtime(settings(tmp_path, email={"quota": "10/s"}), clock=clock,
                                   providers={"email": own}) as runtime:
        assert runtime.provider("email") is own
        assert runtime.send_deadline_s("email") == 15.0  # three of the default 5 s timeouts


async def test_the_init_folder_names_its_provider_and_starts(tmp_path: Path) -> None:
    starter = write_starter(tmp_path / "project", sandbox_port=18025)

    async with await build_runtime(Settings.load(starter.folder / "tidings.toml", env={}),
                                   clock=FakeClock(T0)) as runtime:
        assert {c: type(runtime.provider(c)) for c in runtime.channels} == {
            "email": SandboxHttpProvider, "sms": SandboxHttpProvider}
