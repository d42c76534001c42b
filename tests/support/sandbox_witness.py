"""What a worker delivers, by the sandbox's own counts: a runtime of its own on the same
settings drains a channel's queue into a sandbox twin, and the twin says what it
accepted (the witness, never tidings' own ledger)."""

from __future__ import annotations

import time
from typing import Any

from tidings import Settings, build_runtime
from tidings.core.clock import FakeClock
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.sandbox import SandboxConfig, SandboxCore


async def deliver(settings: Settings, channel: str = "email", *, relay: bool = False
                  ) -> tuple[dict[str, Any], SandboxCore]:
    """Drain ``channel`` (after one outbox relay pass, with ``relay``); the sandbox's
    counts for it (``accepted``, ``accepted_keys``, …), and the sandbox (its ``lookup``
    says whether a key was accepted)."""
    # The writers used the real clock: this runtime's fake one starts there.
    clock = FakeClock(time.time(), auto_advance=True)
    core = SandboxCore(SandboxConfig(), now=clock.now, seed=1)
    provider = SandboxTwinProvider(core=core, channel=channel, clock=clock)
    async with await build_runtime(settings, clock=clock,
                                   providers={channel: provider}) as runtime:
        if relay:
            from tidings.admission.relay import relay_pass

            await relay_pass(runtime.store, runtime.transport, now=clock.now(),
                             config=runtime.relay_config())
        worker = runtime.worker(channel, "witness")
        while await worker.run_once():
            pass
    stats: dict[str, Any] = core.stats()["channels"].get(channel, {"accepted": 0,
                                                                   "accepted_keys": 0})
    return stats, core
