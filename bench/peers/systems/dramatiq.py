"""Dramatiq 2.2 on Redis — production settings used and why.

Broker ``RedisBroker(url=redis://127.0.0.1:6379/15)``, queue ``bench``. Dramatiq acks a
message after its actor ran (at-least-once by design); unacked messages of a worker
that stopped heartbeating are requeued by another worker's periodic maintenance.

* crash workload: ``heartbeat_timeout=10_000`` ms (default 60 s) and
  ``maintenance_chance=100_000`` — per million broker commands, i.e. 10 % of them run
  the maintenance that requeues a dead worker's unacked messages (default 1,000 per
  million, 0.1 %): they come back within seconds, shortened so a crash run ends. Other
  workloads keep the defaults.
* worker: ``dramatiq systems.dramatiq --processes 1 --threads 8 --queues bench``, one
  such instance per worker process (the default 8 threads). The dramatiq master stops
  *every* worker process when one dies, so P processes are P instances, and the crash
  workload kills and restarts an instance.
* retries: the ``Retries`` middleware (``max_retries=1000``) with ``min_backoff=500``,
  ``max_backoff=5_000`` ms (defaults 15 s and 7 days would stretch a 20 s pacing run to
  minutes); a 429 raises and is retried by it.
* pacing: Dramatiq's own rate limiter on Redis, ``WindowRateLimiter(RedisBackend,
  "sandbox-email", limit=50, window=1)`` around the send; ``RateLimitExceeded`` is
  retried by the middleware (the documented pattern).
* producer: ``send.send(i)`` per job (one ``broker.enqueue`` each).
"""

from __future__ import annotations

import os

import dramatiq
import jobs
from dramatiq.brokers.redis import RedisBroker
from dramatiq.rate_limits import WindowRateLimiter
from dramatiq.rate_limits.backends import RedisBackend

from systems._producer import main

REDIS = os.environ.get("PEERS_REDIS", "redis://127.0.0.1:6379/15")
QUOTA = int(os.environ.get("PEERS_QUOTA", "50"))

broker = (RedisBroker(url=REDIS, heartbeat_timeout=10_000, maintenance_chance=100_000)
          if jobs.WORKLOAD == "crash" else RedisBroker(url=REDIS))
dramatiq.set_broker(broker)

LIMITER = (WindowRateLimiter(RedisBackend(url=REDIS), "sandbox-email", limit=QUOTA, window=1)
           if jobs.WORKLOAD == "pacing" else None)


@dramatiq.actor(queue_name="bench", max_retries=1000, min_backoff=500, max_backoff=5_000)
def send(i: int) -> None:
    if LIMITER is None:
        jobs.handle(i)
        return
    with LIMITER.acquire():  # raises RateLimitExceeded: retried with backoff
        jobs.handle(i)


def enqueue(ids: range) -> None:
    for i in ids:
        send.send(i)


if __name__ == "__main__":
    main(enqueue, "send.send(i) per job")
