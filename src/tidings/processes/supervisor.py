"""Keep N worker processes running: ``tidings worker --processes N``.

The parent only supervises. A child that dies (a crash, an out-of-memory kill, a
``kill -9``) is started again, after a pause that doubles while children keep dying
young, so a worker that cannot start does not spin. SIGTERM or SIGINT to the parent
is passed on to every child, each finishes or releases the work in its hands, and
the parent exits when they all have. Correctness never depends on the parent: the
children share nothing but the store, and a child that dies holding leases is
reconciled like any other crashed worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

log = logging.getLogger("tidings.supervisor")

_PR_SET_PDEATHSIG = 1
#: A child that lived this long is healthy: the restart pause starts over.
HEALTHY_AFTER_S = 30.0
FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 30.0


@dataclass
class _Slot:
    process: BaseProcess
    started: float
    pause_s: float = FIRST_PAUSE_S
    restart_at: float | None = None


def _child(parent: int, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """A worker process: told to stop (SIGTERM) if its supervisor dies, even by SIGKILL,
    so no worker outlives the command that started it (Linux; elsewhere best effort)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        return  # the supervisor died before the request above could take effect
    target(*args)


class Supervisor:
    """Runs ``target(*args)`` in ``count`` spawned processes until told to stop."""

    def __init__(self, count: int, target: Callable[..., Any], args: tuple[Any, ...] = (),
                 *, name: str = "tidings-worker") -> None:
        self.count = count
        self.target = target
        self.args = args
        self.name = name
        self.restarts = 0
        self._ctx = multiprocessing.get_context("spawn")
        self._slots: list[_Slot] = []
        self._stopping = False

    def _start(self, index: int) -> BaseProcess:
        process = self._ctx.Process(target=_child, args=(os.getpid(), self.target, self.args),
                                    name=f"{self.name}-{index}")
        process.start()
        return process

    def stop(self, signum: int = signal.SIGTERM, _frame: FrameType | None = None) -> None:
        """Pass the stop on to every live child; exit once they have all finished."""
        self._stopping = True
        for slot in self._slots:
            if slot.process.is_alive() and slot.process.pid is not None:
                os.kill(slot.process.pid, signal.SIGTERM)

    def run(self) -> int:
        """Supervise until stopped; return 0, or 1 if a child failed while stopping."""
        previous = {sig: signal.signal(sig, self.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            now = time.monotonic()
            self._slots = [_Slot(self._start(i), now) for i in range(self.count)]
            return self._loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _loop(self) -> int:
        failed = False
        while True:
            live = [s.process for s in self._slots if s.restart_at is None]
            if self._stopping and not live:
                return 1 if failed else 0
            pending = [s.restart_at for s in self._slots if s.restart_at is not None]
            timeout = 1.0 if not pending else max(0.0, min(pending) - time.monotonic())
            wait([p.sentinel for p in live], timeout=min(timeout, 1.0))
            now = time.monotonic()
            for index, slot in enumerate(self._slots):
                if slot.restart_at is None and not slot.process.is_alive():
                    code = slot.process.exitcode
                    slot.process.join()
                    if self._stopping:
                        failed |= code not in (0, -signal.SIGTERM)
                        slot.restart_at = float("inf")  # done: never restarted
                        continue
                    lived = now - slot.started
                    slot.pause_s = (FIRST_PAUSE_S if lived >= HEALTHY_AFTER_S
                                    else min(MAX_PAUSE_S, slot.pause_s * 2))
                    slot.restart_at = now + slot.pause_s
                    log.warning("%s exited with %s after %.1f s; starting it again in %.1f s",
                                slot.process.name, code, lived, slot.pause_s)
                elif (slot.restart_at is not None and slot.restart_at <= now
                      and not self._stopping):
                    slot.process = self._start(index)
                    slot.started, slot.restart_at = now, None
                    self.restarts += 1
            if self._stopping:
                for slot in self._slots:
                    if slot.restart_at is not None and slot.restart_at != float("inf"):
                        slot.restart_at = float("inf")  # waiting to restart: not any more
