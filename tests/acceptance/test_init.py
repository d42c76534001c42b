"""The first hour: ``tidings init`` in an empty folder, then the commands it prints, as
real processes, until the sandbox (not tidings' own ledger) has accepted the delivery."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from support.crm import free_port

TIDINGS = [sys.executable, "-m", "tidings"]
#: The sample's active customers with an email address (cust_003 is inactive).
EMAIL_DELIVERIES = 2


def printed_commands(stdout: str) -> list[str]:
    """The commands ``tidings init`` tells the user to run, as printed."""
    return [line.split("  #")[0].strip() for line in stdout.splitlines()
            if line.startswith("  tidings ")]


def email_accepted(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats", timeout=5) as reply:
            stats = json.load(reply)
    except OSError:
        return None  # not listening yet
    channel = stats["channels"].get("email") or {}
    accepted: int = channel.get("accepted_keys", 0)
    return accepted


def test_init_then_the_printed_commands_deliver_the_first_campaign(tmp_path: Path) -> None:
    # A free port keeps this run apart from anything else on the machine; the default
    # (8025) prints `tidings sandbox` with no option.
    port = free_port()
    init = subprocess.run([*TIDINGS, "init", "--sandbox-port", str(port)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert init.returncode == 0, init.stderr
    commands = printed_commands(init.stdout)
    assert commands == [f"tidings sandbox --port {port}", "tidings scheduler",
                        "tidings worker --channel email"]

    processes = [subprocess.Popen([*TIDINGS, *shlex.split(command)[1:]], cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for command in commands]
    try:
        deadline = time.monotonic() + 60
        while (email_accepted(port) or 0) < EMAIL_DELIVERIES and time.monotonic() < deadline:
            dead = [p for p in processes if p.poll() is not None]
            assert not dead, [(p.args[3:], p.returncode, p.communicate()[1][-2000:]) for p in dead]
            time.sleep(0.2)
        assert email_accepted(port) == EMAIL_DELIVERIES
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        errors = [process.communicate(timeout=30)[1] for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0], errors
    status = subprocess.run([*TIDINGS, "status", "--json"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60, check=False)
    assert json.loads(status.stdout)["channels"]["email"]["accepted"] == EMAIL_DELIVERIES


def test_init_does_not_overwrite_a_settings_file(tmp_path: Path) -> None:
    (tmp_path / "tidings.toml").write_text("# mine\n")
    again = subprocess.run([*TIDINGS, "init"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60, check=False)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert (tmp_path / "tidings.toml").read_text() == "# mine\n"
