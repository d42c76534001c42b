"""RQ 2.12 on Redis, ``SimpleWorker`` and the default forking ``Worker`` — settings and why.

Queue ``bench`` in ``redis://127.0.0.1:6379/15``. A started job sits in the queue's
``StartedJobRegistry``; if its worker dies, a worker's periodic maintenance finds the
job abandoned once its execution entry expired and retries it if it has retries left
(else it is moved to the ``FailedJobRegistry``: lost for the sender).

* ``Retry(max=1000, interval=1)`` on every job (RQ retries nothing by default) and
  workers started ``--with-scheduler`` (a retry with an interval is a scheduled job).
* ``job_timeout=10`` s (default 180 s) and ``--maintenance-interval 10`` (default 600 s),
  ``--job-monitoring-interval 5`` (default 30 s): abandoned jobs are found within
  seconds, shortened so a crash run ends.
* worker: ``rq worker --worker-class rq.worker.SimpleWorker`` (runs jobs in the worker
  process) or the default ``rq.worker.Worker`` (forks a work horse per job, RQ's default
  for isolation); one job at a time per worker, so P processes are P instances; the
  crash workload kills an instance (with its work horse) and restarts it.
* ``--quiet``: RQ logs every job at INFO by default; every system here logs at WARNING.
* the worker imports this module before it starts (RQ's performance notes: preload what
  the jobs need, so a forked work horse does not import it per job); ``result_ttl=0``
  (no result kept: fire-and-forget, like Celery's ``ignore_result``).
* retries: any failure (a 429 included) raises and is retried after 1 s (RQ cannot read
  a Retry-After).
* pacing: RQ has no rate limiter; shown as "none".
* producer: ``queue.enqueue_many`` with ``Queue.prepare_data`` in batches of 1,000
  (RQ's bulk API, one Redis pipeline per batch).
"""

from __future__ import annotations

import os

import jobs
from redis import Redis
from rq import Queue, Retry

from systems._producer import main

REDIS = os.environ.get("PEERS_REDIS", "redis://127.0.0.1:6379/15")
BATCH = 1_000


def send(i: int) -> None:
    jobs.handle(i)


def enqueue(ids: range) -> None:
    queue = Queue("bench", connection=Redis.from_url(REDIS))
    if os.environ.get("PEERS_ENQUEUE") == "single":  # one call per job
        for i in ids:
            queue.enqueue("systems.rq.send", i, job_timeout=10,
                          retry=Retry(max=1000, interval=1), result_ttl=0)
        return
    items = list(ids)
    for first in range(0, len(items), BATCH):
        queue.enqueue_many([
            Queue.prepare_data("systems.rq.send", (i,), timeout=10,
                               retry=Retry(max=1000, interval=1), result_ttl=0)
            for i in items[first:first + BATCH]])


if __name__ == "__main__":
    main(enqueue, "queue.enqueue_many, 1,000 per pipeline")
