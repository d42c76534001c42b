"""Worker liveness: a dead worker's work moves in seconds, not after its leases expire.

Every worker process keeps a marker in the store while it runs (``Registry``, adapters
``stores/sqlite_liveness.py`` and ``stores/postgres_liveness.py``): a row with its host,
pid and a heartbeat, and on PostgreSQL a session-level advisory lock held on a
connection of its own, which ``pg_locks`` shows gone the moment the worker's backend
ends (a SIGKILLed process's socket closes with it). ``gone`` is the rule that reads a
marker: its lock gone, its pid gone from this very host, or no heartbeat for
``stale_after_s`` (the one sign that works across hosts and through a partition).

The reconciler (``Reconciler.end_gone_workers``) ends a gone worker's row, then its
leases (to ``uncertain``, settled by lookup like an expired lease: it may have sent),
then makes the messages it held visible again (where the transport records its
receivers, ``transports.base.RecordsReceiver``; a broker sees its consumer die by
itself), and marks the row settled. A crash half-way leaves the row ended, not
settled, and the next pass finishes the job.

The worker's side (``Marker``) beats every ``beat_s`` and fences itself: it starts no
send unless a beat succeeded within ``fence_s`` (half of ``stale_after_s``), so it stops
sending well before any peer can declare it gone. Heartbeats are written and read on
the store's clock (``core.clock.ReferenceClock``), not each host's, so hosts whose own
clocks disagree by minutes still agree on them to within milliseconds. A worker that
comes back after it was declared gone finds its row ended: it says so once in its log,
waits until its work has been taken back (every outcome it still holds is refused by
the lease token), and registers afresh; it starts no send under a claim made before
that (``Fence.epoch``), though its fence is open again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tidings.core.clock import Clock

log = logging.getLogger("tidings.liveness")

#: PostgreSQL keeps the first 63 bytes of an application_name.
_APPLICATION_NAME_BYTES = 63


def application_name(host: str | None = None, pid: int | None = None, *,
                     label: str | None = None) -> str:
    """The name every PostgreSQL connection of this process carries, by which the
    reconciler ends the backends of a worker declared gone (``worker_disconnect``
    matches it, alone or followed by a space). ``label`` is the application_name the
    store URL asked for: kept after ours, so a deployment's own name still shows."""
    name = f"tidings {host or socket.gethostname()}:{pid or os.getpid()}"
    if label:
        name = f"{name} {label}"
    return name.encode()[:_APPLICATION_NAME_BYTES].decode(errors="ignore")


@dataclass(frozen=True, kw_only=True)
class WorkerMark:
    """A worker's marker as the store shows it."""

    worker_id: str
    host: str
    pid: int
    heartbeat_at: float
    ended_at: float | None = None
    """Set once declared gone; the row stays until its work is taken back (settled)."""
    marker_held: bool | None = None
    """PostgreSQL: whether its advisory lock is held by a live backend. None: the store
    has no such marker (SQLite)."""


@dataclass(frozen=True, kw_only=True)
class Ended:
    ended_at: float
    ended_by: str | None
    settled: bool


class Registry(Protocol):
    """Where worker markers live (the store's database)."""

    async def register(self, worker_id: str, *, host: str, pid: int, now: float) -> bool:
        """Start (or restart) the marker; False while a row of that id is ended but not
        yet settled (its work is still being taken back)."""
        ...

    async def beat(self, worker_id: str, *, now: float) -> bool:
        """Renew the heartbeat; False when the row was ended (declared gone) or removed."""
        ...

    async def running(self) -> list[WorkerMark]:
        """Every marker not settled: running, or ended with its work still to take back."""
        ...

    async def end(self, mark: WorkerMark, *, now: float, by: str) -> bool:
        """Declare ``mark``'s worker gone, if it has not beaten since ``mark`` was read."""
        ...

    async def settle(self, worker_id: str, *, now: float) -> None:
        """Its work is taken back: the worker may register again."""
        ...

    async def ended(self, worker_id: str) -> Ended | None:
        """When and by whom the worker was declared gone (None: it was not)."""
        ...

    async def disconnect(self, mark: WorkerMark) -> int:
        """End the database sessions the gone worker still has (0 where there are none
        to end); return how many."""
        ...

    async def remove(self, worker_id: str) -> None:
        """A clean stop: the marker goes."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class LivenessConfig:
    beat_s: float = 1.0
    """How often a worker renews its heartbeat (and the reconciler looks for gone ones)."""
    stale_after_s: float = 6.0
    """A worker with no heartbeat for this long is gone."""

    @property
    def fence_s(self) -> float:
        """A worker starts no send once its last confirmed beat is this old: half of
        ``stale_after_s``, so it has stopped well before any peer declares it gone."""
        return self.stale_after_s / 2


def pid_alive(pid: int) -> bool:
    """Whether a process of that pid runs on this host (and is no zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return True  # no /proc: the signal said it is there


def gone(mark: WorkerMark, *, now: float, host: str, config: LivenessConfig,
         alive: Callable[[int], bool] = pid_alive) -> str | None:
    """Why ``mark``'s worker is gone, or None while it may still be sending.

    Its process gone from this very host: at once (nothing of it runs). Its marker lock
    gone: once it is also silent for ``fence_s`` — the process may live on (a server
    restart cut its session), and by then it has fenced itself and starts no send. No
    heartbeat for ``stale_after_s``: gone wherever it runs (a partition, a frozen host).
    Host names must tell hosts apart (one pid namespace per host name)."""
    silent = now - mark.heartbeat_at
    if mark.host == host and not alive(mark.pid):
        return f"its process {mark.pid} is gone from {host}"
    if mark.marker_held is False and silent >= config.fence_s:
        return f"its marker lock is gone (its database session ended), silent {silent:.1f} s"
    if silent >= config.stale_after_s:
        return f"no heartbeat for {silent:.1f} s (limit {config.stale_after_s:g} s)"
    return None


def sends_land_by(mark: WorkerMark, *, host: str, config: LivenessConfig,
                  send_deadline_s: float, alive: Callable[[int], bool] = pid_alive
                  ) -> float | None:
    """The latest time a send that ``mark``'s worker started can still reach its
    provider (None: nothing of it can any more).

    Its process gone from this very host: None, its connections were reset as it died
    (``providers.aiohttp_transport.reset_on_close_socket``). Otherwise it may be cut off
    from the store and still running: it starts no send once its last heartbeat is
    ``fence_s`` old, and cuts each send off after ``send_deadline_s``. Until then a
    lookup's "not found" says nothing: the request may be on its way (a partition
    heals, the kernel retransmits it), and resending it would send it twice."""
    if mark.host == host and not alive(mark.pid):
        return None
    return mark.heartbeat_at + config.fence_s + send_deadline_s


class Fence(Protocol):
    """What a worker asks before each send (``Marker`` is one)."""

    @property
    def epoch(self) -> int:
        """Which registration this is: it grows each time the worker registers again
        after it was declared gone. A lease claimed under an earlier one was ended."""
        ...

    def live(self, now: float) -> bool:
        """Whether a send may start now."""
        ...


class Marker:
    """A worker process's marker: registered at start, beaten every ``beat_s``,
    removed at a clean stop. ``live(now)`` and ``epoch`` are the worker's fence."""

    def __init__(self, registry: Registry, worker_id: str, *, clock: Clock,
                 config: LivenessConfig | None = None, host: str | None = None,
                 pid: int | None = None) -> None:
        self.registry = registry
        self.worker_id = worker_id
        self.clock = clock
        self.config = config or LivenessConfig()
        self.host = host or socket.gethostname()
        self.pid = pid or os.getpid()
        self._confirmed_at: float | None = None
        self._registered = False
        self._epoch = 0
        self._unreachable = False
        self.declared_gone = 0
        """How often this worker found itself declared gone (each said once in the log)."""

    @property
    def epoch(self) -> int:
        """The registration this worker runs under (``Fence.epoch``)."""
        return self._epoch

    def live(self, now: float) -> bool:
        """May this worker start a send now: registered, and a beat confirmed recently
        enough that no peer can have declared it gone yet."""
        return (self._registered and self._confirmed_at is not None
                and now < self._confirmed_at + self.config.fence_s)

    async def start(self) -> None:
        """Register (raises what the store raises: a worker with no marker must not run)."""
        now = self.clock.now()
        if not await self.registry.register(self.worker_id, host=self.host, pid=self.pid,
                                            now=now):
            raise RuntimeError(f"worker {self.worker_id!r} was declared gone and its work "
                               "is still being taken back; start it again in a moment")
        self._registered, self._confirmed_at = True, now
        self._epoch += 1

    async def step(self) -> None:
        """One beat: renew; when found ended, say so once and register again as soon as
        the work is taken back. A store that cannot be reached is logged once per outage,
        and the fence closes on its own (``live``)."""
        now = self.clock.now()
        try:
            if self._registered:
                if await self.registry.beat(self.worker_id, now=now):
                    self._confirmed_at = now
                else:
                    self._registered = False
                    await self._tell_declared_gone()
            if not self._registered and await self.registry.register(
                    self.worker_id, host=self.host, pid=self.pid, now=now):
                self._registered, self._confirmed_at = True, now
                self._epoch += 1
                log.info("registered again", extra={"worker": self.worker_id})
        except Exception as exc:
            if not self._unreachable:
                self._unreachable = True
                log.warning("heartbeat failed; no send starts until one succeeds",
                            extra={"worker": self.worker_id, "reason": str(exc)})
            return
        if self._unreachable:
            self._unreachable = False
            log.info("heartbeat back", extra={"worker": self.worker_id})

    async def _tell_declared_gone(self) -> None:
        self.declared_gone += 1
        ended = await self.registry.ended(self.worker_id)
        log.warning("declared gone", extra={
            "worker": self.worker_id,
            "reason": ("its leases were ended and its messages handed to others; every "
                       "outcome still held under them is refused (lease token)"),
            "ended_at": None if ended is None else ended.ended_at,
            "ended_by": None if ended is None else ended.ended_by})

    async def run(self, stopping: asyncio.Event) -> None:
        """Beat every ``beat_s`` until ``stopping`` is set."""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=self.config.beat_s)
            if not stopping.is_set():
                await self.step()

    async def stop(self) -> None:
        """A clean stop: the marker goes (the worker released its own work)."""
        try:
            await self.registry.remove(self.worker_id)
        except Exception:
            log.warning("could not remove the marker; it ends when its heartbeat is stale",
                        exc_info=True, extra={"worker": self.worker_id})
