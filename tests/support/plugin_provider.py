"""A provider plug-in as a user writes one: its own module, named in tidings.toml by
``provider = {kind = "plugin", factory = "plugin_provider:make", options = {...}}``.
It sends through a sandbox HTTP server, whose counts judge what it really sent."""

from __future__ import annotations

import os
from typing import Any

from tidings.providers import Clock, Lookup, Outcome, Provider, SendRequest
from tidings.providers.sandbox import SandboxHttpProvider


class Plugin:
    name = "my-plugin"
    supports_lookup = True

    def __init__(self, inner: SandboxHttpProvider) -> None:
        self.inner = inner
        self.sent: list[str] = []

    async def send(self, request: SendRequest) -> Outcome:
        self.sent.append(request.key)
        return await self.inner.send(request)

    async def lookup(self, key: str) -> Lookup:
        return await self.inner.lookup(key)

    async def close(self) -> None:
        await self.inner.close()


def make(*, channel: str, clock: Clock, options: dict[str, Any]) -> Provider:
    return Plugin(SandboxHttpProvider(options["url"], channel, clock=clock))


def not_a_provider(*, channel: str, clock: Clock, options: dict[str, Any]) -> object:
    return object()


def make_with_key(*, channel: str, clock: Clock, options: dict[str, Any]) -> Provider:
    """A plug-in that reads its API key where it is built, as most do."""
    options = {**options, "key": os.environ["ACME_KEY"]}
    return make(channel=channel, clock=clock, options=options)
