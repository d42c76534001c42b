"""The sandbox HTTP server in a process of its own that notes when each recipient got
a message.

``python tests/support/recipients_sandbox.py HOST CHANNEL OUT``: serves ``CHANNEL`` at
1,000 requests per second on ``HOST`` (a free port, printed on stdout), and on SIGTERM
writes, per recipient address, the times (epoch seconds, the sandbox's own clock) of
every send it accepted to ``OUT`` as a JSON object, and exits. The per-recipient times
are the sandbox's alone: the witness of a throttle, not tidings' ledger.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path

from tidings.sandbox import SandboxConfig, serve
from tidings.sandbox.core import SandboxAnswer, SandboxCore


class RecipientCore(SandboxCore):
    """The sandbox core plus the acceptance times of each recipient's sends."""

    def __init__(self, config: SandboxConfig) -> None:
        self.received: dict[str, list[float]] = {}
        super().__init__(config, now=time.time)

    def handle(self, channel: str, key: str | None, to: str | None, *,
               problem: str | None = None) -> SandboxAnswer:
        at = time.time()
        answer = super().handle(channel, key, to, problem=problem)
        if answer.accepted and to is not None:
            self.received.setdefault(to, []).append(at)
        return answer


async def main(host: str, channel: str, out: Path) -> None:
    core = RecipientCore(SandboxConfig(quotas={channel: 1000}))
    server = await serve(None, host, 0, core=core)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(server.port, flush=True)
    await stop.wait()
    await asyncio.to_thread(out.write_text, json.dumps(core.received))
    await server.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
