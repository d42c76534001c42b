"""The sandbox provider over HTTP: an aiohttp application around one ``SandboxCore``.

Routes::

    POST /v1/{channel}/messages   send: header Idempotency-Key,
                                  JSON {to, template, data, recipient_id}
    GET  /v1/messages/{key}       lookup by idempotency key (?channel= narrows it)
    GET  /v1/stats                the core's counts
    POST /v1/config               replace the behaviour (422 naming the field on bad input)
    POST /v1/reset                forget counts and accepted keys
    GET  /healthz

With dialects (``tidings sandbox --dialect postmark``), the providers' own routes are
served too, over the same core (``sandbox.dialects``).

aiohttp is used because a fault must be able to hold a request open and to drop a
connection after accepting a message without sending a byte of the reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from tidings.core.clock import SystemClock
from tidings.core.errors import ConfigurationError
from tidings.sandbox.core import AnswerKind, SandboxAnswer, SandboxConfig, SandboxCore
from tidings.sandbox.dialects import STATE_KEY, DialectSettings, install

CORE_KEY = web.AppKey("sandbox_core", SandboxCore)
_JSON = "application/json"


def _json(status: int, payload: dict[str, Any], request_id: str | None = None,
          headers: dict[str, str] | None = None) -> web.Response:
    out = dict(headers or {})
    if request_id is not None:
        out["X-Request-Id"] = request_id
    return web.Response(status=status, body=json.dumps(payload, separators=(",", ":")).encode(),
                        content_type=_JSON, headers=out)


def _body_fields(raw: bytes) -> tuple[str | None, str | None]:
    """``(to, problem)`` from a send body; shape errors name the field."""
    try:
        body = json.loads(raw)
    except ValueError:
        return None, "body: must be a JSON object"
    if not isinstance(body, dict):
        return None, "body: must be a JSON object"
    to = body.get("to")
    if not isinstance(to, str) or not to:
        return None, "to: required, a non-empty string"
    for name in ("template", "recipient_id"):
        if name in body and not isinstance(body[name], str):
            return to, f"{name}: must be a string"
    if "data" in body and not isinstance(body["data"], dict):
        return to, "data: must be an object"
    return to, None


async def _send(request: web.Request) -> web.StreamResponse:
    core = request.app[CORE_KEY]
    raw_key = request.headers.get("Idempotency-Key")
    # Clients percent-encode keys that are not plain ASCII (headers are latin-1).
    key = unquote(raw_key) if raw_key else None
    to, problem = _body_fields(await request.read())
    answer = core.handle(request.match_info["channel"], key, to, problem=problem)
    if answer.kind is AnswerKind.TIMEOUT:
        return await _hang(request, core.config.hang_s)
    if answer.latency_s > 0:
        await asyncio.sleep(answer.latency_s)
    if answer.status is None:
        # Lost response: the message is accepted, the reply never leaves.
        return _drop(request)
    return _reply(answer)


def _reply(answer: SandboxAnswer) -> web.Response:
    status = answer.status
    assert status is not None
    headers = {"X-Request-Id": answer.request_id}
    if answer.receipt is not None:
        body = b'{"id":"%s","status":"accepted"}' % answer.receipt.encode()
    else:
        body = json.dumps({"error": answer.error}, separators=(",", ":")).encode()
        if answer.retry_after is not None:
            headers["Retry-After"] = answer.retry_after
    return web.Response(status=status, body=body, content_type=_JSON, headers=headers)


async def _hang(request: web.Request, hang_s: float) -> web.StreamResponse:
    # The runner cancels this handler when the client disconnects (handler_cancellation),
    # so a client that gives up frees the request at once.
    await asyncio.sleep(hang_s)
    return _drop(request)


def _drop(request: web.Request) -> web.StreamResponse:
    transport = request.transport
    if transport is not None:
        transport.abort()
    # Nothing of this response is written: the connection is already gone.
    return web.Response(status=499)


async def _lookup(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    found = core.lookup(request.match_info["key"], request.query.get("channel"))
    if found is None:
        return _json(404, {"error": "not found"})
    channel, receipt = found
    return _json(200, {"id": receipt, "status": "accepted", "channel": channel})


async def _stats(request: web.Request) -> web.Response:
    stats = request.app[CORE_KEY].stats()
    dialects = request.app.get(STATE_KEY)
    if dialects is not None and dialects.batches:
        # The batch endpoints' requests (the core counts every message they carried).
        stats["batch_requests"] = {"requests": len(dialects.batches),
                                   "messages": sum(dialects.batches),
                                   "largest": max(dialects.batches)}
    return _json(200, stats)


async def _configure(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    try:
        config = SandboxConfig.from_json(await request.read())
    except ConfigurationError as exc:
        return _json(422, {"error": str(exc), "field": exc.field})
    core.configure(config)
    return _json(200, config.to_dict())


async def _reset(request: web.Request) -> web.Response:
    request.app[CORE_KEY].reset()
    return _json(200, {"status": "reset"})


async def _health(request: web.Request) -> web.Response:
    return _json(200, {"status": "ok"})


def create_app(core: SandboxCore, dialects: DialectSettings | None = None, *,
               now: Callable[[], float]) -> web.Application:
    """The aiohttp application serving ``core`` (and the routes of ``dialects``, whose
    times are read from ``now``)."""
    app = web.Application()
    app[CORE_KEY] = core
    if dialects is not None and dialects.dialects:
        install(app, core, dialects, now)
    app.router.add_post("/v1/{channel}/messages", _send)
    app.router.add_get("/v1/messages/{key:.+}", _lookup)
    app.router.add_get("/v1/stats", _stats)
    app.router.add_post("/v1/config", _configure)
    app.router.add_post("/v1/reset", _reset)
    app.router.add_get("/healthz", _health)
    return app


class SandboxServer:
    """A running sandbox: its core, its address, and ``close()``."""

    def __init__(self, runner: web.AppRunner, core: SandboxCore, host: str, port: int) -> None:
        self.runner = runner
        self.core = core
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        await self.runner.cleanup()

    async def __aenter__(self) -> SandboxServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def serve(config: SandboxConfig | None = None, host: str = "127.0.0.1", port: int = 0, *,
                seed: int = 0, core: SandboxCore | None = None,
                dialects: DialectSettings | None = None,
                clock_offset_s: float = 0.0) -> SandboxServer:
    """Start serving on ``host:port`` (port 0 picks a free one) and return at once.

    Pass ``core`` to share or control one (e.g. with an injected ``now``); otherwise
    a core is built from ``config`` on the system clock, shifted by ``clock_offset_s``
    (the demo's simulated time). ``dialects`` adds the providers' own routes.
    """
    clock = SystemClock(clock_offset_s)
    if core is None:
        core = SandboxCore(config, now=clock.now, seed=seed)
    elif config is not None:
        core.configure(config)
    # No access log: at thousands of requests per second it costs more than the handler.
    # A short shutdown_timeout: requests held by a timeout fault must not delay a stop.
    runner = web.AppRunner(create_app(core, dialects, now=clock.now), access_log=None,
                           handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    # The bound port, which is the real one when port 0 asked the OS to pick.
    return SandboxServer(runner, core, host, int(runner.addresses[0][1]))


async def run_forever(host: str, port: int, config: SandboxConfig | None = None, *,
                      seed: int = 0, ready: Callable[[SandboxServer], None] | None = None,
                      dialects: DialectSettings | None = None,
                      clock_offset_s: float = 0.0) -> None:
    """Serve until SIGTERM or SIGINT, calling ``ready`` once listening."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # not on Windows event loops
            loop.add_signal_handler(signum, stop.set)
    server = await serve(config, host, port, seed=seed, dialects=dialects,
                         clock_offset_s=clock_offset_s)
    try:
        if ready is not None:
            ready(server)
        await stop.wait()
    finally:
        await server.close()


def load_config(path: str | None) -> SandboxConfig:
    """Read a sandbox config from a JSON or TOML file (defaults when ``path`` is None)."""
    if path is None:
        return SandboxConfig()
    file = Path(path)
    try:
        text = file.read_bytes()
    except OSError as exc:
        raise ConfigurationError("config", f"cannot read {path}: {exc.strerror}") from None
    if file.suffix == ".toml":
        try:
            return SandboxConfig.from_dict(tomllib.loads(text.decode()))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigurationError("config", f"{path} is not TOML: {exc}") from None
    return SandboxConfig.from_json(text)


def main_sandbox(host: str, port: int, config_path: str | None, seed: int, *,
                 dialects: DialectSettings | None = None, clock_offset_s: float = 0.0) -> None:
    """The ``tidings sandbox`` command: print the listening URL, serve until signalled."""
    config = load_config(config_path)

    def announce(server: SandboxServer) -> None:
        print(f"sandbox listening on {server.url}", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_forever(host, port, config, seed=seed, ready=announce,
                                dialects=dialects, clock_offset_s=clock_offset_s))
    sys.stdout.flush()
