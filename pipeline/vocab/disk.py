"""A full disk, said the same way by both sides: the caches' writers (pipeline.data.files)
and the report's staged folder (analysis.report). Standard library only."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path


class DiskFullError(OSError):
    """No space left on the disk (or quota) a file was being written to. The message names
    the file, the bytes it needed and the bytes free; nothing partial was left behind."""


_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(err: OSError, path: Path, needed: int, *, at_least: bool = False) -> OSError:
    """err as a DiskFullError naming path, the bytes needed and free, when the disk is full;
    any other error as it is. at_least: `needed` is what was written when it ran out (the
    whole size was not known in advance)."""
    if err.errno not in _FULL:
        return err
    try:
        free = f"{shutil.disk_usage(path.parent).free:,} bytes free"
    except OSError:
        free = "free space unknown"
    size = f"more than {needed:,}" if at_least else f"{needed:,}"
    return DiskFullError(err.errno, f"no space left on the disk to write {path}: "
                                    f"{size} bytes needed, {free}")
