"""The sandbox HTTP server in a process of its own that notes when every send arrives.

``python tests/support/arrivals_sandbox.py HOST QUOTA OUT [KEYS_OUT]``: serves channel
``email`` at ``QUOTA`` requests per second with dedupe off on ``HOST`` (a free port,
printed on stdout), and on SIGTERM writes every send's arrival time (epoch seconds) to
``OUT`` as a JSON list (and, given ``KEYS_OUT``, ``[time, key]`` pairs there) and
exits. In a process of its own, the arrival times are the sandbox's alone: the test's
polling cannot delay them into a burst that never happened.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path

from tidings.sandbox import LatencySpec, SandboxConfig, serve
from tidings.sandbox.core import SandboxAnswer, SandboxCore


class CountingCore(SandboxCore):
    """The sandbox core plus the arrival time of every send."""

    def __init__(self, config: SandboxConfig) -> None:
        self.arrivals: list[float] = []
        self.keys: list[tuple[float, str | None]] = []
        super().__init__(config, now=time.time)

    def handle(self, channel: str, key: str | None, to: str | None, *,
               problem: str | None = None) -> SandboxAnswer:
        at = time.time()
        self.arrivals.append(at)
        self.keys.append((at, key))
        return super().handle(channel, key, to, problem=problem)


async def main(host: str, quota: int, out: Path, keys_out: Path | None = None) -> None:
    core = CountingCore(SandboxConfig(dedupe=False, quotas={"email": quota},
                                      latency={"email": LatencySpec(median_ms=20, p99_ms=60)}))
    server = await serve(None, host, 0, core=core)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(server.port, flush=True)
    await stop.wait()
    await asyncio.to_thread(out.write_text, json.dumps(core.arrivals))
    if keys_out is not None:
        await asyncio.to_thread(keys_out.write_text, json.dumps(core.keys))
    await server.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]),
                     Path(sys.argv[4]) if len(sys.argv) > 4 else None))
