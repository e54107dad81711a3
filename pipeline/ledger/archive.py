"""Pack a sweep's ledger into one portable archive, and unpack it in another folder to resume.

A ledger is what `python -m pipeline.sweep` leaves in its working folder: the MLflow sqlite
store (mlflow.db), its artifacts (mlartifacts/) and the runs' checkpoints (checkpoints/). A
study longer than one session on a machine that keeps no folder between sessions is committed
as this archive and resumed from it: finished run ids are skipped, and a run that was stopped
goes on from its last checkpoint.

The store holds absolute paths into the folder (each experiment's artifact location, each
run's artifact URI, the checkpoint_dir tag), so `pack` writes the folder as PLACEHOLDER in
every text column of every table and `unpack` writes the new folder in its place. `pack`
refuses a store in which the folder's path would survive; neither command leaves a
half-written archive or ledger behind.

    python -m pipeline.ledger pack   OUT.tar.gz [--folder F] [--no-checkpoints]
    python -m pipeline.ledger unpack ARCHIVE    [--folder F]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tarfile
import tempfile
import urllib.parse
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from pipeline import keys

PLACEHOLDER = "/LEDGER_ROOT/"
DB = "mlflow.db"
ARTIFACTS = "mlartifacts"
CHECKPOINTS = "checkpoints"
ENTRIES = (DB, ARTIFACTS, CHECKPOINTS)
# A finished or diverged run is never trained again: its checkpoints only cost space (a
# 343k-parameter model with AdamW state is ~4 MB per checkpoint, two kept per run).
_DONE = (keys.STATUS_FINISHED, keys.STATUS_DIVERGED)


class LedgerArchiveError(RuntimeError):
    """The folder or archive cannot be packed or unpacked as asked; nothing was written."""


@dataclass(frozen=True)
class Packed:
    """What `pack` wrote."""

    archive: Path
    runs: dict[str, int]  # child runs by ledger status
    checkpoint_runs: tuple[str, ...]  # run ids whose checkpoints are in the archive
    bytes: int


def _prefix(folder: Path) -> str:
    return str(folder.resolve()).rstrip("/") + "/"


def _quoted(name: str) -> str:
    """An SQL identifier, quoted (the names come from the store, which may be untrusted)."""
    return '"' + name.replace('"', '""') + '"'


def _text_columns(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """(table, column) of every column that can hold a path, whatever MLflow's schema version."""
    tables = [r[0] for r in db.execute("select name from sqlite_master where type = 'table'")]
    out = []
    for table in tables:
        for _, column, kind, *_ in db.execute(f"pragma table_info({_quoted(table)})"):
            if kind.upper() in ("", "TEXT", "CLOB") or "CHAR" in kind.upper():
                out.append((_quoted(table), _quoted(column)))
    return out


def _replace_everywhere(db: sqlite3.Connection, old: str, new: str) -> None:
    for table, column in _text_columns(db):
        db.execute(f"update {table} set {column} = replace({column}, ?, ?) "
                   f"where instr({column}, ?) > 0", (old, new, old))


def _rewrite(db: sqlite3.Connection, old_prefix: str, new_prefix: str) -> None:
    """Replace a folder prefix, in file URIs first (percent-encoded: a folder with a space is
    file:///a/my%20dir/ there) and then as a plain path (tags such as checkpoint_dir)."""
    _replace_everywhere(db, "file://" + urllib.parse.quote(old_prefix),
                        "file://" + urllib.parse.quote(new_prefix))
    _replace_everywhere(db, old_prefix, new_prefix)


def _occurrences(db: sqlite3.Connection, text: str) -> list[str]:
    out = []
    for table, column in _text_columns(db):
        n = db.execute(f"select count(*) from {table} where instr({column}, ?) > 0",
                       (text,)).fetchone()[0]
        if n:
            out.append(f"{table}.{column} ({n} rows)")
    return out


def _trials(db: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(run_id, status, checkpoint_dir) of every child run in the store."""
    rows = db.execute(
        "select r.value, s.value, coalesce(c.value, '') from tags r "
        "join tags s on s.run_uuid = r.run_uuid and s.key = ? "
        "left join tags c on c.run_uuid = r.run_uuid and c.key = 'checkpoint_dir' "
        "where r.key = ?", (keys.TAG_STATUS, keys.TAG_RUN_ID)).fetchall()
    return [(str(a), str(b), str(c)) for a, b, c in rows]


def pack(folder: Path, out: Path, *, checkpoints: bool = True) -> Packed:
    """Write FOLDER's ledger to the gzipped tar OUT, the folder written as PLACEHOLDER.

    The store is copied with sqlite's backup API (a consistent snapshot), so packing a copy
    never changes the ledger itself. With `checkpoints`, the checkpoints of runs that are not
    finished or diverged are included (those are what a resume needs), and every WSD trunk's
    branch states (where its branches start)."""
    folder = folder.resolve()
    db_path = folder / DB
    if not db_path.is_file():
        raise LedgerArchiveError(f"{folder}: no {DB} here: run pack in (or --folder) the sweep's "
                                 "working folder")
    if out.resolve().is_relative_to(folder / ARTIFACTS):
        raise LedgerArchiveError(f"{out}: the archive cannot be written inside {ARTIFACTS}/")
    prefix = _prefix(folder)
    with tempfile.TemporaryDirectory(prefix=".ledger-pack-", dir=out.resolve().parent) as tmp:
        stage = Path(tmp)
        with closing(sqlite3.connect(db_path)) as src, closing(sqlite3.connect(stage / DB)) as dst:
            src.backup(dst)
            trials = _trials(dst)
            _rewrite(dst, prefix, PLACEHOLDER)
            dst.commit()
            left = (_occurrences(dst, prefix.rstrip("/"))
                    + _occurrences(dst, urllib.parse.quote(prefix.rstrip("/"))))
            if left:
                raise LedgerArchiveError(
                    f"{db_path}: the folder's path {prefix.rstrip('/')} is still in "
                    f"{', '.join(left)} after rewriting it; the archive would not move")
            dst.execute("vacuum")
        runs: dict[str, int] = {}
        for _, status, _ in trials:
            runs[status] = runs.get(status, 0) + 1
        kept = []
        with tarfile.open(stage / "ledger.tar.gz", "w:gz") as tar:
            tar.add(stage / DB, arcname=DB)
            if (folder / ARTIFACTS).is_dir():
                tar.add(folder / ARTIFACTS, arcname=ARTIFACTS)
            for run_id, status, ckpt in sorted(trials) if checkpoints else []:
                path = Path(ckpt)
                if not ckpt or not path.is_dir():
                    continue
                # A stopped run resumes from its step_* files; a WSD trunk's branch_* states
                # (finished trunk or not) are where its branches start (pipeline/spec.py).
                wanted = [f for f in sorted(path.iterdir())
                          if (f.name.startswith("step_") and status not in _DONE
                              or f.name.startswith("branch_")) and not f.name.endswith(".tmp")]
                if not wanted:
                    continue
                if not path.resolve().is_relative_to(folder):
                    raise LedgerArchiveError(
                        f"{db_path}: run {run_id}'s checkpoints are in {path}, outside {folder}; "
                        "pack with --no-checkpoints (the run restarts from step 0) or move them")
                for f in wanted:
                    tar.add(f, arcname=str(f.resolve().relative_to(folder)))
                kept.append(run_id)
        os.replace(stage / "ledger.tar.gz", out)
    return Packed(out, runs, tuple(kept), out.stat().st_size)


def unpack(archive: Path, folder: Path) -> int:
    """Extract ARCHIVE into FOLDER (made if absent) with PLACEHOLDER written as FOLDER.
    Refuses a folder that already holds a ledger. Returns the number of trial runs in the store."""
    folder = folder.resolve()
    if not archive.is_file():
        raise LedgerArchiveError(f"{archive}: no such archive")
    present = [e for e in ENTRIES if (folder / e).exists()]
    if present:
        raise LedgerArchiveError(f"{folder}: already holds {', '.join(present)}; unpack into an "
                                 "empty folder (nothing was changed)")
    try:
        with tarfile.open(archive, "r:*") as tar:
            names = {m.name.split("/")[0] for m in tar.getmembers()}
    except (tarfile.TarError, OSError, EOFError) as e:
        raise LedgerArchiveError(f"{archive}: cannot be read as a gzipped tar ({e})") from e
    if DB not in names or not names <= set(ENTRIES):
        raise LedgerArchiveError(f"{archive}: not a ledger archive (it holds {sorted(names)}, "
                                 f"expected {DB} and optionally {ARTIFACTS}/, {CHECKPOINTS}/)")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".ledger-unpack-", dir=folder) as tmp:
        stage = Path(tmp)
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(stage, filter="data")  # "data": no absolute paths, links out, devices
        with closing(sqlite3.connect(stage / DB)) as db:
            _rewrite(db, PLACEHOLDER, _prefix(folder))
            db.commit()
            n = len(_trials(db))
        for entry in ENTRIES:
            if (stage / entry).exists():
                os.replace(stage / entry, folder / entry)
    return int(n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.ledger",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="write the folder's ledger to a portable archive")
    p.add_argument("out", type=Path, help="the archive to write (.tar.gz)")
    p.add_argument("--folder", type=Path, default=Path("."), help="the sweep's working folder")
    p.add_argument("--no-checkpoints", action="store_true",
                   help="leave out the checkpoints of unfinished runs (they restart from step 0)")
    u = sub.add_parser("unpack", help="extract an archive into a folder to resume the sweep there")
    u.add_argument("archive", type=Path)
    u.add_argument("--folder", type=Path, default=Path("."), help="an empty or new folder")
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            done = pack(args.folder, args.out, checkpoints=not args.no_checkpoints)
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
