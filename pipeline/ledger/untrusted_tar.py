"""Extract a ledger archive that may come from anyone into a staging folder, trusting nothing in it.

tarfile's own extraction is not used, not even with filter="data": before Python 3.11.13 /
3.12.11 / 3.13.4 that filter lets through a chain of symlinks whose resolved path exceeds
PATH_MAX, and a link or file written through it lands outside the destination
(CVE-2025-4517; also CVE-2025-4138, CVE-2025-4330). Here the members are read one by one and
only regular files and folders are written, each at a path built from its checked name and
opened with O_EXCL | O_NOFOLLOW. No link of any kind is ever created, so no later member can
be written through one. Sizes are counted on the bytes actually read, so a gzip bomb stops at
the limit; the caller removes the staging folder on any failure.
"""

from __future__ import annotations

import gzip
import os
import tarfile
import zlib
from pathlib import Path
from typing import IO

DB = "mlflow.db"
ARTIFACTS = "mlartifacts"
CHECKPOINTS = "checkpoints"
ENTRIES = (DB, ARTIFACTS, CHECKPOINTS)

# The limits. The committed ledgers (reports/*/ledger.tar.gz) are 0.2-3.5 MB packed and ~25 MB
# unpacked in ~200 members; one packed mid-sweep adds two checkpoints per unfinished run (~4 MB
# each for the models trained here). The limits are far above any real ledger and far below
# what fills a disk or hangs a machine for a hostile one.
MAX_MEMBERS = 100_000
MAX_MEMBER_BYTES = 2 * 2**30
MAX_TOTAL_BYTES = 4 * 2**30
# And no more than MAX_RATIO times the archive's own size, past the first RATIO_FREE_BYTES:
# the committed ledgers unpack to 7-11 times their size (checkpoints, being weights, to ~1),
# while gzip reaches ~1000 (a 1 MB archive of zeros unpacks to 1 GiB).
MAX_RATIO = 100
RATIO_FREE_BYTES = 256 * 2**20
# A pax or GNU long-name header holds a path (PATH_MAX is 4096 bytes) and a few numbers;
# tarfile reads such a header whole into memory before it returns the member it describes.
MAX_HEADER_BYTES = 64 * 2**10
_CHUNK = 2**20

_KINDS = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link",
          tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device",
          tarfile.FIFOTYPE: "a FIFO", tarfile.CONTTYPE: "a contiguous file",
          tarfile.GNUTYPE_SPARSE: "a sparse file"}
_FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)


class LedgerArchiveError(RuntimeError):
    """The folder or archive cannot be packed or unpacked as asked; nothing was written."""


def shown(value: str, limit: int = 120) -> str:
    """An untrusted string for a one-line message: quoted, escaped (a name may hold a newline
    or a terminal escape) and cut."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."


class _BoundedTarInfo(tarfile.TarInfo):
    """A TarInfo that refuses an oversized pax or GNU long-name header before tarfile reads it
    into memory (those two methods of tarfile are where it does, in every Python 3)."""

    def _check_header(self) -> None:
        if not 0 <= self.size <= MAX_HEADER_BYTES:  # negative: tarfile would read to the end
            raise LedgerArchiveError(f"an extended tar header of {self.size} bytes (at most "
                                     f"{MAX_HEADER_BYTES} in a ledger archive)")

    def _proc_gnulong(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        self._check_header()
        return super()._proc_gnulong(tar)  # type: ignore[misc]

    def _proc_pax(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        self._check_header()
        return super()._proc_pax(tar)  # type: ignore[misc]

    def _proc_sparse(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        # An old-GNU sparse member's chain of "isextended" blocks is read whole into a map
        # before the member is returned (a 178 KB archive took 168 MB and 8.7 s); `pack`
        # never writes one, so it is refused before the chain is read.
        raise LedgerArchiveError(f"member {shown(self.name)}: a sparse file (pack writes none)")


def _parts(member: tarfile.TarInfo) -> tuple[str, ...]:
    """The checked path of MEMBER inside the ledger, as components; raises if it is not one
    that `pack` writes (mlflow.db as a file; mlartifacts/ and checkpoints/ as folders)."""
    name = member.name.rstrip("/") if member.isdir() else member.name
    what = f"member {shown(member.name)}"
    if not name or name.startswith("/"):
        raise LedgerArchiveError(f"{what}: an empty or absolute name")
    if "\\" in name or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise LedgerArchiveError(f"{what}: a backslash, NUL or control character in its name")
    parts = tuple(name.split("/"))
    if any(p in ("", ".", "..") for p in parts):
        raise LedgerArchiveError(f"{what}: an empty, '.' or '..' component in its name")
    top = parts[0]
    if top == DB and (len(parts) > 1 or member.isdir()):
        raise LedgerArchiveError(f"{what}: {DB} must be a file at the top of the archive")
    if top not in ENTRIES:
        raise LedgerArchiveError(f"not a ledger archive: {what} is outside {DB}, {ARTIFACTS}/ "
                                 f"and {CHECKPOINTS}/")
    if top != DB and len(parts) == 1 and not member.isdir():
        raise LedgerArchiveError(f"{what}: {top} must be a folder")
    return parts


def _over_budget(member: str, budget: int) -> LedgerArchiveError:
    return LedgerArchiveError(
        f"member {shown(member)}: the archive unpacks to more than {budget} bytes (the limit "
        f"for a ledger: {MAX_RATIO} times its packed size, at least {RATIO_FREE_BYTES} bytes, "
        f"at most {MAX_TOTAL_BYTES})")


def _copy(source: IO[bytes], target: Path, member: str, total: int, budget: int) -> int:
    """Copy SOURCE into the new file TARGET, counting the bytes read against the limits (BUDGET
    for the whole archive) before writing them; returns the new total."""
    written = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(target, flags, 0o644), "wb") as out:
        while chunk := source.read(_CHUNK):
            written += len(chunk)
            if written > MAX_MEMBER_BYTES:
                raise LedgerArchiveError(f"member {shown(member)}: more than {MAX_MEMBER_BYTES} "
                                         "bytes (the limit for one file in a ledger)")
            if total + written > budget:
                raise _over_budget(member, budget)
            out.write(chunk)
    return total + written


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, parts: tuple[str, ...],
                    stage: Path, total: int, budget: int) -> int:
    """Write one member, its name checked into PARTS, under STAGE; returns the bytes written
    so far."""
    if member.type not in _FILE_TYPES and member.type != tarfile.DIRTYPE:
        kind = _KINDS.get(member.type, f"of tar type {member.type!r}")
        link = f" to {shown(member.linkname)}" if member.issym() or member.islnk() else ""
        raise LedgerArchiveError(f"member {shown(member.name)}: {kind}{link}; a ledger "
                                 "archive holds only files and folders")
    target = stage.joinpath(*parts)
    try:
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
            return total
        # The header's size first: refused before a byte is written. The count in _copy
        # then holds whatever the header says.
        if member.size > MAX_MEMBER_BYTES:
            raise LedgerArchiveError(f"member {shown(member.name)}: {member.size} bytes (at most "
                                     f"{MAX_MEMBER_BYTES} for one file in a ledger)")
        if total + member.size > budget:
            raise _over_budget(member.name, budget)
        target.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        if source is None:  # not for a regular file; but then nothing to write
            raise LedgerArchiveError(f"member {shown(member.name)}: no data")
        return _copy(source, target, member.name, total, budget)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile):
        raise  # reading the archive, not writing: extract reports it
    except OSError as e:
        raise LedgerArchiveError(f"member {shown(member.name)}: cannot be written "
                                 f"({e.strerror or e})") from e


def extract(archive: Path, stage: Path) -> None:
    """Write the files and folders of the gzipped tar ARCHIVE into the empty folder STAGE.

    Raises LedgerArchiveError at the first member that is not a regular file or folder under
    the ledger's names, repeats a name, or passes a limit; what was written stays in STAGE."""
    seen: set[tuple[str, ...]] = set()
    total = 0
    last_offset = -1
    try:
        budget = min(MAX_TOTAL_BYTES,
                     max(RATIO_FREE_BYTES, MAX_RATIO * archive.stat().st_size))
        with tarfile.open(archive, "r:gz", tarinfo=_BoundedTarInfo) as tar:
            for count, member in enumerate(tar, start=1):  # one header at a time
                if count > MAX_MEMBERS:
                    raise LedgerArchiveError(f"more than {MAX_MEMBERS} members (the limit for "
                                             "a ledger)")
                # A negative size sends tarfile back to an earlier header, forever, in a
                # Python without the fix of CVE-2025-8194 (3.11.7 here has none).
                if member.size < 0 or member.offset <= last_offset:
                    raise LedgerArchiveError(f"member {shown(member.name)}: a negative size or "
                                             "a header that points back in the archive")
                last_offset = member.offset
                parts = _parts(member)
                if parts in seen:
                    raise LedgerArchiveError(f"member {shown(member.name)}: twice in the archive")
                seen.add(parts)
                total = _extract_member(tar, member, parts, stage, total, budget)
    except LedgerArchiveError as e:
        raise LedgerArchiveError(f"{archive}: {e}") from None
    except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError, IndexError,
            RecursionError) as e:  # tarfile's parsing of a crafted header raises all of these
        raise LedgerArchiveError(f"{archive}: cannot be read as a gzipped tar "
                                 f"({type(e).__name__}: {shown(str(e))})") from None
    if (DB,) not in seen:
        raise LedgerArchiveError(f"{archive}: not a ledger archive: no {DB} at its top "
                                 f"(expected {DB} and optionally {ARTIFACTS}/, {CHECKPOINTS}/)")
