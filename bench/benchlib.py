"""Shared plumbing for the benchmarks: child processes, resource figures, store files.

Every measured run happens in a child process started with ``spawn``, so the figures
(peak RSS above all) belong to that run alone and not to the parent that set it up.
A child reports back one picklable dict through a pipe.
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import shutil
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import tidings
from tidings.stores.sqlite_db import URL_PREFIX

SPAWN = multiprocessing.get_context("spawn")

Report = dict[str, Any]


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def now_s() -> float:
    """A monotonic clock comparable between processes of this machine (CLOCK_MONOTONIC)."""
    return time.monotonic()


def sqlite_url(path: Path) -> str:
    return f"{URL_PREFIX}{path}"


def path_of(url: str) -> Path:
    if not url.startswith(URL_PREFIX) or len(url) == len(URL_PREFIX):
        raise SystemExit(f"--store: {url!r} is not of the form sqlite:///path/to/file.db")
    return Path(url[len(URL_PREFIX):])


@contextmanager
def bench_dir(store: str | None, *, keep: bool) -> Iterator[Path]:
    """The folder where a run's database files go.

    Without ``--store`` it is a fresh temporary folder, removed afterwards unless
    ``keep``. With ``--store sqlite:///dir/name.db`` it is ``dir`` (so a RAM disk or
    another disk can be measured), and the benchmark refuses to reuse existing files.
    """
    if store is not None:
        folder = path_of(store).resolve().parent
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    folder = Path(tempfile.mkdtemp(prefix="tidings-bench-"))
    try:
        yield folder
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def fresh_file(path: Path) -> Path:
    """``path``, refusing to measure on top of a database left by another run."""
    for candidate in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if candidate.exists():
            raise SystemExit(f"{candidate} exists; the benchmark needs a fresh database file "
                             "(delete it or name another --store)")
    return path


def _child_entry(target: Callable[..., Report], conn: Connection, args: tuple[Any, ...]) -> None:
    try:
        result = target(*args)
    except BaseException as exc:  # reported to the parent, which raises it
        conn.send({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        raise
    conn.send(result)
    conn.close()


def run_child(target: Callable[..., Report], *args: Any) -> Report:
    """Run ``target(*args)`` in a spawned process and return the dict it returned."""
    receive, send = SPAWN.Pipe(duplex=False)
    process = SPAWN.Process(target=_child_entry, args=(target, send, args))
    process.start()
    send.close()
    try:
        result: Report = receive.recv()
    except EOFError:
        process.join()
        raise RuntimeError(f"{target.__name__} died with exit code {process.exitcode}") from None
    process.join()
    if "error" in result:
        raise RuntimeError(f"{target.__name__} failed: {result['error']}\n{result['traceback']}")
    return result


def source_revision() -> Report:
    """Which tidings was measured: its folder, and the git commit (dirty or not) if any."""
    folder = Path(tidings.__file__).resolve().parent
    revision: Report = {"package": str(folder)}
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder,
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=folder,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return revision
    return {**revision, "commit": commit, "src_dirty": bool(dirty)}


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def emit(report: Report, *, as_json: bool, summary: Callable[[Report], str]) -> None:
    """Print one JSON object, or a readable summary."""
    if as_json:
        print(json.dumps(report, indent=2, sort_keys=False))
    else:
        print(summary(report))


def per_s(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def quantile(values: list[float], q: float) -> float:
    """The value at quantile ``q`` (0 to 1) of ``values`` (nearest rank; 0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rounded(value: float, digits: int = 3) -> float:
    return round(value, digits)
