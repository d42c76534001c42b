"""arq 0.28 on Redis — production settings used and why.

Queue ``arq:queue`` in ``redis://127.0.0.1:6379/15``. arq keeps a job in the queue
until it finished and marks it "in progress" with a key that expires
(``job_timeout + 10 s``): a job whose worker died is run again once that key expired
("pessimistic execution": at-least-once).

* ``job_timeout=10`` s (default 300 s): a send is a 5 s HTTP call at most; the in-progress
  mark of a killed worker then expires after 20 s, so a crash run ends.
* ``max_jobs=10`` (default), ``max_tries=1000`` (default 5: a job refused by 429 five
  times would be dropped as failed), default ``keep_result`` (3600 s), default
  ``poll_delay`` (0.5 s).
* worker: ``arq systems.arq.WorkerSettings``, one process each (arq has no pool); P
  processes are P instances; the crash workload kills and restarts an instance.
* retries: a 429 → ``raise Retry(defer=Retry-After)``; other failures ``Retry(defer=1)``.
* pacing: arq has no rate limiter; shown as "none".
* producer: ``await redis.enqueue_job("send", i)`` per job.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import jobs
from arq import Retry, create_pool
from arq.connections import RedisSettings

from systems._producer import main

REDIS = RedisSettings.from_dsn(os.environ.get("PEERS_REDIS", "redis://127.0.0.1:6379/15"))


async def send(ctx: dict[str, Any], i: int) -> None:
    try:
        await jobs.handle_async(i)
    except jobs.RateLimited as exc:
        raise Retry(defer=exc.retry_after_s) from None
    except jobs.SendFailed:
        raise Retry(defer=1) from None


class WorkerSettings:
    functions: ClassVar[list[Any]] = [send]
    redis_settings = REDIS
    max_jobs = 10
    job_timeout = 10
    max_tries = 1000


async def enqueue(ids: range) -> None:
    redis = await create_pool(REDIS)
    try:
        for i in ids:
            await redis.enqueue_job("send", i)
    finally:
        await redis.aclose()


if __name__ == "__main__":
    main(enqueue, "await redis.enqueue_job('send', i) per job")
