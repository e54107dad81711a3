"""Reading a ledger without creating one: a read-only command (analysis.fit --sweep,
pipeline.sample, ...) pointed at a sqlite store that does not exist must say so, not leave
MLflow to create a fresh ~1 MB database (with its schema migrations) as a side effect."""

from __future__ import annotations

import os
from pathlib import Path


def sqlite_file(uri: str) -> Path | None:
    """The database file of a sqlite URI (sqlite:///relative or sqlite:////absolute, in any
    dialect spelling that MLflow opens: sqlite+pysqlite:///, SQLite:///), else None (a
    tracking server, a folder store). Every spelling must be seen here: a store not seen as
    a file gets no creation lock and no artifact folder beside it (pipeline/tracking.py)."""
    scheme, sep, rest = uri.strip().partition(":///")
    if not sep or scheme.lower().split("+", 1)[0] != "sqlite":
        return None
    return Path(rest)


def missing_store(uri: str) -> str | None:
    """Why `uri` holds no ledger to read (None when it may): a sqlite file that is not
    there. The message says where it looked and how to point elsewhere."""
    db = sqlite_file(uri)
    if db is None or db.is_file():
        return None
    return (f"no MLflow store at {uri} (no file {db}): run the command in the sweep's "
            "working folder, or set MLFLOW_TRACKING_URI (or --tracking-uri) to its store")


def folder_problem(folder: Path) -> str | None:
    """Why files cannot be written under `folder` (None if they can). Creates nothing: the
    folder, or the first of its parents that exists (the writer creates the rest), must be a
    writable folder, and every name still to create must fit the file system's limit (255
    bytes on ext4 and tmpfs; os.stat raises ENAMETOOLONG on a longer one)."""
    # Joined, not resolved or normalised: "file/.." is no folder to the OS, whatever its text.
    folder = Path.cwd() / folder
    missing: list[str] = []
    while not _exists(folder) and folder != folder.parent:
        missing.append(folder.name)
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    limit = os.pathconf(folder, "PC_NAME_MAX")
    for name in reversed(missing):
        if len(os.fsencode(name)) > limit:
            return f"the name {name[:40]}... is {len(os.fsencode(name))} bytes, over the " \
                   f"file system's {limit}"
    return None


def _exists(path: Path) -> bool:
    """Path.exists, False for a name the OS refuses to look up (too long)."""
    try:
        return path.exists()
    except OSError:
        return False
