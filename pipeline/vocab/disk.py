"""Files on disk, handled the same way by both sides. Standard library only.

- a full disk, said the same way by the caches' writers (pipeline.data.files) and the
  report's staged folder (analysis.report): ``DiskFullError``, ``disk_full``;
- a new file written whole or not at all, never over an existing one, its missing folders
  made after every check and removed again on failure: ``write_new_file`` (predict --write's
  sweep file, pipeline.next_sweep), ``new_file_problem``, ``missing_folders``.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from pipeline.vocab.store import folder_problem


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


class NewFileError(ValueError):
    """A new file that cannot be written; the message names the option and the path."""


def missing_folders(folder: Path) -> list[Path]:
    """The folders of ``folder`` that do not exist yet, outermost first: what a writer would
    make, and remove again on failure. "." and ".." name no folder of their own (rmdir of
    "a/.." would be the folder above), so they are passed over."""
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        # "new/../old" does not exist while new does not, yet it is old once the writer made
        # new: a folder that exists under its normalised name is not the writer's to remove.
        if folder.name not in (".", "..") and not os.path.lexists(os.path.normpath(folder)):
            missing.append(folder)
        folder = folder.parent
    return missing[::-1]


def new_file_problem(path: Path, option: str) -> str | None:
    """Why no file may be created at ``path`` (there is one, or its folder is not a writable
    folder and cannot be made), naming ``option`` and the path; None if one may. Creates
    nothing."""
    try:
        there = os.path.lexists(path)
    except (OSError, ValueError) as e:  # a name over the limit; a NUL byte
        return f"{option} {path}: {e}"
    if there:
        return f"{option} {path}: exists; {option} never replaces a file (give a new name)"
    if problem := folder_problem(path.parent):
        return f"{option} {path}: {problem}"
    return None


def write_new_file(path: Path, text: str, option: str) -> None:
    """Write ``text`` to a new file at ``path``, whole or not at all (a temporary file in the
    same folder, then renamed). The folders it needs are created here, after every check, and
    removed again if the write fails. NewFileError naming ``option`` and the path."""
    if problem := new_file_problem(path, option):
        raise NewFileError(problem)
    made: list[Path] = []
    tmp, done = None, False
    try:
        for folder in missing_folders(Path.cwd() / path.parent):
            folder.mkdir()
            made.append(folder)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if os.path.lexists(path):  # made meanwhile by another process: still never replaced
            raise NewFileError(f"{option} {path}: exists; {option} never replaces a file")
        os.replace(tmp, path)
        done = True
    except OSError as e:
        raise NewFileError(f"{option} {path}: cannot write: {e.strerror or e}") from e
    finally:
        if not done:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            for folder in reversed(made):
                try:
                    folder.rmdir()
                except OSError:
                    break  # not empty: someone else's file went in meanwhile
