"""Pack a sweep's ledger into one portable archive, and unpack it in another folder to resume.

A ledger is what `python -m pipeline.sweep` leaves in its working folder: the MLflow sqlite
store (mlflow.db), its artifacts (mlartifacts/) and the runs' checkpoints (checkpoints/). A
study longer than one session on a machine that keeps no folder between sessions is committed
as this archive and resumed from it: finished run ids are skipped, and a run that was stopped
goes on from its last checkpoint.

The store holds absolute paths into the folder (each experiment's artifact location, each
run's artifact URI, the checkpoint_dir tag), so `pack` writes the folder as PLACEHOLDER in
every text column of every table and `unpack` writes the new folder in its place. `pack`
refuses a store in which the folder's path would survive, and an OUT that exists (unless
--force) or is one of the ledger's own files (even with --force); neither command leaves a
half-written archive or ledger behind.

An archive may come from anyone, so `unpack` trusts nothing in it: it writes only regular files
and folders under the ledger's three names, within size limits (untrusted_tar.py), and checks
the store read-only before it writes a byte to it (untrusted_store.py). Every refusal is one
`error:` line and exit status 2, with nothing left behind.

    python -m pipeline.ledger pack   OUT.tar.gz [--folder F] [--no-checkpoints] [--force]
    python -m pipeline.ledger unpack ARCHIVE    [--folder F]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import sys
import tarfile
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.ledger.untrusted_store import (
    PLACEHOLDER,
    check_store,
    connect,
    localize,
    occurrences,
    rewrite,
    verify_localized,
)
from pipeline.ledger.untrusted_tar import (
    ARTIFACTS,
    CHECKPOINTS,
    DB,
    ENTRIES,
    LedgerArchiveError,
    extract,
)
from pipeline.vocab import keys

__all__ = ["PLACEHOLDER", "LedgerArchiveError", "Packed", "main", "pack", "unpack"]
# A finished or diverged run is never trained again: its checkpoints only cost space (a
# 343k-parameter model with AdamW state is ~4 MB per checkpoint, two kept per run).
_DONE = (keys.STATUS_FINISHED, keys.STATUS_DIVERGED)


@dataclass(frozen=True)
class Packed:
    """What `pack` wrote."""

    archive: Path
    runs: dict[str, int]  # child runs by ledger status
    checkpoint_runs: tuple[str, ...]  # run ids whose checkpoints are in the archive
    bytes: int


def _prefix(folder: Path) -> str:
    return str(folder.resolve()).rstrip("/") + "/"


def _trials(db: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(run_id, status, checkpoint_dir) of every child run in the store."""
    rows = db.execute(
        "select r.value, s.value, coalesce(c.value, '') from tags r "
        "join tags s on s.run_uuid = r.run_uuid and s.key = ? "
        "left join tags c on c.run_uuid = r.run_uuid and c.key = 'checkpoint_dir' "
        "where r.key = ?", (keys.TAG_STATUS, keys.TAG_RUN_ID)).fetchall()
    return [(str(a), str(b), str(c)) for a, b, c in rows]


def _out_problem(folder: Path, out: Path, force: bool) -> str | None:
    """Why pack must not write OUT (None if it may): one of the ledger's own files, whatever
    --force says (`pack mlflow.db` once turned the store itself into a gzip file), or an
    existing file without --force."""
    target = out.resolve()  # a link to the store is the store
    own = [folder / (DB + suffix) for suffix in ("", "-journal", "-wal", "-shm")]
    trees = [folder / ARTIFACTS, folder / CHECKPOINTS]
    trees += [t.resolve() for t in trees]
    if target in own or any(target.is_relative_to(t) for t in trees):
        return (f"is the ledger's store or inside its {ARTIFACTS}/ or {CHECKPOINTS}/; pack never "
                "writes onto what it packs, --force or not")
    if out.is_dir():
        return "is a folder"
    if not target.parent.is_dir():
        return f"its folder {target.parent} does not exist"
    if os.path.lexists(out) and not force:
        return "exists; pack replaces a file only with --force"
    return None


def _files_only(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """tar.add's filter: a ledger holds files and folders only (unpack refuses anything else)."""
    if not (info.isreg() or info.isdir()):
        raise LedgerArchiveError(f"{info.name}: not a file or folder (a link?); unpack would "
                                 "refuse the archive: replace it by what it points to")
    return info


def _publish(made: Path, out: Path, force: bool) -> None:
    """Move the finished archive MADE to OUT; without FORCE, never over a file that appeared
    meanwhile (os.link fails if OUT exists: no window between the check and the write)."""
    if force:
        os.replace(made, out)
        return
    try:
        os.link(made, out)
    except FileExistsError as e:
        raise LedgerArchiveError(f"{out}: exists; pack replaces a file only with --force") from e
    except OSError:  # a filesystem without hard links
        if os.path.lexists(out):
            raise LedgerArchiveError(f"{out}: exists; pack replaces a file only with --force") from None
        os.replace(made, out)


def _snapshot(db_path: Path, copy: Path, prefix: str) -> list[tuple[str, str, str]]:
    """Copy the store to COPY with the folder's PREFIX written as PLACEHOLDER; returns its
    trials. The copy is made with sqlite's backup API: a consistent snapshot."""
    with closing(sqlite3.connect(db_path)) as src, closing(sqlite3.connect(copy)) as dst:
        src.backup(dst)
        trials = _trials(dst)
        rewrite(dst, prefix, PLACEHOLDER)
        dst.commit()
        left = (occurrences(dst, prefix.rstrip("/"))
                + occurrences(dst, urllib.parse.quote(prefix.rstrip("/"))))
        if left:
            raise LedgerArchiveError(
                f"{db_path}: the folder's path {prefix.rstrip('/')} is still in "
                f"{', '.join(left)} after rewriting it; the archive would not move")
        dst.execute("vacuum")
    return trials


def _add_checkpoints(tar: tarfile.TarFile, folder: Path, trials: list[tuple[str, str, str]]
                     ) -> list[str]:
    """Add what a resume needs of each run's checkpoints; returns the runs that had some."""
    kept = []
    for run_id, status, ckpt in sorted(trials):
        path = Path(ckpt)
        if not ckpt or not path.is_dir():
            continue
        # A stopped run resumes from its step_* files; a WSD trunk's branch_* states
        # (finished trunk or not) are where its branches start (pipeline/vocab/spec.py).
        wanted = [f for f in sorted(path.iterdir())
                  if (f.name.startswith("step_") and status not in _DONE
                      or f.name.startswith("branch_")) and not f.name.endswith(".tmp")]
        if not wanted:
            continue
        if not path.resolve().is_relative_to(folder):
            raise LedgerArchiveError(
                f"{folder / DB}: run {run_id}'s checkpoints are in {path}, outside {folder}; "
                "pack with --no-checkpoints (the run restarts from step 0) or move them")
        for f in wanted:
            tar.add(f, arcname=str(f.resolve().relative_to(folder)), filter=_files_only)
        kept.append(run_id)
    return kept


def pack(folder: Path, out: Path, *, checkpoints: bool = True, force: bool = False) -> Packed:
    """Write FOLDER's ledger to the gzipped tar OUT, the folder written as PLACEHOLDER.

    Packing never changes the ledger itself (the store is read through a snapshot). With
    `checkpoints`, the checkpoints of runs that are not finished or diverged are included
    (those are what a resume needs), and every WSD trunk's branch states (where its branches
    start). OUT must not exist unless FORCE, and is never one of the ledger's own files."""
    folder = folder.resolve()
    db_path = folder / DB
    if not db_path.is_file():
        raise LedgerArchiveError(f"{folder}: no {DB} here: run pack in (or --folder) the sweep's "
                                 "working folder")
    try:
        problem = _out_problem(folder, out, force)
    except OSError as e:  # a name too long for the file system, a folder we may not read
        problem = f"cannot be checked ({e.strerror or e})"
    if problem:
        raise LedgerArchiveError(f"{out}: {problem}")
    try:
        with tempfile.TemporaryDirectory(prefix=".ledger-pack-", dir=out.resolve().parent) as tmp:
            stage = Path(tmp)
            trials = _snapshot(db_path, stage / DB, _prefix(folder))
            runs: dict[str, int] = {}
            for _, status, _ in trials:
                runs[status] = runs.get(status, 0) + 1
            with tarfile.open(stage / "ledger.tar.gz", "w:gz") as tar:
                tar.add(stage / DB, arcname=DB)
                if (folder / ARTIFACTS).is_dir():
                    tar.add(folder / ARTIFACTS, arcname=ARTIFACTS, filter=_files_only)
                kept = _add_checkpoints(tar, folder, trials) if checkpoints else []
            _publish(stage / "ledger.tar.gz", out, force)
    except (OSError, sqlite3.Error, tarfile.TarError) as e:
        raise LedgerArchiveError(f"{out}: cannot pack {folder} ({type(e).__name__}: {e})") from e
    return Packed(out, runs, tuple(kept), out.stat().st_size)


def _first_missing(folder: Path) -> Path | None:
    """The topmost folder that `folder.mkdir(parents=True)` would create, or None."""
    missing = None
    while not folder.exists() and folder != folder.parent:
        missing, folder = folder, folder.parent
    return missing


def _remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _remove_created(folder: Path, top: Path | None) -> None:
    """Remove FOLDER and its parents up to TOP, the folders unpack made, if they are empty."""
    if top is None:
        return
    for path in (folder, *folder.parents):
        try:
            path.rmdir()
        except OSError:  # not empty: something else wrote there; left alone
            return
        if path == top:
            return


def unpack(archive: Path, folder: Path) -> int:
    """Extract ARCHIVE into FOLDER (made if absent) with PLACEHOLDER written as FOLDER.

    Refuses a folder that already holds a ledger, and an archive or store that is not a
    ledger as `pack` writes it. On any failure, nothing is left: no staging folder, no entry,
    and no FOLDER if unpack made it. Returns the number of trial runs in the store."""
    folder = folder.resolve()
    if not archive.is_file():
        raise LedgerArchiveError(f"{archive}: no such archive")
    if folder.exists() and not folder.is_dir():
        raise LedgerArchiveError(f"{folder}: not a folder")
    present = [e for e in ENTRIES if os.path.lexists(folder / e)]
    if present:
        raise LedgerArchiveError(f"{folder}: already holds {', '.join(present)}; unpack into an "
                                 "empty folder (nothing was changed)")
    created = _first_missing(folder)
    # The folder's times, put back on failure: the staging folder made and removed in it
    # changed them, and a refused archive leaves the folder as it was.
    times = None if created else (folder.stat().st_atime_ns, folder.stat().st_mtime_ns)
    stage: Path | None = None
    moved: list[Path] = []
    done = False
    try:
        folder.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=".ledger-unpack-", dir=folder))
        extract(archive, stage)
        check_store(stage / DB, folder, f"{archive}: {DB}")  # read-only; raises if not safe
        localize(stage / DB, folder)
        verify_localized(stage / DB, folder, f"{archive}: {DB}")
        with closing(connect(stage / DB, read_only=True)) as db:
            n = len(_trials(db))
        for entry in ENTRIES:
            if os.path.lexists(stage / entry):
                os.replace(stage / entry, folder / entry)
                moved.append(folder / entry)
        done = True
    except (OSError, sqlite3.Error, ValueError) as e:
        raise LedgerArchiveError(f"{archive}: cannot unpack into {folder} "
                                 f"({type(e).__name__}: {e})") from e
    finally:  # also on KeyboardInterrupt, and on SIGTERM (main makes it an exception)
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        if not done:
            _remove(moved)
            _remove_created(folder, created)
            if times:
                os.utime(folder, ns=times)
    return int(n)


@contextmanager
def _terminate_raises() -> Iterator[None]:
    """While a command runs, SIGTERM raises SystemExit, so that the `finally` blocks that
    remove a half-written staging folder run (SIGTERM's default ends the process at once)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.ledger",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="write the folder's ledger to a portable archive")
    p.add_argument("out", type=Path, help="the archive to write (.tar.gz)")
    p.add_argument("--folder", type=Path, default=Path("."), help="the sweep's working folder")
    p.add_argument("--no-checkpoints", action="store_true",
                   help="leave out the checkpoints of unfinished runs (they restart from step 0)")
    p.add_argument("--force", action="store_true",
                   help="replace OUT if it exists (never the ledger's own files)")
    u = sub.add_parser("unpack", help="extract an archive into a folder to resume the sweep there")
    u.add_argument("archive", type=Path)
    u.add_argument("--folder", type=Path, default=Path("."), help="an empty or new folder")
    args = parser.parse_args(argv)
    try:
        with _terminate_raises():
            if args.command == "pack":
                done = pack(args.folder, args.out, checkpoints=not args.no_checkpoints,
                            force=args.force)
                runs = ", ".join(f"{n} {s}" for s, n in sorted(done.runs.items()))
                print(f"wrote {done.archive} ({done.bytes / 1e6:.1f} MB): runs {runs or 'none'}; "
                      f"checkpoints of {len(done.checkpoint_runs)} unfinished run(s)")
            else:
                n = unpack(args.archive, args.folder)
                print(f"unpacked {n} run(s) into {args.folder.resolve()}; resume with "
                      f"`cd {args.folder} && python -m pipeline.sweep SWEEP_FILE`")
    except LedgerArchiveError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
