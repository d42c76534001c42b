"""What every system's job does, identical for all of them, imported inside the worker processes.

A job carries one integer ``i`` and nothing else. Its key is ``job-<i>`` (the
idempotency key the sandbox counts by). What the handler does depends on the workload,
given to every worker process in the environment (``PEERS_WORKLOAD``):

* ``throughput``: ``sink(i)`` — an in-process sink: one ``os.write`` of ``"<i> <t>\\n"``
  to the run's sink file (``O_APPEND``, so processes never interleave a line, and a
  forked child that exits at once loses nothing). No network.
* ``io``: ``io(i)`` — one round trip to Redis (``INCR peers-io:<i>`` on the run's
  Redis db, ``PEERS_REDIS``), as a provider call is a network round trip, then
  ``sink(i)``. Each process has a connection pool of its own (a thread-safe
  ``redis.Redis`` pool for synchronous workers, a ``redis.asyncio`` one for asyncio
  workers); the count per key is a second witness of how often a job ran.
* ``pacing`` and ``crash``: ``send(i)`` — one POST to the sandbox HTTP provider
  (``PEERS_SANDBOX``) with ``Idempotency-Key: job-<i>``; a 2xx is recorded in the sink,
  a 429 raises ``RateLimited(retry_after_s)`` and anything else ``SendFailed``, for the
  system's own retry machinery to handle.

Only the standard library (``http.client`` for synchronous workers), httpx (asyncio
workers; a tidings dependency, so in the peer venv) and redis-py (the Redis brokers'
client, so in the peer venv) are used.
"""

from __future__ import annotations

import http.client
import os
import threading
import time
from typing import Any
from urllib.parse import urlsplit

WORKLOAD = os.environ.get("PEERS_WORKLOAD", "throughput")
SANDBOX = os.environ.get("PEERS_SANDBOX", "http://127.0.0.1:8025")
SINK = os.environ.get("PEERS_SINK", "/tmp/peers-sink.log")
CHANNEL = "email"
SEND_TIMEOUT_S = 5.0

_fd: int | None = None
_fd_pid = 0


class RateLimited(Exception):
    """The sandbox answered 429."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"rate limited, retry after {retry_after_s:.2f} s")
        self.retry_after_s = retry_after_s


class SendFailed(Exception):
    """Any other answer, or no answer: worth a retry."""


def key_of(i: int) -> str:
    return f"job-{i:07d}"


def sink(i: int) -> None:
    """Record that job ``i`` was done here and now (one atomic append)."""
    global _fd, _fd_pid
    if _fd is None or _fd_pid != os.getpid():  # first call in this (possibly forked) process
        _fd = os.open(SINK, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fd_pid = os.getpid()
    os.write(_fd, b"%d %.6f\n" % (i, time.time()))


def _body(i: int) -> bytes:
    return b'{"to":"r%d@example.com","template":"bench","recipient_id":"c%d"}' % (i, i)


def _retry_after(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value else 1.0
    except ValueError:
        return 1.0


def _judge(i: int, status: int, retry_after: str | None) -> None:
    if 200 <= status < 300:
        sink(i)
        return
    if status == 429:
        raise RateLimited(_retry_after(retry_after))
    raise SendFailed(f"HTTP {status}")


_local = threading.local()  # one connection per thread (Dramatiq runs 8 per process)


def _connection() -> http.client.HTTPConnection:
    conn: http.client.HTTPConnection | None = getattr(_local, "conn", None)
    if conn is None or getattr(_local, "pid", 0) != os.getpid():
        url = urlsplit(SANDBOX)
        conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80,
                                          timeout=SEND_TIMEOUT_S)
        _local.conn, _local.pid = conn, os.getpid()
    return conn


def send(i: int) -> None:
    """POST job ``i`` to the sandbox (blocking; a keep-alive connection per thread).

    The standard library's client: cheap to make, so a process forked per job (RQ's
    default worker) pays a TCP connect, not a client's set-up.
    """
    conn = _connection()
    try:
        conn.request("POST", f"/v1/{CHANNEL}/messages", body=_body(i),
                      headers={"Idempotency-Key": key_of(i),
                               "Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
    except (OSError, http.client.HTTPException) as exc:
        conn.close()  # reconnects on the next send
        raise SendFailed(f"{type(exc).__name__}: {exc}") from None
    _judge(i, r.status, r.getheader("Retry-After"))


_aclient = None


async def send_async(i: int) -> None:
    """``send`` for asyncio workers (one httpx.AsyncClient per process)."""
    import httpx

    global _aclient
    if _aclient is None:
        _aclient = httpx.AsyncClient(timeout=SEND_TIMEOUT_S,
                                     limits=httpx.Limits(max_connections=100))
    try:
        r = await _aclient.post(f"{SANDBOX}/v1/{CHANNEL}/messages", content=_body(i),
                                headers={"Idempotency-Key": key_of(i),
                                         "Content-Type": "application/json"})
    except httpx.HTTPError as exc:
        raise SendFailed(f"{type(exc).__name__}: {exc}") from None
    _judge(i, r.status_code, r.headers.get("Retry-After"))


REDIS_IO = os.environ.get("PEERS_REDIS", "redis://127.0.0.1:6379/15")
#: The run's own key prefix (the driver sets it); the repeats check reads these keys.
IO_PREFIX = os.environ.get("PEERS_IO_PREFIX", "peers-io:")
IO_POOL = 100  # connections per process, for every system alike
_redis: Any = None
_redis_pid = 0
_aredis: Any = None
_aredis_loop: Any = None


def io(i: int) -> None:
    """One Redis round trip for job ``i`` (a pool per process, re-made after a fork)."""
    global _redis, _redis_pid
    if _redis is None or _redis_pid != os.getpid():
        import redis

        # A blocking pool: a thread beyond its size waits for a connection.
        _redis = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(
            REDIS_IO, max_connections=IO_POOL))
        _redis_pid = os.getpid()
    _redis.incr(f"{IO_PREFIX}{i}")
    sink(i)


async def io_round_trip(i: int) -> None:
    """The Redis round trip of ``io_async`` alone (tidings' provider sinks by itself)."""
    import asyncio

    global _aredis, _aredis_loop
    loop = asyncio.get_running_loop()
    if _aredis is None or _aredis_loop is not loop:
        import redis.asyncio

        # A blocking pool: a send beyond its size waits for a connection (the default
        # pool raises "Too many connections" instead).
        _aredis = redis.asyncio.Redis(connection_pool=redis.asyncio.BlockingConnectionPool
                                      .from_url(REDIS_IO, max_connections=IO_POOL))
        _aredis_loop = loop
    await _aredis.incr(f"{IO_PREFIX}{i}")


async def io_async(i: int) -> None:
    """``io`` for asyncio workers (one ``redis.asyncio`` pool per process and loop)."""
    await io_round_trip(i)
    sink(i)


def handle(i: int) -> None:
    """The job, for synchronous workers."""
    if WORKLOAD == "throughput":
        sink(i)
    elif WORKLOAD == "io":
        io(i)
    else:
        send(i)


async def handle_async(i: int) -> None:
    """The job, for asyncio workers."""
    if WORKLOAD == "throughput":
        sink(i)
    elif WORKLOAD == "io":
        await io_async(i)
    else:
        await send_async(i)
