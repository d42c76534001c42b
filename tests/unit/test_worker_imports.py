"""What a worker process imports before its first send: a worker restarted after a
crash sends nothing until it has imported them, so what it never uses stays out (the
web framework, templates, cron, the webhook verifiers, other providers' adapters)."""

from __future__ import annotations

import json
import subprocess
import sys

#: Loaded only by the processes that use them, never by a worker of a channel that
#: renders no templates and sends through the sandbox.
NOT_FOR_A_WORKER = ("fastapi", "starlette", "uvicorn", "jinja2", "croniter",
                    "email_validator", "cryptography", "prometheus_client", "psycopg",
                    "aiosmtplib", "tidings.api", "tidings.delivery.templates",
                    "tidings.sandbox.server",
                    "tidings.providers.smtp", "tidings.providers.twilio",
                    "tidings.providers.sendgrid", "tidings.providers.postmark",
                    "tidings.operate.operations",
                    # structlog and httpx would import these for what tidings does not
                    # use (tidings.core.lean_imports); the command line's tables import rich
                    "rich", "pygments", "click")

#: What ``tidings worker`` on SQLite with the sandbox provider imports to its first send.
WORKER_PATH = ("tidings.cli", "tidings.processes.service", "tidings.stores.sqlite",
               "tidings.stores.sqlite_liveness", "tidings.transports.sqlite",
               "tidings.providers.sandbox", "tidings.recovery.reconciler",
               "tidings.config.settings")


def loaded_after(*modules: str) -> list[str]:
    code = ("import json, sys\n"
            + "".join(f"import {m}\n" for m in modules)
            + f"print(json.dumps(sorted(m for m in {list(NOT_FOR_A_WORKER)!r} "
              "if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def test_a_worker_imports_nothing_it_does_not_use() -> None:
    assert loaded_after(*WORKER_PATH) == []


def test_reading_settings_imports_no_provider_adapter() -> None:
    loaded = loaded_after("tidings.config.settings")
    assert loaded == []


def test_the_package_imports_its_names_when_first_used() -> None:
    code = ("import sys, tidings\n"
            "before = 'tidings.runtime' in sys.modules\n"
            "tidings.build_runtime\n"
            "print(before, 'tidings.runtime' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["False", "True"]
