"""``hidden``: a library hidden from one import, and importable again after it; the
imports of structlog and httpx leave rich, pygments and click unloaded."""

from __future__ import annotations

import subprocess
import sys

from tidings.core.lean_imports import hidden


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


def test_a_hidden_name_cannot_be_imported_inside_and_can_after() -> None:
    out = run("import sys\n"
              "from tidings.core.lean_imports import hidden\n"
              "with hidden('rich', 'pygments'):\n"
              "    for name in ('rich', 'pygments'):\n"
              "        try:\n"
              "            __import__(name)\n"
              "            print('imported', name)\n"
              "        except ImportError:\n"
              "            print('hidden', name)\n"
              "import rich.console, pygments\n"
              "print('after', 'rich' in sys.modules, 'pygments' in sys.modules)\n")
    assert out.splitlines() == ["hidden rich", "hidden pygments", "after True True"]


def test_structlog_and_httpx_come_without_rich_pygments_or_click() -> None:
    out = run("import sys, tidings.core.logs, structlog.dev\n"
              "from tidings.providers.httpx_lean import httpx\n"
              "print(sorted(m for m in ('rich', 'pygments', 'click', 'attr')"
              " if m in sys.modules), structlog.dev.rich is None, httpx.AsyncClient.__name__)\n")
    assert out == "[] True AsyncClient"


def test_a_name_already_imported_is_left_alone() -> None:
    import json

    with hidden("json"):
        assert sys.modules["json"] is json
        import json as again
        assert again is json
    assert sys.modules["json"] is json


def test_an_error_inside_still_lets_the_name_import_after() -> None:
    out = run("from tidings.core.lean_imports import hidden\n"
              "try:\n"
              "    with hidden('rich'):\n"
              "        raise KeyError('x')\n"
              "except KeyError:\n"
              "    pass\n"
              "import rich\n"
              "print('ok')\n")
    assert out == "ok"


def test_the_token_commands_import_no_web_framework_and_the_api_names_still_resolve() -> None:
    out = run("import sys, tidings.api.tokens\n"
              "print('fastapi' in sys.modules)\n"
              "import tidings.api\n"
              "print(tidings.api.Scope.__name__, callable(tidings.api.create_app),"
              " 'fastapi' in sys.modules)\n")
    assert out.splitlines() == ["False", "Scope True True"]
