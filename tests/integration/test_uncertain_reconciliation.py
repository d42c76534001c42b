"""Issue figure: with 1% lost responses, no uncertain intent is left after two reconciler
passes, and no intent the provider had already accepted is sent again.

Real sandbox HTTP server with deduplication off (a second send of a key would be
counted twice); its own counts are the witness.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.states import State
from tidings.runtime import build_runtime
from tidings.sandbox import SandboxConfig, serve

pytestmark = pytest.mark.slow

N = 3000


async def test_lost_responses_are_resolved_by_lookup_and_never_resent(tmp_path: Path) -> None:
    server = await serve(SandboxConfig(dedupe=False, lost_response=0.01,
                                       quotas={"email": 1_000_000}), "127.0.0.1", 0)
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "reconciler": {"uncertain_after_s": 0.0},
        "channels": {"email": {"provider": {"kind": "sandbox", "url": server.url}}},
    })
    runtime = await build_runtime(settings)
    try:
        await runtime.notify_many([
            NotifyRequest(key=f"order-{i}", recipient={"id": f"c{i}", "email": f"c{i}@ex.com"},
                          channels=["email"], template="t/v1") for i in range(N)])
        worker = runtime.worker("email")
        while await worker.run_once():
            pass
        lost = server.core.stats()["channels"]["email"]["lost_responses"]
        counts = (await runtime.store.intent_counts())["email"]
        assert lost > 0 and counts[State.UNCERTAIN.value] == lost  # the fault happened

        reconciler = runtime.reconciler()
        for _ in range(2):  # two reconciler intervals
            await reconciler.run_pass(now=runtime.clock.now())
            while await worker.run_once():
                pass

        counts = (await runtime.store.intent_counts())["email"]
        assert counts == {State.ACCEPTED.value: N}
        stats = server.core.stats()["channels"]["email"]
        assert stats["accepted_keys"] == N
        assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
        assert stats["accepted"] == N  # not one request accepted a second time
    finally:
        await runtime.close()
        await server.close()
