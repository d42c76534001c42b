"""``tidings`` as real processes for acceptance tests: a token made by the CLI, and
``tidings api`` served on a free port until the test is done."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
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
    stopped gracefully (exit 0, runtime closed).

    Its log is read as it is written (kept for the failure message): a pipe nobody
    reads fills after some hundred requests' access lines, and the server then blocks
    on its next log line."""
    port = free_port()
    process = subprocess.Popen([*TIDINGS, "api", "--config", str(config), "--port", str(port)],
                               stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    assert process.stderr is not None
    log: list[str] = []
    reader = threading.Thread(target=log.extend, args=(process.stderr,), daemon=True)
    try:
        line = process.stderr.readline()  # blocks until the server is bound (or died)
        assert "listening on http://127.0.0.1:" in line, line + process.stderr.read()
        reader.start()
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=20)
            if reader.is_alive():
                reader.join(timeout=5)
            assert code == 0, f"tidings api exited {code}:\n{''.join(log[-40:])}"
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stderr is not None:
                process.stderr.close()
