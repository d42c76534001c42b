"""procrastinate 3.10 on PostgreSQL — production settings used and why.

A throw-away database ``tidings_bench_procrastinate_<random>`` on 127.0.0.1:5432, made
by the driver with ``procrastinate schema --apply`` and dropped afterwards. A job is a
row; a worker takes it with ``FOR UPDATE SKIP LOCKED`` and marks it done after it ran.
A job whose worker died stays ``doing`` until something retries it: the documented
recipe is a periodic task that retries the jobs of stalled workers.

* ``worker_defaults``: ``update_heartbeat_interval=2`` s, ``stalled_worker_timeout=10`` s
  (defaults 10 s and 30 s), and, in the crash workload, the documented
  ``retry_stalled_jobs`` periodic task every 5 s (``get_stalled_jobs`` → ``retry_job``):
  shortened so a crash run ends.
* worker: ``procrastinate worker --concurrency 10 --delete-jobs successful`` (default
  concurrency 1 would run one send at a time; successful jobs deleted so the table stays
  small), LISTEN/NOTIFY on (default); one process each, so P processes are P instances;
  the crash workload kills and restarts an instance.
* retries: ``RetryStrategy(max_attempts=1000, wait=1)``; any failure (a 429 included)
  raises and is retried after 1 s.
* pacing: procrastinate has no rate limiter; shown as "none".
* producer: ``await send.batch_defer_async(...)``, 1,000 jobs per call (its bulk API,
  one ``INSERT`` per batch).
"""

from __future__ import annotations

import os
from typing import Any

import jobs
from procrastinate import App, JobContext, PsycopgConnector, RetryStrategy

from systems._producer import main

PG = os.environ.get("PEERS_PG", "postgresql://postgres@127.0.0.1:5432/tidings_bench_procrastinate")
BATCH = 1_000

app = App(connector=PsycopgConnector(conninfo=PG),
          worker_defaults={"update_heartbeat_interval": 2, "stalled_worker_timeout": 10})


@app.task(name="bench.send", queue="bench", retry=RetryStrategy(max_attempts=1000, wait=1))
async def send(i: int) -> None:
    await jobs.handle_async(i)


if jobs.WORKLOAD == "crash":
    @app.periodic(cron="* * * * * */5")
    @app.task(name="bench.retry_stalled_jobs", queue="bench",
              queueing_lock="retry_stalled_jobs", pass_context=True)
    async def retry_stalled_jobs(context: JobContext, timestamp: int) -> None:
        stalled = await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=10)
        for job in stalled:
            await app.job_manager.retry_job(job)


async def enqueue(ids: range) -> None:
    async with app.open_async():
        if os.environ.get("PEERS_ENQUEUE") == "single":  # one call per job
            for i in ids:
                await send.defer_async(i=i)
            return
        items: list[dict[str, Any]] = [{"i": i} for i in ids]
        for first in range(0, len(items), BATCH):
            await send.batch_defer_async(*items[first:first + BATCH])


if __name__ == "__main__":
    main(enqueue, "await send.batch_defer_async(...), 1,000 per call")
