"""The README's "Your first campaign" and the tutorial it shortens
(docs/first-campaign.md), each run as written: its ``sh`` blocks in order, as real
processes in an empty folder, until the sandbox (not tidings' ledger) has accepted the
two emails the page promises, then the dashboard's API answers the token it made.

The one liberty taken: the ports. ``tidings init`` gets ``--sandbox-port``, ``tidings
sandbox`` and ``tidings api`` ``--port``, with free ones, so the run cannot meet another
process on this machine on 8025 or 8080 (tests/acceptance/test_init.py runs the printed
commands with no option at all).
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from support.crm import free_port
from support.readme import README, TUTORIAL, first_campaign

TIDINGS = [sys.executable, "-m", "tidings"]
LONG_RUNNING = ("sandbox", "scheduler", "worker", "api")
EMAILS = 2  # "two emails go out: Ada's and Grace's"


def get(url: str, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}
                                     if token else {})
    with urllib.request.urlopen(request, timeout=10) as reply:
        body = reply.read()
        kind = reply.headers.get("content-type", "")
        return reply.status, json.loads(body) if "json" in kind else body.decode()


def sandbox_accepted(port: int) -> int:
    try:
        _, stats = get(f"http://127.0.0.1:{port}/v1/stats")
    except OSError:
        return 0
    accepted: int = (stats["channels"].get("email") or {}).get("accepted_keys", 0)
    return accepted


@pytest.mark.parametrize("page", [README, TUTORIAL], ids=["README", "tutorial"])
def test_your_first_campaign_works_as_written(page: Path, tmp_path: Path) -> None:
    sandbox_port, api_port = free_port(), free_port()
    cwd = tmp_path
    background: list[subprocess.Popen[str]] = []
    printed: dict[str, str] = {}
    try:
        for block in first_campaign(page):
            for line in block.text.splitlines():
                words = shlex.split(line, comments=True)
                if not words:
                    continue
                if words[0] == "cd":
                    cwd = cwd / words[1]
                    continue
                assert words[0] == "tidings", line
                args = words[1:]
                if args[0] == "init":
                    args += ["--sandbox-port", str(sandbox_port)]
                if args[0] in ("sandbox", "api"):
                    args += ["--port", str(sandbox_port if args[0] == "sandbox" else api_port)]
                if args[0] in LONG_RUNNING:
                    background.append(started(args, cwd))
                    if args[0] == "worker":
                        wait_for_the_emails(sandbox_port, background)
                    continue
                done = subprocess.run([*TIDINGS, *args], cwd=cwd, capture_output=True,
                                      text=True, timeout=60, check=False)
                assert done.returncode == 0, f"{line}: {done.stderr}"
                printed[" ".join(args[:2])] = done.stdout
        assert "accepted   yes" in printed["inspect --recipient"]
        token = printed["token create"].strip().splitlines()[-1]
        base = f"http://127.0.0.1:{api_port}"
        assert get(f"{base}/ui/login")[0] == 200
        status, body = get(f"{base}/v1/status", token)
        assert status == 200 and body["channels"]["email"]["accepted"] == EMAILS
    finally:
        for process in background:
            process.send_signal(signal.SIGTERM)
        errors = [process.communicate(timeout=30)[1] for process in background]
    assert [p.returncode for p in background] == [0] * len(background), errors


def started(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """A long-running command, once it is ready for the next one."""
    process = subprocess.Popen([*TIDINGS, *args], cwd=cwd, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # The sandbox prints its URL on stdout, the API on stderr, once they listen.
    stream = {"sandbox": process.stdout, "api": process.stderr}.get(args[0])
    if stream is not None:
        line = stream.readline()
        assert "listening on http://127.0.0.1:" in line, line
    return process


def wait_for_the_emails(port: int, running: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + 60
    while sandbox_accepted(port) < EMAILS and time.monotonic() < deadline:
        assert all(p.poll() is None for p in running), [p.args for p in running]
        time.sleep(0.2)
    assert sandbox_accepted(port) == EMAILS
