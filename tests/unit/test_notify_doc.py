"""The python example of docs/notify.md ("A key is an identity: repeats and conflicts")
runs as written, against a runtime on SQLite, and leaves the first request's intent."""

from __future__ import annotations

import ast
import json
import types
from pathlib import Path

from support.readme import DOCS, of
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.runtime import build_runtime

SECTION = "A key is an identity: repeats and conflicts"


async def test_the_repeats_example_runs(tmp_path: Path) -> None:
    [snippet] = of("python", SECTION, DOCS / "notify.md")
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 'doc.db'}",
                               "channels": {"email": {"provider": {"kind": "sandbox-twin"}}}})
    async with await build_runtime(settings, clock=FakeClock()) as runtime:
        code = compile(snippet.text, "docs/notify.md", "exec",
                       flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, {"runtime": runtime})  # the documentation's own code
        if isinstance(result, types.CoroutineType):
            await result
        intent = await runtime.store.intent_get("order-4821:email")
        assert intent is not None and json.loads(intent.data) == {"total": "12.50", "items": 2}
        counts = await runtime.store.intent_counts()
        assert sum(n for per in counts.values() for n in per.values()) == 1
