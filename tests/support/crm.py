"""What acceptance tests that run tidings as real processes share: a free local port,
and a customer database with the SQL audience query that pages it."""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Iterable
from pathlib import Path

QUERY = ("SELECT id, email FROM customers"
         " WHERE (:after IS NULL OR id > :after) ORDER BY id LIMIT :limit")


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def write_crm(path: Path, members: Iterable[tuple[str, str]] | None = None) -> Path:
    """A customers table (id, email) at ``path``: ``members``, or cust_001..cust_030."""
    if members is None:
        members = [(f"cust_{i:03d}", f"c{i}@example.com") for i in range(1, 31)]
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE customers (id TEXT PRIMARY KEY, email TEXT)")
        conn.executemany("INSERT INTO customers VALUES (?, ?)", members)
    conn.close()
    return path
