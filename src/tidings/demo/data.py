"""The demo's customers: a SQLite table the digest campaign reads with a SQL audience."""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from pathlib import Path

INACTIVE_SHARE = 0.08
REJECT_EVERY = 4001  # a few addresses the provider refuses for good
FLAKY = 3  # recipients whose sends always fail with 5xx: their retry budget runs out

AUDIENCE_QUERY = (
    "SELECT id, email, phone, active, name FROM customers "
    "WHERE (:after IS NULL OR id > :after) ORDER BY id LIMIT :limit"
)


@dataclass(frozen=True, kw_only=True)
class Customers:
    path: Path
    total: int
    active: list[tuple[str, str, str]]
    """``(id, email, phone)`` of every active customer."""


def customer_id(index: int) -> str:
    return f"cust_{index:07d}"


def seed_customers(path: Path, count: int, seed: int) -> Customers:
    """Write ``count`` customers; some inactive, a few with refused or failing addresses."""
    rng = random.Random(seed)
    flaky = set(rng.sample(range(count), min(FLAKY, count)))
    rows = []
    active = []
    for index in range(count):
        cid = customer_id(index)
        if index in flaky:
            email = f"user{index}@flaky.example"
        elif index % REJECT_EVERY == REJECT_EVERY - 1:
            email = f"user{index}@invalid.example"
        else:
            email = f"user{index}@example.com"
        phone = f"+1555{index:07d}"
        is_active = rng.random() >= INACTIVE_SHARE
        rows.append((cid, email, phone, int(is_active), f"Customer {index}"))
        if is_active:
            active.append((cid, email, phone))
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id TEXT PRIMARY KEY, email TEXT, phone TEXT, "
                     "active INTEGER NOT NULL, name TEXT)")
        conn.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?)", rows)
    return Customers(path=path, total=count, active=active)
