"""A channel worker process whose provider raises at random.

Used by ``test_send_faults.py``. It serves the ``email`` channel the way ``tidings
worker`` does (``build_runtime`` from settings, ``serve_worker`` with the reconciler
beside it, JSON logs on stderr, SIGTERM to stop), with the sandbox-over-HTTP provider
wrapped in ``providers.faults.RaisingProvider``: each send raises before reaching the
sandbox with probability ``--before``, or after the sandbox accepted it with
probability ``--after``. On its way out it prints what the provider did as one JSON
line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
from collections.abc import Sequence
from dataclasses import asdict

from tidings.config.settings import Settings
from tidings.core.logs import configure_logging
from tidings.processes.service import serve_worker
from tidings.providers.faults import RaisingProvider
from tidings.runtime import build_runtime


def settings_for(store: str, url: str) -> Settings:
    """The settings of the test's own runtime and of every fault worker."""
    return Settings.parse({
        "store": store,
        "channels": {"email": {"provider": {"kind": "sandbox", "url": url}}},
        "worker": {"lease_s": 2.0, "visibility_s": 3.0, "reconcile_every_s": 0.3},
        "reconciler": {"uncertain_after_s": 0.2, "lost_after_s": 2.0},
        # Room for a long run of raises before the send: every intent must get through.
        "retry": {"max_failures": 12, "base_s": 0.02, "cap_s": 0.2},
    })


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="the store URL")
    parser.add_argument("--url", required=True, help="the sandbox server's base URL")
    parser.add_argument("--before", type=float, required=True)
    parser.add_argument("--after", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    configure_logging("json", "info")
    rt = await build_runtime(settings_for(args.store, args.url), migrate=False)
    provider = RaisingProvider(rt.provider("email"), before=args.before, after=args.after,
                               rng=random.Random(args.seed))
    rt.providers["email"] = provider
    try:
        await serve_worker(rt, "email", worker_id=f"fault-worker-{os.getpid()}")
    finally:
        await rt.close()
        print(json.dumps(asdict(provider.counts)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
