"""Given-helpers for the API tests: a runtime on a temp SQLite file with a fake clock,
the app built on it, an httpx client over ASGI, and tokens of every scope."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from tidings.admission.audience import GeneratorAudience
from tidings.admission.campaign import Campaign
from tidings.api import create_app, sign
from tidings.api.tokens import new_token
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.cron import Schedule
from tidings.core.model import Recipient
from tidings.runtime import Runtime, build_runtime

#: A channel on the in-process sandbox, named as such: no channel has a provider by default.
TWIN = {"provider": {"kind": "sandbox-twin"}}

#: Friday 2026-08-14 09:00:05 UTC: five seconds after the daily digest's 09:00 fire time.
T0 = 1_786_698_005.0
DAY = "2026-08-14"
SECRET = "s3cret-current"
OLD_SECRET = "s3cret-previous"
ENV = {"TIDINGS_TRIGGER_SECRETS": f"{SECRET}, {OLD_SECRET}"}


def customers(n: int) -> list[Recipient]:
    return [Recipient(id=f"cust_{i:04d}", email=f"c{i}@example.com",
                      phone=f"+1555000{i:04d}" if i % 2 else None, data={"first": f"C{i}"})
            for i in range(1, n + 1)]


def digest(members: int) -> Campaign:
    """The daily digest at 09:00 UTC over email and sms, template weekly-digest v3."""
    people = customers(members)
    return Campaign(name="weekly-digest", schedule=Schedule("0 9 * * *", "UTC"),
                    channels=("email", "sms"), template="weekly-digest", version=3,
                    audience=GeneratorAudience(lambda: iter(people)),
                    expires_after_s=6 * 3600, grace_s=3600)


def settings_for(tmp_path: Path, *, api: Mapping[str, Any] | None = None,
                 page_size: int = 5000, max_pages: int = 20,
                 channels: Mapping[str, Any] | None = None,
                 store: str | None = None) -> Settings:
    return Settings.parse({
        "store": store or f"sqlite:///{tmp_path / 'api.db'}",
        "channels": channels or {"email": {"quota": "10/s", **TWIN},
                                 "sms": {"quota": "5/s", **TWIN}},
        "scheduler": {"page_size": page_size, "max_pages": max_pages},
        "api": {"queues": {"weekly-digest": {"campaign": "weekly-digest"},
                           "transactional-email": {"channel": "email"}},
                **(api or {})},
    })


@dataclass
class Api:
    runtime: Runtime
    app: FastAPI
    client: httpx.AsyncClient
    clock: FakeClock
    tokens: dict[str, str]

    def auth(self, scope: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[scope]}"}

    async def token(self, *scopes: str, name: str = "extra",
                    expires_in_s: float | None = None) -> str:
        text, row = new_token(name=name, scopes=scopes, now=self.clock.now(),
                              expires_in_s=expires_in_s)
        await self.runtime.store.api_token_insert(row)
        return text

    async def intents(self) -> int:
        counts = await self.runtime.store.intent_counts()
        return sum(n for states in counts.values() for n in states.values())

    async def occurrences(self) -> int:
        return len(await self.runtime.store.occurrence_list())


def signed(body: bytes, *, secret: str = SECRET, timestamp: float = T0, method: str = "POST",
           target: str = "/v1/trigger/weekly-digest") -> dict[str, str]:
    """The headers of a trigger signed for ``method`` on ``target`` with ``body``."""
    ts = int(timestamp)
    signature = sign(secret, timestamp=ts, method=method, target=target, body=body)
    return {"X-Tidings-Timestamp": str(ts), "X-Tidings-Signature": signature,
            "Content-Type": "application/json"}


def publish_body(customer: str = "cust_0001", *, day: str = DAY,
                 template: str | None = "weekly-digest-v3", queue: str = "weekly-digest",
                 **extra: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"customer_id": customer, "schedule_day": day, **extra}
    if template is not None:
        payload["template"] = template
    return {"queue": queue, "payload": payload}


def publish_headers(api: Api, key: str) -> dict[str, str]:
    return {**api.auth("publish"), "Idempotency-Key": key, "Content-Type": "application/json"}


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@asynccontextmanager
async def open_api(tmp_path: Path, *, members: int = 5, start: float = T0,
                   api: Mapping[str, Any] | None = None, env: Mapping[str, str] = ENV,
                   page_size: int = 5000, max_pages: int = 20,
                   base_url: str = "http://tidings.test",
                   channels: Mapping[str, Any] | None = None, store: str | None = None,
                   campaign: Campaign | None = None) -> AsyncIterator[Api]:
    """Given an API over a fresh store, a fake clock at ``start`` and one token per scope,
    called at ``base_url`` (https where a browser's Secure cookies must come back);
    ``channels`` replaces the two plain channels, e.g. with kinds and templates; ``store``
    the SQLite file, ``campaign`` the digest of ``members``."""
    clock = FakeClock(start)
    runtime = await build_runtime(
        settings_for(tmp_path, api=api, page_size=page_size, max_pages=max_pages,
                     channels=channels, store=store),
        clock=clock, campaigns=[campaign or digest(members)])
    app = create_app(runtime, env=env)
    tokens = {}
    for scope in ("viewer", "operator", "trigger", "publish"):
        text, row = new_token(name=f"{scope} token", scopes=[scope], now=start)
        await runtime.store.api_token_insert(row)
        tokens[scope] = text
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
        try:
            yield Api(runtime=runtime, app=app, client=client, clock=clock, tokens=tokens)
        finally:
            await app.state.ctx.admission.close()
            await runtime.close()


def walk(obj: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (dotted path, value) of a JSON document: for asserting that nothing leaks."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from walk(v, f"{path}[{i}]")
    else:
        yield path, obj
