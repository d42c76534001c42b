"""The producer side every adapter shares: ``python -m systems.<name> enqueue --n N``.

The adapter gives a function that enqueues jobs ``first .. first+n-1`` the way its users
would (its own bulk API where it has one); this times it and prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable

Enqueue = Callable[[range], None] | Callable[[range], Awaitable[None]]


def main(enqueue: Enqueue, how: str) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["enqueue"])
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--first", type=int, default=0)
    args = parser.parse_args()
    ids = range(args.first, args.first + args.n)
    start = time.perf_counter()
    if inspect.iscoroutinefunction(enqueue):
        asyncio.run(enqueue(ids))
    else:
        enqueue(ids)
    elapsed = time.perf_counter() - start
    print(json.dumps({"n": args.n, "elapsed_s": elapsed, "how": how}), flush=True)
