"""What every route reaches through ``request.app.state.ctx``: one per app, no globals."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from fastapi import Request

from tidings.api.admission import AdmissionRunner
from tidings.api.errors import ApiError
from tidings.api.metrics import ApiMetrics
from tidings.api.ratelimit import Bucket
from tidings.config.settings import ApiSettings, QueueSettings
from tidings.core.errors import unknown_name
from tidings.delivery.compose import Composer
from tidings.delivery.group_commit import Coalescer, GroupCommitConfig
from tidings.runtime import Runtime
from tidings.stores.base import ApiRecords, IdempotentResponse, PublishWrite, PublishWritten, Switch


@dataclass(kw_only=True)
class ApiContext:
    runtime: Runtime
    settings: ApiSettings
    admission: AdmissionRunner
    metrics: ApiMetrics
    bucket: Bucket | None
    queues: dict[str, QueueSettings]

    @cached_property
    def composer(self) -> Composer:
        """The workers' send-time checks (addresses, templates), for publish to run first."""
        return self.runtime.composer()

    @property
    def records(self) -> ApiRecords:
        """The API's own records in the store (tokens, signatures, triggers,
        idempotency): the role of the store a route's bookkeeping reaches."""
        return self.runtime.store

    @cached_property
    def publishes(self) -> Coalescer[PublishWrite, PublishWritten]:
        """Concurrent publishes of this process, written together (group commit): each
        request's reservation, intents and answer in one transaction with the others'.
        With the runtime's ``group_commit`` off, each is its own transaction."""
        runtime = self.runtime

        async def write(writes: Sequence[PublishWrite], now: float) -> list[PublishWritten]:
            return await runtime.store.api_publish_many(
                writes, now=now, expire_before=now - self.settings.idempotency_ttl_s,
                enqueue=runtime.enqueue_in_store,
                # With a broker the intents due soon wait selected, unleased, for the
                # relay: a request never waits for the broker.
                publish_lease_until=None)

        config = runtime.group_commit or GroupCommitConfig(max_drafts=1)
        return Coalescer(write, clock=runtime.clock, config=config,
                         size=lambda w: len(w.later) + len(w.soon))

    @cached_property
    def lookups(self) -> Coalescer[str, tuple[IdempotentResponse | None, list[Switch]]]:
        """What concurrent publishes look at before anything is written, in one read for
        all of them: the record of each one's Idempotency-Key, and the admission
        switches (read side by side; each read starts after every request it answers
        arrived, so a pause or a first answer committed before is seen)."""
        store = self.runtime.store

        async def read(keys: Sequence[str], _now: float
                       ) -> list[tuple[IdempotentResponse | None, list[Switch]]]:
            found, switches = await asyncio.gather(store.api_idempotency_get_many(keys),
                                                   store.switch_all())
            return [(found.get(key), switches) for key in keys]

        return Coalescer(read, clock=self.runtime.clock,
                         config=GroupCommitConfig(max_drafts=1000))

    def channel(self, name: str, field: str = "path.channel") -> str:
        """``name`` if it is a declared channel, else a 404 naming ``field``."""
        if name not in self.runtime.limits:
            raise ApiError(404, field, unknown_name("channel", name, self.runtime.channels))
        return name


def ctx(request: Request) -> ApiContext:
    context: ApiContext = request.app.state.ctx
    return context
