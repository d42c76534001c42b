"""The ``tidings`` command line as the acceptance tests run it: a real process."""

from __future__ import annotations

import json
import subprocess
import sys
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
