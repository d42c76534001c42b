"""A send the client gave up on never reaches the provider later.

Over a real link that goes down mid-request (a simulated host, ``support.netns``): the
request is written, the link is cut, the client times out; when the link comes back,
an ordinarily closed socket's kernel still retransmits the request and the provider
accepts it, long after tidings settled the send as uncertain and perhaps sent it again
(the duplicate the fleet test once caught). tidings' provider sockets are reset on
close (``providers.aiohttp_transport.reset_on_close_socket``): the request is gone with
them. The control (``plain``) shows the late arrival is real on this machine, so the
check can fail. The witness is the server's own record of complete requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.netns import Fleet, fleet_network, require_netns

pytestmark = pytest.mark.slow

CLIENT = Path(__file__).resolve().parents[1] / "support" / "late_client.py"
LINK_DOWN_S = 2.5  # past the client's 1 s timeout: it has given up and closed
RETRANSMIT_WAIT_S = 12.0  # a retransmission backs off to a few seconds by then


class Server:
    """An HTTP/1.1 server that records every complete request body."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.second = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.bodies.append(await reader.readexactly(length))
                if len(self.bodies) >= 2:
                    self.second.set()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    require_netns()
    with fleet_network(1) as made:
        yield made


async def arrivals_after_cut(fleet: Fleet, mode: str) -> tuple[str, list[bytes]]:
    """Run the client in ``mode``; how its second request ended, and what arrived."""
    server = Server()
    listening = await asyncio.start_server(server.handle, fleet.gateway, 0)
    port = listening.sockets[0].getsockname()[1]
    host = fleet.hosts[0]
    client = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", host.netns, sys.executable, str(CLIENT),
        f"http://{fleet.gateway}:{port}/send", mode,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert client.stdin is not None and client.stdout is not None
    try:
        first = await asyncio.wait_for(client.stdout.readline(), timeout=30)
        assert first.split() == [b"first", b"200"], first
        fleet.cut(host)
        client.stdin.write(b"go\n")
        await client.stdin.drain()
        ended = (await asyncio.wait_for(client.stdout.readline(), timeout=30)).decode().strip()
        await asyncio.sleep(max(0.0, LINK_DOWN_S - 1.0))
        fleet.mend(host)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.second.wait(), timeout=RETRANSMIT_WAIT_S)
        client.stdin.write(b"exit\n")
        await client.stdin.drain()
        assert await asyncio.wait_for(client.wait(), timeout=30) == 0
        return ended, list(server.bodies)
    finally:
        if client.returncode is None:
            client.kill()
            await client.wait()
        listening.close()
        await listening.wait_closed()


async def test_a_request_given_up_on_is_not_delivered_when_the_link_returns(
        fleet: Fleet) -> None:
    ended, bodies = await arrivals_after_cut(fleet, "reset")
    assert ended.startswith("timed out"), ended
    assert bodies == [b"first"], "the request the client gave up on arrived after all"


async def test_control_an_ordinary_close_delivers_the_request_late(fleet: Fleet) -> None:
    ended, bodies = await arrivals_after_cut(fleet, "plain")
    assert ended.startswith("timed out"), ended
    assert bodies == [b"first", b"second"], (
        "the kernel did not retransmit the abandoned request: the reset test proves nothing "
        "on this machine")
