"""Processes taking turns at one SQLite file's write lock: SQLite's busy handler against
tidings' own wait (``stores.sqlite_db._take_write_lock``).

    python bench/sqlite_write_lock.py [--processes 3] [--n 300] [--hold-ms 1] [--rounds 3]

Each process runs ``--n`` write transactions (BEGIN IMMEDIATE, one insert, ``--hold-ms``
of work inside the transaction, COMMIT) with the same time of work outside it between
two, all starting together on one WAL file. Reported per round and way of waiting: the
wall time of the slowest process, and ``floor`` = processes x n x hold, the time the
lock must be held in all (no way of waiting beats it). SQLite's handler sleeps 1, 2,
5, 10 … 100 ms between tries, so a waiter wakes well after the lock was freed; tidings
tries again a fraction of a millisecond apart. Compare the two in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import sqlite3
import tempfile
import time

from tidings.stores import queries
from tidings.stores.sqlite_db import _take_write_lock


def _worker(path: str, ours: bool, n: int, hold_s: float, done: mp.Queue[float],
            start: mp.synchronize.Event) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 15000")
    sql = queries.load("sqlite")
    start.wait()
    began = time.perf_counter()
    for i in range(n):
        if ours:
            _take_write_lock(conn, "BEGIN IMMEDIATE", sql)
        else:
            conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?)", (i,))
        end = time.perf_counter() + hold_s
        while time.perf_counter() < end:  # work inside the transaction
            pass
        conn.execute("COMMIT")
        time.sleep(hold_s)  # the rest of the pipeline, outside it
    done.put(time.perf_counter() - began)


def one_round(folder: str, ours: bool, processes: int, n: int, hold_s: float) -> float:
    path = os.path.join(folder, f"lock-{'ours' if ours else 'handler'}.db")
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)
    setup = sqlite3.connect(path)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE t (x)")
    setup.close()
    done: mp.Queue[float] = mp.Queue()
    start = mp.Event()
    workers = [mp.Process(target=_worker, args=(path, ours, n, hold_s, done, start))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    time.sleep(0.5)
    start.set()
    walls = [done.get() for _ in workers]
    for worker in workers:
        worker.join()
    return max(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--n", type=int, default=300, help="transactions per process")
    parser.add_argument("--hold-ms", type=float, default=1.0,
                        help="work inside each transaction, and between two")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    floor = args.processes * args.n * args.hold_ms / 1000
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.rounds):
            for ours in (False, True):
                wall = one_round(folder, ours, args.processes, args.n, args.hold_ms / 1000)
                print(f"{'tidings wait ' if ours else 'busy handler '} {wall:6.2f} s   "
                      f"floor {floor:.2f} s   ratio {wall / floor:.2f}", flush=True)


if __name__ == "__main__":
    main()
