"""docs/alerts.yml: valid Prometheus rules (promtool, where it is installed; CI installs
it) over metric names that tidings' /metrics really exposes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from apikit import open_api

RULES = Path(__file__).parents[2] / "docs" / "alerts.yml"


def rule_metrics() -> set[str]:
    doc = yaml.safe_load(RULES.read_text())
    exprs = [rule["expr"] for group in doc["groups"] for rule in group["rules"]]
    return {name for expr in exprs for name in re.findall(r"\btidings_[a-z_]+\b", expr)}


def test_promtool_accepts_the_rules() -> None:
    promtool = os.environ.get("TIDINGS_PROMTOOL") or shutil.which("promtool")
    if promtool is None:
        message = "promtool is not installed (Debian package prometheus); .ci/run provides it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    result = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


async def test_every_metric_the_rules_read_is_exposed(tmp_path: Path) -> None:
    async with open_api(tmp_path) as api:
        text = (await api.client.get("/metrics", headers=api.auth("viewer"))).text
    exposed: set[str] = set()
    for line in text.splitlines():
        match = re.match(r"# TYPE (tidings_[a-z_]+) (\w+)", line)
        if match:
            name, kind = match.groups()
            # A counter's samples end in _total whether its TYPE line says so or not.
            exposed |= {name, f"{name.removesuffix('_total')}_total"} if kind == "counter" \
                else {name}
    wanted = rule_metrics()
    assert len(wanted) >= 8
    assert wanted <= exposed, sorted(wanted - exposed)
