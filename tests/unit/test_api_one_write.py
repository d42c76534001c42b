"""``_OneWrite``: the writes of one loop step leave in one transport write, and nothing
pending is lost when the connection is closed or handed to another protocol."""

from __future__ import annotations

import asyncio
from typing import Any

from tidings.api.serve import _OneWrite


class Recording:
    """A transport that records what reaches it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.events: list[str] = []
        self.closing = False
        self.protocol: Any = None

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.events.append("write")

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True
        self.events.append("close")

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol
        self.events.append("set_protocol")

    def get_extra_info(self, name: str) -> str:
        return f"extra {name}"


async def test_one_steps_writes_leave_together_after_the_step() -> None:
    real = Recording()
    batched = _OneWrite(real, asyncio.get_running_loop())  # type: ignore[arg-type]

    batched.write(b"HTTP/1.1 202 Accepted\r\n\r\n")
    batched.write(memoryview(b'{"new":1}'))
    assert real.writes == []  # still this step
    await asyncio.sleep(0)

    assert real.writes == [b'HTTP/1.1 202 Accepted\r\n\r\n{"new":1}']
    batched.write(b"next")
    await asyncio.sleep(0)
    assert real.writes[1:] == [b"next"]


async def test_pending_bytes_go_out_before_a_close_or_a_new_protocol() -> None:
    loop = asyncio.get_running_loop()
    real = Recording()
    batched = _OneWrite(real, loop)  # type: ignore[arg-type]
    batched.write(b"answer")
    batched.close()
    assert real.events == ["write", "close"] and real.writes == [b"answer"]
    await asyncio.sleep(0)  # the step's flush finds nothing left and writes nothing
    assert real.writes == [b"answer"]

    upgraded = Recording()
    batched = _OneWrite(upgraded, loop)  # type: ignore[arg-type]
    batched.write(b"101")
    batched.set_protocol("websocket")
    assert upgraded.events == ["write", "set_protocol"]
    assert batched.get_extra_info("peername") == "extra peername"


async def test_nothing_is_written_to_a_transport_already_closing() -> None:
    real = Recording()
    batched = _OneWrite(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    batched.write(b"late")
    real.closing = True  # the peer went away within the step
    await asyncio.sleep(0)
    assert real.writes == []
