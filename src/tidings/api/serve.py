"""Run the API under uvicorn on the caller's event loop (the runtime's loop)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from collections.abc import Iterator, Mapping
from typing import Any, cast

import uvicorn

from tidings.api.app import create_app
from tidings.core.errors import ConfigurationError
from tidings.processes.gc_tuning import API_GC_YOUNG, tune_for_serving
from tidings.processes.service import on_signals
from tidings.runtime import Runtime

log = logging.getLogger("tidings.api")


class _Server(uvicorn.Server):
    """uvicorn, minus its own signal handling: it re-raises SIGTERM after a graceful
    shutdown, which would kill the process before the runtime is closed. The signals
    are handled on the loop instead (``tidings.processes.service.on_signals``), as every other
    tidings service does."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            # One line on stderr with the bound address (port 0 picks a free one).
            bound = [s.getsockname() for srv in self.servers for s in srv.sockets]
            host, port = bound[0][:2] if bound else (self.config.host, self.config.port)
            tune_for_serving(API_GC_YOUNG)
            print(f"tidings api listening on http://{host}:{port}", file=sys.stderr,
                  flush=True)
            log.info("api listening", extra={"host": host, "port": port})


class _OneWrite:
    """A connection's transport whose writes of one loop step leave in one ``send``:
    uvicorn writes a response's status line and headers, then its body, each at once, so
    every answer cost two system calls and two packets (a tenth of an API process's
    CPU under 200 connections, and as many wake-ups of the client). Pending bytes go
    out at the end of the step, and always before the connection is closed or handed
    to another protocol."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def _flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._flush()
        self._transport.set_protocol(protocol)

    def __getattr__(self, name: str) -> Any:  # everything else is the transport's own
        return getattr(self._transport, name)


def http_protocol() -> type[asyncio.Protocol] | None:
    """uvicorn's httptools protocol with ``_OneWrite`` transports (None without
    httptools: uvicorn's default then)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is a dependency where it builds
        return None

    class OneWriteProtocol(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.transport = cast(asyncio.Transport, _OneWrite(transport, self.loop))

    return OneWriteProtocol


def use_uvloop() -> bool:
    """Run this process's event loops on uvloop where it is installed (the API process
    only: a faster loop for a server that is CPU-bound under many connections)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def shared_socket(host: str, port: int, *, reuse_port: bool = True) -> socket.socket:
    """A socket bound to ``host:port`` with ``SO_REUSEPORT``: every API process of one
    ``tidings api --processes N`` binds its own to the same port and the kernel spreads
    the connections over them (Linux). Port 0 picks a free one (``getsockname``).
    Without ``reuse_port`` the port is this process's alone."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_api(runtime: Runtime, *, host: str, port: int,
                    env: Mapping[str, str] | None = None, reuse_port: bool = False) -> None:
    """Serve until SIGTERM/SIGINT; background admissions stop with the server (their
    committed pages stay admitted and the next start resumes them). With ``reuse_port``
    the port is shared with the other processes of ``tidings api --processes N``."""
    app = create_app(runtime, env=env)
    # log_config=None: uvicorn keeps its hands off logging, so its lines go through the
    # process's handler (tidings.core.logs) like every other; requests are logged by
    # tidings.api.access (route templates, never raw paths, bodies or headers).
    protocol = http_protocol()
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                    access_log=False, lifespan="on", log_config=None,
                                    http=protocol or "auto"))

    def stop() -> None:
        server.should_exit = True

    on_signals(stop)
    try:
        # Bound here rather than by uvicorn, which logs a port in use and exits 1.
        sock = shared_socket(host, port, reuse_port=reuse_port)
    except OSError as exc:
        raise ConfigurationError("port", f"cannot listen on {host}:{port}: "
                                         f"{exc.strerror or exc}") from None
    with sock:
        await server.serve(sockets=[sock])
