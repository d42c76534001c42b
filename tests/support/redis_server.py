"""A Redis server of one test, on a free port, that the test may stop and start.

The shared server on 6379 keeps nothing on disk and serves everyone, so a test that
restarts Redis runs its own: ``redis-server`` with an append-only file fsynced on every
write (what a deployment that must not lose its queue runs), in the test's folder.
``stop`` shuts it down (SIGTERM: it finishes the file), ``kill`` ends it with SIGKILL,
``start`` brings it back on the same port and folder.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not installed (Debian package redis-server)")
        self.binary = binary
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 20.0) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with (self.folder / "redis.log").open("ab") as log:  # the child keeps its own copy
            self.process = subprocess.Popen(
                [self.binary, "--bind", "127.0.0.1", "--port", str(self.port),
                 "--dir", str(self.folder), "--save", "", "--appendonly", "yes",
                 "--appendfsync", "always", "--daemonize", "no"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.BusyLoadingError:
                    pass
                except redis.ConnectionError:
                    if self.process.poll() is not None:
                        raise RuntimeError(
                            f"redis-server exited: see {self.folder}/redis.log") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on {self.port} did not answer")
                time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        """A clean shutdown: the server finishes its append-only file."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)
        self.process = None

    def wipe(self) -> None:
        """Forget everything the stopped server kept (its append-only files)."""
        assert self.process is None, "stop or kill the server first"
        for path in self.folder.iterdir():
            if path.name != "redis.log":
                shutil.rmtree(path) if path.is_dir() else path.unlink()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=20)
        self.process = None
