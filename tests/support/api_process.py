"""``tidings`` as real processes for acceptance tests: a token made by the CLI, and
``tidings api`` served on a free port until the test is done."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from support.crm import free_port

TIDINGS = [sys.executable, "-m", "tidings"]


def create_token(config: Path, scope: str, *, name: str | None = None,
                 expires_in: str | None = None) -> str:
    """A new API token holding ``scope`` (refused after ``expires_in``, e.g. ``1h``, if
    given), made by ``tidings token create``."""
    named = ["--name", name] if name is not None else []
    expiring = ["--expires-in", expires_in] if expires_in is not None else []
    made = subprocess.run([*TIDINGS, "token", "create", "--scope", scope, *named, *expiring,
                           "--json", "--config", str(config)],
                          capture_output=True, text=True, timeout=60, check=True)
    token: str = json.loads(made.stdout)["token"]
    return token


@contextmanager
def api_server(config: Path, env: Mapping[str, str]) -> Iterator[str]:
    """``tidings api`` with ``env`` added to this process's environment; yields its base
    URL once it listens, and on the way out stops it by SIGTERM and checks that it
    stopped gracefully (exit 0, runtime closed)."""
    port = free_port()
    process = subprocess.Popen([*TIDINGS, "api", "--config", str(config), "--port", str(port)],
                               stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # blocks until the server is bound (or died)
        assert "listening on http://127.0.0.1:" in line, line + process.stderr.read()
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(timeout=20) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stderr is not None:
                process.stderr.close()
