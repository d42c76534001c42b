"""Celery 5.6 on Redis, prefork pool — production settings used and why.

Broker ``redis://127.0.0.1:6379/15`` (the benchmark's own db), queue ``bench``.

* ``task_acks_late=True``: ack after the task ran, so a worker that dies mid-task does
  not lose it (at-least-once, the setting Celery's docs recommend for idempotent tasks).
* ``task_reject_on_worker_lost=True``: with ``acks_late``, a task whose pool process was
  killed is requeued rather than marked failed (otherwise it is acked and lost).
* ``worker_prefetch_multiplier=1``: one message reserved per pool process, so a killed
  process holds at most one, and long tasks do not starve other processes.
* ``task_ignore_result=True``, no result backend: fire-and-forget, as notifications are.
* ``broker_transport_options={"visibility_timeout": 10}``: unacked messages of a worker
  *node* that vanished come back after 10 s (default one hour), shortened so a run ends.
* worker: ``--pool prefork --concurrency P --without-gossip --without-mingle
  --without-heartbeat`` (one node, P pool processes; gossip/mingle/heartbeat only add
  broker chatter on Redis), ``-O fair``.
* pacing: ``rate_limit="50/s"`` on the task. Celery's rate limit is enforced by each
  worker *node* (token bucket in the node's consumer), not across nodes.
* retries: a 429 → ``self.retry(countdown=Retry-After)``; any other failure →
  ``self.retry(countdown=1)``; ``max_retries=None`` (keep trying).
* producer: ``send.delay(i)`` per job (Celery has no bulk publish).

Crash workload: the driver SIGKILLs one *pool process*; the node's master forks a
replacement (Celery's own supervision), and the killed process's task is requeued.
"""

from __future__ import annotations

import os

import jobs
from celery import Celery

from systems._producer import main

REDIS = os.environ.get("PEERS_REDIS", "redis://127.0.0.1:6379/15")
QUOTA = int(os.environ.get("PEERS_QUOTA", "50"))

app = Celery("bench", broker=REDIS)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    task_default_queue="bench",
    broker_transport_options={"visibility_timeout": 10},
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)

_limit = f"{QUOTA}/s" if jobs.WORKLOAD == "pacing" else None


@app.task(bind=True, name="bench.send", max_retries=None, rate_limit=_limit)
def send(self, i: int) -> None:  # type: ignore[no-untyped-def]
    try:
        jobs.handle(i)
    except jobs.RateLimited as exc:
        raise self.retry(countdown=exc.retry_after_s) from None
    except jobs.SendFailed:
        raise self.retry(countdown=1) from None


def enqueue(ids: range) -> None:
    for i in ids:
        send.delay(i)


if __name__ == "__main__":
    main(enqueue, "send.delay(i) per job")
