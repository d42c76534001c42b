"""taskiq 0.11 with taskiq-redis streams — production settings used and why.

Broker ``RedisStreamBroker(redis://127.0.0.1:6379/15, queue_name="bench")``: a Redis
stream read through a consumer group, acked (``XACK``) after the task ran (the default
``--ack-type when_saved``; no result backend), so a dead worker's messages stay pending
and another consumer claims them with ``XAUTOCLAIM`` once idle.

* ``idle_timeout=10_000`` ms (default 10 min): pending messages of a dead consumer are
  claimed back after 10 s, shortened so a crash run ends.
* ``consumer_id="0"``: a consumer group created after jobs were published still reads
  them (with the default ``"$"`` a backlog published before the first worker started is
  skipped; in production the group already exists).
* worker: ``taskiq worker systems.taskiq:broker --workers P`` (default
  ``--max-async-tasks 100``); taskiq's process manager restarts a worker process that
  died, so the crash workload kills one worker process and lets taskiq restart it.
* retries: ``SmartRetryMiddleware(default_retry_count=1000, default_delay=1,
  use_jitter=True)`` with ``retry_on_error=True`` on the task. Without a schedule source
  the retry is re-sent with a ``delay`` label, which the Redis stream broker does not
  honour, so retries are immediate.
* pacing: taskiq has no rate limiter; shown as "none".
* producer: ``await send.kiq(i)`` per job.
"""

from __future__ import annotations

import os

import jobs
from taskiq import SmartRetryMiddleware
from taskiq_redis import RedisStreamBroker

from systems._producer import main

REDIS = os.environ.get("PEERS_REDIS", "redis://127.0.0.1:6379/15")

broker = RedisStreamBroker(
    REDIS, queue_name="bench", consumer_id="0", idle_timeout=10_000,
).with_middlewares(
    SmartRetryMiddleware(default_retry_count=1000, default_delay=1, use_jitter=True),
)


@broker.task(task_name="bench.send", retry_on_error=True, max_retries=1000)
async def send(i: int) -> None:
    await jobs.handle_async(i)


async def enqueue(ids: range) -> None:
    await broker.startup()
    try:
        for i in ids:
            await send.kiq(i)
    finally:
        await broker.shutdown()


if __name__ == "__main__":
    main(enqueue, "await send.kiq(i) per job")
