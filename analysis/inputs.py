"""The file, name and number arguments of the analysis CLIs, checked before anything is read,
fitted or written.

Why one module: fit, predict, report and compare take paths, names and numbers that a user may
have been handed by someone else (a collaborator's CSV or runs export, a name copied from a
ledger). Each refusal is an ``InputError`` naming the option and the value, raised before any
output exists; ``analysis.cli.run_main`` prints it as one ``error:`` line and returns 2, so a
refused command leaves nothing behind.
"""

from __future__ import annotations

import argparse
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path

from analysis.errors import DataError
from pipeline.vocab.disk import new_file_problem

MAX_INPUT_BYTES = 256 * 2**20
"""Largest CSV or runs export read: 256 MiB. Why: the largest sweep the pipeline plans
(pipeline.config MAX_RUNS, 10,000 runs) exports ~11 MB at the default 8 evals per run (the
committed exports: ~850 bytes a run), and a 100,000-row runs.csv is ~50 MB (~500 bytes a row
with every column), so real inputs stay 5-20x under it; parsed, 256 MiB of JSON is a few GB of
Python objects, which the 24 GiB machines hold, where /dev/zero would take them all."""
MAX_NAME_BYTES = 200
"""Longest report name: the file system's 255-byte limit on a name (ext4, tmpfs) less the
staging folder's ".<name>.partial-XXXXXXXX" (analysis.report.staged_folder: 18 bytes more)."""
MAX_BOOTSTRAP = 100_000
"""Most bootstrap resamples: 100x the 1,000 that percentile intervals need (Efron &
Tibshirani 1993, ch. 13); more only costs time (the report's 400 take ~16 s of CPU)."""
MAX_SEED = 2**63 - 1
"""Seeds go to numpy's default_rng (non-negative) and are stored as int64 in fit.json readers."""


class InputError(DataError):
    """An argument (a path, a name or a number) that the command refuses; names both."""


def _shown(value: object) -> str:
    """A name as the error line shows it: quoted, so that an empty one shows too. (Paths are
    shown as they are; run_main escapes any control character of the line.)"""
    return repr(str(value))


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def _cap(limit: int) -> str:
    return f"{limit:,}" + (" (analysis.inputs.MAX_INPUT_BYTES)" if limit == MAX_INPUT_BYTES
                           else "")


def _check_regular(st: os.stat_result, option: str, path: object,
                   limit: int = MAX_INPUT_BYTES) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{option} {path}: is {_kind(st.st_mode)}, not a file")
    if st.st_size > limit:
        raise InputError(f"{option} {path}: is {st.st_size:,} bytes; inputs are read "
                         f"up to {_cap(limit)}")


def read_input(path: str | Path, option: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (MAX_INPUT_BYTES unless a
    caller bounds its input tighter); InputError otherwise.

    Checked by name before it is opened (stat follows links, so a link to /dev/zero is a
    device): a FIFO would block the open until a writer comes, a device may never end. Then
    opened without blocking and checked again on the descriptor (the name may have been
    swapped meanwhile), and read to the cap plus one byte: a file that grows, or a /proc file
    (its stat says 0 bytes), cannot get past the cap.
    """
    try:
        _check_regular(os.stat(path), option, path, limit)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise InputError(f"{option} {path}: cannot read: {e.strerror or e}") from e
    try:
        with os.fdopen(fd, "rb") as f:
            _check_regular(os.fstat(f.fileno()), option, path, limit)
            data = f.read(limit + 1)
    except OSError as e:
        raise InputError(f"{option} {path}: cannot read: {e.strerror or e}") from e
    if len(data) > limit:
        raise InputError(f"{option} {path}: is over {_cap(limit)} bytes")
    return data


def check_name(name: str, option: str) -> str:
    """A name that becomes one folder under reports/ (never a path): InputError otherwise."""
    problem = None
    if not name:
        problem = "is empty"
    elif "/" in name or "\\" in name:
        problem = "holds a / or \\: a name is one folder (--out takes a path)"
    elif name.startswith(".") or ".." in name:
        problem = "starts with a dot or holds '..' (no hidden folder, no way up)"
    elif any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        problem = "holds a control character"
    else:
        try:
            size = len(os.fsencode(name))
        except UnicodeError:
            size = -1
        if size < 0:
            problem = "cannot be a file name here (not encodable)"
        elif size > MAX_NAME_BYTES:
            problem = f"is {size} bytes, over {MAX_NAME_BYTES} (analysis.inputs.MAX_NAME_BYTES)"
    if problem is not None:
        raise InputError(f"{option} {_shown(name)}: {problem}")
    return name


def finite_positive(text: str) -> float:
    """argparse type: a finite number > 0 (FLOPs, budgets)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def integer_in(low: int, high: int, why: str = "") -> Callable[[str], int]:
    """argparse type: an integer from ``low`` to ``high`` (``why``: where the bound comes from)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be from {low:,} to {high:,}{why}, got {text!r}")
        return value

    parse.__name__ = "integer"  # argparse's "invalid integer value" wording
    return parse


BOOTSTRAP = integer_in(0, MAX_BOOTSTRAP, " (analysis.inputs.MAX_BOOTSTRAP)")
SEED = integer_in(0, MAX_SEED, " (numpy seeds are non-negative)")


def jobs(text: str) -> int:
    """argparse type of --jobs: 1 to 4 processes a core (each worker is one single-threaded
    process of ~150 MB: more only queue, and a typo must not start thousands)."""
    return integer_in(1, 4 * (os.cpu_count() or 1), " (4 a core)")(text)


def check_new_file(path: Path, option: str) -> None:
    """A file that may be created at ``path``: not there yet, its folder a writable folder
    (or creatable). Creates nothing (pipeline.vocab.disk.new_file_problem)."""
    if problem := new_file_problem(path, option):
        raise InputError(problem)


