"""A channel worker process that dies at a chosen point of its batch.

Used by ``test_crash_points.py``. It builds the runtime the way the CLI does
(``build_runtime`` from settings: the SQLite file and the sandbox over HTTP), then
wraps the store and the provider in small proxies that end the process with
``os._exit(137)`` (as a SIGKILL would: no cleanup, no flush, no ack) at one point:

- ``after_claim``  ``intent_claim_many`` returned leases; nothing was sent;
- ``after_send``   the first request left ``--exit-after-ms`` ago; no reply has come yet
                   (run the sandbox with a latency longer than that);
- ``after_reply``  the first ``provider.send`` returned; nothing was committed;
- ``after_commit`` ``intent_apply_many`` committed outcomes; nothing was acked apart
                   (on the store's own queue the acks commit with the outcomes);
- ``before_ack``   the worker calls ``transport.ack``; the ack never reaches the queue;
- ``during_publish`` the relay (not a worker) leased the outbox and published the first
                   half of a page; nothing was marked enqueued.

``--transport`` names the transport as the settings do (default: the store's queue).

Exit status 137 means it died where asked; anything else is a failure of the test.

``--channel-json`` replaces the channel's settings (a real adapter against the
sandbox speaking its dialect, with its templates): its credentials come from the
environment, as the CLI's do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from tidings.admission.relay import relay_pass
from tidings.config.settings import Settings
from tidings.core.model import OutgoingMessage, SendRequest
from tidings.core.outcomes import Outcome
from tidings.core.states import State
from tidings.runtime import build_runtime
from tidings.stores.base import Change, Claim, ClaimKind

POINTS = ("after_claim", "after_send", "after_reply", "after_commit", "before_ack",
          "during_publish")
DIED = 137


def die() -> None:
    os._exit(DIED)


class Proxy:
    """Delegates everything to ``inner``; subclasses cut in where the crash happens."""

    def __init__(self, inner: Any, point: str) -> None:
        self.inner = inner
        self.point = point

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class CrashingStore(Proxy):
    async def intent_claim_many(self, keys: Sequence[str], **kw: Any) -> list[Claim]:
        claims: list[Claim] = await self.inner.intent_claim_many(keys, **kw)
        if self.point == "after_claim" and any(c.kind is ClaimKind.CLAIMED for c in claims):
            die()
        return claims

    def acks_commit_with(self, transport: object) -> bool:
        # before_ack is the point between an outcome's commit and its ack: where acks
        # commit with their outcomes (the store's own queue) there is no such point, so
        # the worker is made to ack apart to reach it.
        return self.point != "before_ack" and bool(self.inner.acks_commit_with(transport))

    async def intent_apply_many(self, changes: Sequence[Change], **kw: Any) -> list[str]:
        applied: list[str] = await self.inner.intent_apply_many(changes, **kw)
        if self.point == "after_commit" and any(
            c.key in applied and c.from_state is State.CLAIMED for c in changes
        ):
            die()
        return applied


class CrashingTransport(Proxy):
    def __init__(self, inner: Any, point: str) -> None:
        super().__init__(inner, point)
        self.name = inner.name
        self.notifies = inner.notifies

    async def ack(self, queue: str, receipts: Sequence[str]) -> None:
        if self.point == "before_ack" and receipts:
            die()
        await self.inner.ack(queue, receipts)

    async def publish(self, queue: str, messages: Sequence[OutgoingMessage], *,
                      now: float) -> None:
        if self.point == "during_publish" and len(messages) > 1:
            await self.inner.publish(queue, messages[:len(messages) // 2], now=now)
            die()
        await self.inner.publish(queue, messages, now=now)


class CrashingProvider(Proxy):
    def __init__(self, inner: Any, point: str, exit_after_s: float) -> None:
        super().__init__(inner, point)
        self.name = inner.name
        self.supports_lookup = inner.supports_lookup
        self.exit_after_s = exit_after_s
        self.armed = False

    async def send(self, request: SendRequest) -> Outcome:
        if self.point == "after_send" and not self.armed:
            self.armed = True
            asyncio.get_running_loop().call_later(self.exit_after_s, die)
        outcome: Outcome = await self.inner.send(request)
        if self.point == "after_reply":
            die()
        return outcome


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the SQLite file")
    parser.add_argument("--url", required=True, help="the sandbox server's base URL")
    parser.add_argument("--crash-at", required=True, choices=POINTS)
    parser.add_argument("--lease-s", type=float, default=1.0)
    parser.add_argument("--visibility-s", type=float, default=1.5)
    parser.add_argument("--exit-after-ms", type=float, default=50.0)
    parser.add_argument("--give-up-s", type=float, default=10.0)
    parser.add_argument("--channel", default="email")
    parser.add_argument("--channel-json", help="the channel's settings, as JSON")
    parser.add_argument("--transport", default="sql", help="the setting transport")
    parser.add_argument("--relay-lease-s", type=float, default=30.0,
                        help="the relay's publish lease (during_publish)")
    args = parser.parse_args(argv)

    channel = (json.loads(args.channel_json) if args.channel_json
               else {"provider": {"kind": "sandbox", "url": args.url}})
    settings = Settings.parse({
        "store": f"sqlite:///{args.db}",
        "transport": args.transport,
        "channels": {args.channel: channel},
        "worker": {"lease_s": args.lease_s, "visibility_s": args.visibility_s},
        "scheduler": {"relay_lease_s": args.relay_lease_s},
    })
    rt = await build_runtime(settings, migrate=False)
    rt.store = CrashingStore(rt.store, args.crash_at)
    rt.transport = CrashingTransport(rt.transport, args.crash_at)
    if args.crash_at == "during_publish":
        try:
            await relay_pass(rt.store, rt.transport, now=rt.clock.now(),
                             config=rt.relay_config())
        finally:
            await rt.close()
        print("the relay found nothing to publish", file=sys.stderr)
        return 1
    rt.providers[args.channel] = CrashingProvider(rt.provider(args.channel), args.crash_at,
                                                  args.exit_after_ms / 1000.0)
    worker = rt.worker(args.channel, f"crash-worker-{os.getpid()}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.give_up_s
    try:
        while loop.time() < deadline:
            if not await worker.run_once():
                await asyncio.sleep(0.05)
    finally:
        await rt.close()
    print(f"did not reach {args.crash_at} within {args.give_up_s} s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
