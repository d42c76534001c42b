"""A PostgreSQL server of a test's own, which the test may restart as an operator (or a
crash) restarts a server: the shared server of ``tests/conftest.py`` serves every other
test of the run, so it is never restarted.

``initdb`` makes a cluster in a folder of its own under the system's temporary folder
(owned by the ``postgres`` user when the tests run as root, which ``initdb`` refuses),
listening on loopback on a free port, with ``fsync`` off: a restart here is of the
server process, never of the machine, so the page cache keeps what was written.
Without the server's programs (``pg_config --bindir``) the tests that need it skip
with the reason, and fail under ``CI``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.crm import free_port


def _bindir() -> Path | None:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                           check=False).stdout.strip()
    bindir = Path(found) if found else None
    return bindir if bindir is not None and (bindir / "initdb").exists() else None


def _need(reason: str) -> None:
    message = f"a private PostgreSQL server cannot be made: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@dataclass
class PrivateServer:
    """A running server of this test alone: ``url(database)``, ``restart()``."""

    bindir: Path
    folder: Path
    port: int
    user: str | None  # the user the server runs as, when not this process's

    def _as_server(self, *args: str) -> list[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        return ["runuser", "-u", self.user, "--", *command] if self.user else command

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _ctl(self, *args: str, timeout: float = 60) -> None:
        done = subprocess.run(self._as_server("pg_ctl", "-D", str(self.folder / "data"),
                                              "-w", "-t", "30", *args),
                              capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            log = self.folder / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {done.stderr}{tail}")

    def start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-c unix_socket_directories={self.folder} -c fsync=off "
                   "-c shared_buffers=16MB -c max_connections=40")
        self._ctl("-l", str(self.folder / "server.log"), "-o", options, "start")

    def restart(self, mode: str = "immediate") -> None:
        """Stop the server (``immediate``: as a crash stops it, every session cut and
        the next start recovering from the WAL; ``fast``: as an operator's restart),
        then start it again on the same port."""
        self._ctl("-m", mode, "stop")
        self.start()

    def stop(self) -> None:
        self._ctl("-m", "immediate", "stop")


@contextmanager
def private_server() -> Iterator[PrivateServer]:
    """A fresh cluster, started; stopped and removed on the way out."""
    bindir = _bindir()
    if bindir is None:
        _need("no initdb (pg_config --bindir); install the PostgreSQL server package")
    assert bindir is not None
    user: str | None = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            _need("running as root, and there is no postgres user to run initdb as")
        user = "postgres"
    folder = Path(tempfile.mkdtemp(prefix="tidings-private-pg-"))
    try:
        if user is not None:
            shutil.chown(folder, user=user)
        server = PrivateServer(bindir=bindir, folder=folder, port=free_port(), user=user)
        made = subprocess.run(server._as_server(
            "initdb", "-D", str(folder / "data"), "-U", "postgres", "--auth=trust",
            "--no-sync", "-E", "UTF8", "--locale=C"),
            capture_output=True, text=True, timeout=120, check=False)
        if made.returncode != 0:
            _need(f"initdb failed: {made.stderr.strip()[-500:]}")
        server.start()
        try:
            yield server
        finally:
            with contextlib.suppress(RuntimeError):  # already down: nothing to stop
                server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
