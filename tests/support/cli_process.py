"""The ``tidings`` command line as the acceptance tests run it: a real process."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

TIDINGS = [sys.executable, "-m", "tidings"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``tidings ARGS…``, its output captured, whatever its exit code."""
    return subprocess.run([*TIDINGS, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def ok_json(*args: str) -> Any:
    """``tidings ARGS… --json``, which must succeed; its JSON output."""
    result = run(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def migrated(config: Path) -> None:
    """The schema of ``config``'s store, made in this process the way ``tidings db
    migrate --config`` makes it (``migrate_store``): a fixture's set-up, which its tests
    do not check, without a process start each. ``tests/acceptance/test_cli.py`` runs
    the command itself. (On a thread of its own: a fixture may run inside a test's loop.)"""
    from tidings.config.settings import Settings
    from tidings.processes.commands import migrate_store

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, migrate_store(Settings.load(config))).result()
