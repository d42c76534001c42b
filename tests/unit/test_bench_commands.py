"""Every benchmark bench/run.py's docstring shows is a command its parser takes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"

LIST_COMMANDS = """
import sys
sys.path.insert(0, {bench!r})
import run
for action in run.parser()._subparsers._group_actions:
    print(" ".join(sorted(action.choices)))
"""


def test_every_benchmark_the_usage_shows_is_a_command() -> None:
    shown = set(re.findall(r"^    python bench/run\.py ([a-z-]+)",
                           (BENCH / "run.py").read_text(), re.M))
    result = subprocess.run([sys.executable, "-c", LIST_COMMANDS.format(bench=str(BENCH))],
                            capture_output=True, text=True, timeout=120, check=False,
                            cwd=BENCH)
    assert result.returncode == 0, result.stderr
    commands = set(result.stdout.split())
    assert shown and shown == commands, (shown, commands)
