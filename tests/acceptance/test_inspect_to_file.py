"""``tidings inspect`` with its output sent to a file: lines as long as they are, never a
table folded into columns two characters wide."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidings.config.settings import Settings
from tidings.runtime import build_runtime

TIDINGS = [sys.executable, "-m", "tidings"]
#: A worker id as a host in a cloud names itself: longer than any 80-column cell.
WORKER = "ip-10-0-12-34.eu-west-1.compute.internal:28096:email:cc3532"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """Settings whose one intent has been sent, by a worker with a long id."""
    path = tmp_path / "tidings.toml"
    path.write_text(f'store = "sqlite:///{tmp_path / "t.db"}"\n'
                    '[channels.email]\nprovider = {kind = "sandbox-twin"}\n')

    async def deliver() -> None:
        async with await build_runtime(Settings.load(path)) as runtime:
            await runtime.notify(key="order-4821", recipient={"id": "c1", "email":
                                                              "c1@example.com"},
                                 channels=["email"], template="receipt/v1")
            await runtime.worker("email", worker_id=WORKER).run_once()

    asyncio.run(deliver())
    return path


def inspect_into(out: Path, config: Path, **env: str) -> str:
    """``tidings inspect order-4821`` with stdout redirected to ``out``; what it wrote."""
    environment = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | env
    with out.open("w") as stdout:
        done = subprocess.run([*TIDINGS, "inspect", "order-4821", "--config", str(config)],
                              stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              text=True, timeout=60, check=False, env=environment)
    assert done.returncode == 0, done.stderr
    return out.read_text()


def test_inspect_redirected_to_a_file_keeps_every_cell_on_its_line(
        config: Path, tmp_path: Path) -> None:
    text = inspect_into(tmp_path / "out.txt", config)

    assert "state      accepted" in text
    header = next(line for line in text.splitlines() if "provider request id" in line)
    assert "recipient / detail" in header and "worker" in header
    accepted = [line for line in text.splitlines() if "│ accepted" in line]
    assert len(accepted) == 1 and WORKER in accepted[0]
    # One line per event and a line each for the borders and the header: nothing folded.
    table = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert len(table) == 4 + 3  # enqueued, claimed, accepted


def test_inspect_told_80_columns_prints_a_block_per_event_instead_of_folding(
        config: Path, tmp_path: Path) -> None:
    text = inspect_into(tmp_path / "out.txt", config, COLUMNS="80")

    lines = text.splitlines()
    assert not any(line[:1] in "┏┃│" for line in lines)  # no table squeezed into 80
    assert sum(f"worker               {WORKER}" in line for line in lines) == 2
    assert any(line.startswith("  provider request id  req_") for line in lines)
    assert any("accepted  accepted  try 1" in line for line in lines)
