"""examples/fastapi_sqlalchemy on the real PostgreSQL: a placed order is delivered once
(a worker drains the queue into the sandbox, whose counts are the witness), a refused
one leaves no order and no intent (needs a server: skips without one, fails under CI)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import httpx
import psycopg
import pytest

pytest.importorskip("sqlalchemy")

from support.sandbox_witness import deliver
from tidings import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_sqlalchemy"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_fastapi_sqlalchemy",
                                                  EXAMPLE / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations by module
    spec.loader.exec_module(module)
    return module


def order(order_id: int, quantity: int) -> dict[str, object]:
    return {"id": order_id, "customer_id": "73", "email": "ada@example.com",
            "lines": [{"sku": "tea", "quantity": 1}, {"sku": "cake", "quantity": quantity}]}


async def test_an_order_and_its_notification_commit_together_or_not_at_all(
        pg_url: str) -> None:
    app = example().create_app(pg_url)
    # The lifespan as uvicorn drives it, and requests through the ASGI app itself (its
    # plain def endpoint runs in a thread, as under uvicorn).
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://shop") as http:
        placed = await http.post("/orders", json=order(1, 2))
        assert placed.status_code == 201, placed.text
        assert placed.json() == {"order": 1, "notified": ["order-1:email"]}
        refused = await http.post("/orders", json=order(2, 0))
        assert refused.status_code == 409 and "quantity_positive" in refused.text
        again = await http.post("/orders", json=order(1, 2))
        assert again.status_code == 409  # the same order twice: refused by its key
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT id FROM shop_orders").fetchall() == [(1,)]
        assert conn.execute("SELECT count(*) FROM shop_order_lines").fetchone() == (2,)
        assert conn.execute("SELECT key FROM intents").fetchall() == [("order-1:email",)]
    settings = Settings.parse({"store": pg_url, "channels": {"email": {}}})
    stats, sandbox = await deliver(settings)
    assert (stats["accepted"], stats["accepted_keys"]) == (1, 1)
    assert sandbox.lookup("order-1:email") is not None
    assert sandbox.lookup("order-2:email") is None


def test_the_examples_own_tests_pass_with_tidings_testing(pg_url: str) -> None:
    """The example's tests (tidings.testing's plug-in, assert_notified, the outbox), run
    as a user runs them: pytest on the example, its DATABASE_URL a throw-away one."""
    import os
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(EXAMPLE)], env={**os.environ, "DATABASE_URL": pg_url},
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "2 passed" in run.stdout
