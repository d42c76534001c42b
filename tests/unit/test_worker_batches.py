"""How much a worker takes, holds and commits at once: settings ``worker.batch_size``,
``worker.max_held`` and ``worker.commit_batch``, reaching the worker the runtime builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.delivery.worker import WorkerConfig
from tidings.runtime import build_runtime

#: A channel on the in-process sandbox, named as such: no channel has a provider by default.
TWIN = {"provider": {"kind": "sandbox-twin"}}

T0 = 1_000_000.0
DEFAULTS = (WorkerConfig.batch_size, WorkerConfig.max_held, WorkerConfig.commit_batch)


@pytest.mark.parametrize(("worker", "expected"), [
    ({}, DEFAULTS),
    ({"batch_size": 50}, (50, *DEFAULTS[1:])),
    ({"batch_size": 400, "max_held": 1000, "commit_batch": 200}, (400, 1000, 200)),
])
async def test_the_worker_takes_what_the_settings_say(
        tmp_path: Path, worker: dict[str, int], expected: tuple[int, int, int]) -> None:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 'batches.db'}",
                               "worker": worker, "channels": {"email": TWIN}})
    rt = await build_runtime(settings, clock=FakeClock(T0))
    try:
        config = rt.worker("email", "w1").config
        assert (config.batch_size, config.max_held, config.commit_batch) == expected
    finally:
        await rt.close()


@pytest.mark.parametrize("field", ["batch_size", "max_held", "commit_batch"])
def test_a_batch_setting_below_one_is_refused_by_name(field: str) -> None:
    with pytest.raises(ConfigurationError, match=f"worker.{field}"):
        Settings.parse({"worker": {field: 0}})
