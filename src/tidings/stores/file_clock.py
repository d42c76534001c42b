"""The reference clock of a store kept in a file: the time the kernel stamps on a write.

Every process of a SQLite store runs on the host that holds its file, so that host's
kernel clock is the one they share. It is read the way the file system reads it: one
byte written to an unnamed file beside the database, and the modification time the
kernel gave it. A process whose own idea of the time is off (a library that fakes it)
still reads the kernel's. The resolution is the file system's timestamp granularity (a
scheduler tick on the usual ones, a few milliseconds; a whole second on FAT), below
what leases and heartbeats need.
"""

from __future__ import annotations

import os
import tempfile
from typing import BinaryIO


class FileClock:
    """Reads the kernel's clock through a file in ``directory`` (the system's temporary
    folder when that one cannot hold one). The file has no name (``O_TMPFILE`` where the
    file system has it, else made and unlinked at once) and goes with ``close``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._file: BinaryIO | None = None

    def _open(self) -> BinaryIO:
        try:
            return tempfile.TemporaryFile(dir=self.directory or None, buffering=0)
        except OSError:
            return tempfile.TemporaryFile(buffering=0)

    def read(self) -> float:
        """The kernel's time now, in epoch seconds."""
        if self._file is None:
            self._file = self._open()
        fd = self._file.fileno()
        os.pwrite(fd, b"t", 0)
        return os.fstat(fd).st_mtime_ns / 1e9

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
