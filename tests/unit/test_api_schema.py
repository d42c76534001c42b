"""Schemathesis against the served OpenAPI schema: whatever it generates, valid or not,
the API never answers with a server error.

A token holding every scope is sent, so generated requests reach the routes' own
validation instead of stopping at the credential check. The example count is kept
small so the whole run takes seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from apikit import ENV, T0, digest, settings_for
from hypothesis import HealthCheck, given, settings

from tidings.api import create_app
from tidings.api.tokens import hash_secret
from tidings.core.clock import FakeClock
from tidings.runtime import build_runtime
from tidings.stores.base import ApiToken

SECRET = "S" * 43
AUTH = {"Authorization": f"Bearer tid_0123456789ab_{SECRET}"}


async def _runtime(path: Path) -> Any:
    runtime = await build_runtime(settings_for(path), clock=FakeClock(T0),
                                  campaigns=[digest(5)])
    await runtime.store.api_token_insert(ApiToken(
        id="0123456789ab", name="fuzz", scopes=("operator", "publish", "trigger", "viewer"),
        secret_hash=hash_secret(SECRET), created_at=T0))
    return runtime


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # The runtime is built on a loop of its own; the app then runs on schemathesis' ASGI
    # loop. The SQLite store works from any loop (its I/O runs on its own thread).
    runtime = asyncio.run(_runtime(tmp_path_factory.mktemp("schema")))
    app = create_app(runtime, env=ENV, resume_on_start=False)
    try:
        yield schemathesis.openapi.from_asgi("/openapi.json", app)
    finally:
        asyncio.run(runtime.close())


KNOWN = {"campaign": "weekly-digest", "channel": "email", "date": "2026-08-10"}
GROUNDED_PAYLOAD = {"customer_id": "cust_0001", "schedule_day": "2026-08-14",
                    "template": "weekly-digest-v3"}


def check(case: Any, response: Any) -> None:
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}")
    if response.status_code >= 400:
        # Every refusal names the field it is about.
        assert response.json().get("field"), response.text


def test_the_schema_covers_every_operation(api_schema: Any) -> None:
    operations = {f"{op.ok().method.upper()} {op.ok().path}"
                  for op in api_schema.get_all_operations()}

    assert {"POST /v1/trigger/{campaign}", "POST /v1/queue/publish", "GET /v1/status",
            "POST /v1/dead-letters/{channel}/redrive", "GET /metrics"} <= operations


def test_no_generated_request_gets_a_server_error(api_schema: Any) -> None:
    checked = 0
    for result in api_schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=15, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def no_server_error(case: Any) -> None:
            check(case, case.call(headers=AUTH))
            # Again with names that exist, so the generated rest reaches deeper code.
            if case.path_parameters:
                case.path_parameters = {k: KNOWN.get(k, v)
                                        for k, v in case.path_parameters.items()}
            if isinstance(case.body, dict) and isinstance(case.body.get("payload"), dict):
                case.body = {**case.body, "queue": "weekly-digest",
                             "payload": {**case.body["payload"], **GROUNDED_PAYLOAD}}
            check(case, case.call(headers=AUTH))

        no_server_error()
        checked += 1
    assert checked >= 12
