"""Crash-safe files for the caches: atomic writes (temp file, fsync, rename), a file lock
between processes building the same cache, and file checksums."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from pipeline.vocab.disk import DiskFullError, disk_full  # their home: shared with the report


@contextmanager
def _atomic_file(path: Path) -> Iterator[BinaryIO]:
    """Write to a temp file in path's folder, fsync, then rename over path: readers see the
    old file or the complete new one, never a partial one (a crash leaves only a .tmp-*).
    A full disk raises DiskFullError (the temp file removed, the old file intact)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.tmp-")
    written = 0
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            written = f.tell()
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        written = written or _size(tmp)
        Path(tmp).unlink(missing_ok=True)
        raise disk_full(e, path, written, at_least=True) from e
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _atomic_write(path: Path, data: bytes) -> str:
    """Atomically write `data` to `path`; returns its sha256 hex."""
    try:
        with _atomic_file(path) as f:
            f.write(data)
    except DiskFullError as e:  # the size is known here: say it exactly
        raise disk_full(e, path, len(data)) from e.__cause__
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable on POSIX (directories cannot be opened on Windows)."""
    if os.name == "posix":
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Exclusive lock between processes building the same entry (flock; released on exit or
    process death). Without fcntl (Windows) we rely on atomic renames alone."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):  # 4 MiB reads
            h.update(chunk)
    return h.hexdigest()


# --- batches -------------------------------------------------------------------------------
