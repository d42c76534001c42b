"""What every route reaches through ``request.app.state.ctx``: one per app, no globals."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from fastapi import Request

from tidings.api.admission import AdmissionRunner
from tidings.api.errors import ApiError
from tidings.api.ratelimit import Bucket
from tidings.compose import Composer
from tidings.errors import unknown_name
from tidings.metrics import ApiMetrics
from tidings.runtime import Runtime
from tidings.settings import ApiSettings, QueueSettings
from tidings.stores.base import ApiRecords


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

    def channel(self, name: str, field: str = "path.channel") -> str:
        """``name`` if it is a declared channel, else a 404 naming ``field``."""
        if name not in self.runtime.limits:
            raise ApiError(404, field, unknown_name("channel", name, self.runtime.channels))
        return name


def ctx(request: Request) -> ApiContext:
    context: ApiContext = request.app.state.ctx
    return context
