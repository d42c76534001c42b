"""A provider client inside a simulated host, for tests/acceptance/test_late_delivery.py.

``python late_client.py URL reset|plain``: sends one request over tidings' provider
transport (``AiohttpTransport``), prints ``first <status>``, waits for a line on stdin,
sends a second over the same pooled connection with a one-second timeout, prints how it
ended, and exits at the next line. ``plain`` swaps in an ordinary socket (closed
gracefully): the control that shows what reset-on-close prevents.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import httpx

from tidings.providers import aiohttp_transport
from tidings.providers.aiohttp_transport import AiohttpTransport


def plain_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    family, kind, proto, _, _ = addr_info
    return socket.socket(family=family, type=kind, proto=proto)


async def main(url: str, mode: str) -> None:
    if mode == "plain":
        aiohttp_transport.reset_on_close_socket = plain_socket  # type: ignore[assignment]
    transport = AiohttpTransport(max_connections=1)
    timeout = {"timeout": httpx.Timeout(1.0).as_dict()}
    loop = asyncio.get_running_loop()
    first = await transport.handle_async_request(
        httpx.Request("POST", url, content=b"first", extensions=timeout))
    print("first", first.status_code, flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    try:
        await transport.handle_async_request(
            httpx.Request("POST", url, content=b"second", extensions=timeout))
        print("answered", flush=True)
    except httpx.TimeoutException as exc:
        print("timed out", type(exc).__name__, flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    await transport.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
