"""What the sweep driver says on the terminal: one console for the driver's modules (sweep,
holdout, preflight) and the modes scripts ask for.

- default: the plan, a line per finished run, progress lines, the summary table, the report;
- --quiet: errors, warnings and the closing lines only (console.quiet; `say` still prints);
- --json: everything human goes to stderr, and stdout carries one JSON object at the end.
"""

from __future__ import annotations

import sys

from rich.console import Console

console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
_plain = {"quiet": False, "json": False}  # the mode of this process's sweep


def configure(*, quiet: bool = False, json_out: bool = False) -> None:
    """Switch the shared console for --quiet or --json (a driver process runs one sweep)."""
    _plain.update(quiet=quiet, json=json_out)
    console.quiet = quiet
    if json_out:
        console.file = sys.stderr


def chatty() -> bool:
    """True in the default mode: workers' own output (Ray forwards it to the driver's stdout,
    which --json keeps for its object) and the report's progress are shown."""
    return not (_plain["quiet"] or _plain["json"])


def json_mode() -> bool:
    return _plain["json"]


def say(message: str) -> None:
    """A line printed in every mode but --json's stdout: errors, warnings, where results are."""
    was, console.quiet = console.quiet, False
    try:
        console.print(message, soft_wrap=True)
    finally:
        console.quiet = was
