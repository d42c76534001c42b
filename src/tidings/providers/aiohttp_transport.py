"""An httpx transport that sends with an aiohttp session.

Every HTTP provider adapter dispatches through it by default (and accepts an injected
``httpx.AsyncClient`` instead, e.g. over ``httpx.MockTransport`` in tests). aiohttp
errors are re-raised as the httpx errors they correspond to, so an adapter maps one
exception family whichever transport is underneath.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from tidings.providers.httpx_lean import httpx

#: ``SO_LINGER`` on with a zero timeout: closing the socket resets the connection and
#: drops whatever the kernel has not delivered yet.
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)


def reset_on_close_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """A provider connection's socket, which is reset when closed, never drained.

    A request whose answer the client gave up on (a timeout, a cancelled send, a killed
    process) must not reach the provider later: with an ordinary close the kernel keeps
    retransmitting the unacknowledged bytes, so after a partition heals a send that was
    settled as not found, and sent again, can still arrive: a duplicate. Reset on close,
    a request either reached the provider while the client waited or never does, which
    bounds how long after its start a send can land (``Worker``'s send deadline)."""
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=kind, proto=proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    return sock


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends with an aiohttp session.

    httpcore's pool rescans every connection for every request (encode/httpx#3215),
    so with 64 sends in flight a stock ``httpx.AsyncClient`` manages a few hundred
    requests per second against the sandbox; this transport does thousands. aiohttp
    errors are raised as the httpx errors they correspond to, so callers map one
    family whichever transport is underneath.
    """

    def __init__(self, *, max_connections: int = 200, keepalive_s: float = 30.0) -> None:
        self._max_connections = max_connections
        self._keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        # Made on first use: an aiohttp session belongs to the loop that creates it.
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections,
                                             limit_per_host=self._max_connections,
                                             keepalive_timeout=self._keepalive_s,
                                             socket_factory=reset_on_close_socket)
            # httpx decodes Content-Encoding itself; aiohttp must hand over raw bytes.
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                                  cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(total=None, connect=timeouts.get("pool"),
                                        sock_connect=timeouts.get("connect"),
                                        sock_read=timeouts.get("read"))
        try:
            async with self._get_session().request(
                request.method, str(request.url), headers=request.headers.multi_items(),
                data=await request.aread(), allow_redirects=False, timeout=timeout,
            ) as answer:
                content = await answer.read()
                return httpx.Response(answer.status, headers=answer.raw_headers,
                                      content=content, request=request)
        except aiohttp.ClientError as exc:
            raise _as_httpx_error(exc, request) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class HttpDispatch:
    """How an HTTP adapter sends: through an ``AiohttpTransport`` of its own (closed by
    ``aclose``), or through an injected ``httpx.AsyncClient`` (left open); either way
    with the adapter's timeout in ``extensions``, to pass on every request."""

    def __init__(self, client: httpx.AsyncClient | None, *, timeout_s: float,
                 max_connections: int) -> None:
        self.extensions: dict[str, Any] = {
            "timeout": httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)).as_dict()
        }
        self._transport: AiohttpTransport | None = None
        self.send: Callable[[httpx.Request], Awaitable[httpx.Response]]
        if client is None:
            self._transport = AiohttpTransport(max_connections=max_connections)
            self.send = self._transport.handle_async_request
        else:
            self.send = client.send

    async def aclose(self) -> None:
        """Close the owned transport; safe to repeat."""
        if self._transport is not None:
            await self._transport.aclose()


def _as_httpx_error(exc: aiohttp.ClientError, request: httpx.Request) -> httpx.RequestError:
    message = str(exc) or type(exc).__name__
    kind: type[httpx.RequestError]
    # Order matters: the aiohttp classes below are subclasses of later ones.
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        kind = httpx.ConnectTimeout  # connecting, or waiting for a pooled connection
    elif isinstance(exc, aiohttp.ServerTimeoutError):
        kind = httpx.ReadTimeout
    elif isinstance(exc, aiohttp.ClientConnectorError):
        kind = httpx.ConnectError
    elif isinstance(exc, aiohttp.InvalidURL):
        kind = httpx.UnsupportedProtocol
    elif isinstance(exc, aiohttp.ClientConnectionResetError):
        kind = httpx.WriteError
    elif isinstance(exc, aiohttp.ClientOSError | aiohttp.ClientPayloadError):
        kind = httpx.ReadError
    else:
        # Disconnects and unparseable answers: the request may have been received.
        kind = httpx.RemoteProtocolError
    return kind(message, request=request)
