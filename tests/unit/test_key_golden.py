"""Pinned keys: every path that makes an intent makes the same key it made before, on
both stores (the scheduler, a replay, a publish to a campaign queue and to a channel
queue, ``notify``). A key that changed between versions would turn every redelivery
and replay into a second send, so any difference from ``golden/keys.json`` fails.

Regenerate only for a deliberate change of the key format (which needs a migration
plan of its own): ``TIDINGS_WRITE_GOLDEN=1 pytest tests/unit/test_key_golden.py``.
PostgreSQL needs a server (see tests/conftest.py; skips without one, fails under CI).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from apikit import T0, digest, dumps, open_api, publish_body, publish_headers

from tidings.admission.audience import GeneratorAudience
from tidings.core.model import Recipient
from tidings.core.states import State

GOLDEN = Path(__file__).parent / "golden" / "keys.json"
#: Ids as audiences hold them: plain, non-ASCII, with ':' '@' '.' '+' '=' in them.
MEMBERS = [Recipient(id=i, email=f"m{n}@example.com", phone=f"+1555000{n:04d}")
           for n, i in enumerate(sorted(["cust_0001", "ünï-7", "a:b", "x@y.z", "p+q=r", "42"]))]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'golden.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


async def keys_of_every_path(tmp_path: Path, store: str) -> dict[str, list[str]]:
    campaign = replace(digest(0), audience=GeneratorAudience(lambda: iter(MEMBERS)))
    found: dict[str, list[str]] = {}
    async with open_api(tmp_path, store=store, campaign=campaign) as api:
        rt = api.runtime

        async def new_keys(before: set[str]) -> list[str]:
            now = {i.key for i in await rt.store.intent_find(states=list(State), limit=10_000)}
            return sorted(now - before)

        seen: set[str] = set()
        await rt.scheduler().run_pass(now=T0)  # 2026-08-14 09:00:05, the digest's 09:00
        found["scheduled"] = await new_keys(seen)
        seen |= set(found["scheduled"])
        await rt.scheduler().replay("weekly-digest", "2026-08-13", now=T0,
                                    expires_at=T0 + 3600)
        found["replay"] = await new_keys(seen)
        seen |= set(found["replay"])
        for n, body in enumerate([
                publish_body("ünï-7", day="2026-08-15"),
                publish_body("a:b", day="2026-08-15", template=None),
                publish_body("cust_0009", day="2026-08-15", queue="transactional-email",
                             template="receipt-v2", email="r@example.com"),
                publish_body("cust_0009", day="2026-08-15", queue="transactional-email",
                             template="welcome", email="r@example.com")]):
            response = await api.client.post("/v1/queue/publish", content=dumps(body),
                                             headers=publish_headers(api, f"golden-{n}"))
            assert response.status_code == 202, response.text
        found["publish"] = await new_keys(seen)
        seen |= set(found["publish"])
        await rt.notify(key="shipment-4821:customer-73", recipient={
            "id": "customer-73", "email": "c73@example.com", "phone": "+15550007373"},
            channels=["email", "sms"], template="shipment-update")
        found["notify"] = await new_keys(seen)
    return found


async def test_every_path_makes_the_keys_it_always_made(tmp_path: Path, store: str) -> None:
    found = await keys_of_every_path(tmp_path, store)

    if os.environ.get("TIDINGS_WRITE_GOLDEN") and store.startswith("sqlite"):
        GOLDEN.write_text(json.dumps(found, indent=2, ensure_ascii=False) + "\n")
    assert found == json.loads(GOLDEN.read_text())
