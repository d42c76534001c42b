"""One log line per HTTP request: method, route template, status, duration.

The route is the template the request matched (``/v1/trigger/{campaign}``), never the
raw path, whose parameters and query may carry anything a client sent; a request no
route matched is logged as ``(unmatched)``. Bodies and headers are never logged.
Server errors (5xx, or an exception that escaped) are logged at ``warning``, the rest
at ``info``; with the logger above ``info`` the middleware costs one level check.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("tidings.api.access")

UNMATCHED = "(unmatched)"


class AccessLog:
    """ASGI middleware: add it last, so it sees refusals of the other middleware too."""

    def __init__(self, app: ASGIApp, *, timer: Callable[[], float] = time.perf_counter,
                 logger: logging.Logger = log) -> None:
        self.app = app
        self.timer = timer
        self.log = logger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = self.timer()
        status = 500  # if the app raises before answering, the server answers 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            # The router writes the matched route into this same scope dict.
            route = getattr(scope.get("route"), "path", None)
            self.log.log(
                logging.WARNING if status >= 500 else logging.INFO, "request",
                extra={"method": scope["method"],
                       "route": route if isinstance(route, str) else UNMATCHED,
                       "status": status,
                       "duration_ms": round((self.timer() - started) * 1000.0, 3)})
