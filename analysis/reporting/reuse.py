"""A report whose inputs have not changed is kept, not made again (issue 21).

Why: re-running a finished sweep trains nothing, yet it used to spend ~a minute refitting
the same runs into the same report. A report is a function of its inputs, so
`python -m analysis.report` (and the report at the end of every sweep) first computes the
sha256 of them and keeps the folder when it holds a complete report made from the same:

- the runs and curves, as the export writes them (analysis.runs.export: every column, every
  point, the FLOP convention, the excluded runs and why);
- the sweep file's text (its plan and rules are quoted in the report);
- the options that change the report's content: bootstrap resamples, seed, sample prompt;
- the code: every .py file of analysis/ and pipeline/ (path and bytes), so an edited fit or
  figure remakes the report whether or not it was committed;
- Python's and the numerical packages' versions (analysis.reporting.provenance.PACKAGES);
- the arithmetic: the BLAS kernels and numpy's SIMD level (provenance.arithmetic), since the
  bootstrap intervals of the iterative fits move with them: a report made on another CPU is
  made again here, not kept as if it were this machine's.

Not the number of processes (`--jobs`): the bootstrap draws the same resamples and gives the
same intervals with any number. The key is written last into the staged folder
(``KEY_FILE``), so a folder swapped in without it, or a report from before this file
existed, is made again. `--force` remakes a report regardless.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from analysis.reporting.provenance import PACKAGE_ROOT, arithmetic, package_versions

KEY_FILE = "inputs.sha256"
"""The report folder's record of the key it was made from (one line: the hex digest, then
what it covers)."""
CODE_FOLDERS = ("analysis", "pipeline")
"""The source folders (under the checkout) whose .py files the report is a function of."""
REQUIRED = ("report.md", "report.html", "fit.json", "runs.csv")
"""Files a kept report must hold (a folder missing any of them is made again)."""


def code_digest(root: Path = PACKAGE_ROOT) -> str:
    """sha256 over the relative path and bytes of every .py file of CODE_FOLDERS, sorted
    (~200 files, a few ms)."""
    digest = hashlib.sha256()
    for folder in CODE_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def report_key(export: dict, *, sweep_text: str | None, options: dict[str, object],
               code: str | None = None) -> str:
    """The sha256 of a report's inputs (module docstring). ``export`` is the export's JSON
    object (analysis.runs.export.to_json_dict); ``options`` the content-changing options."""
    inputs = {"runs": export, "sweep_file": sweep_text, "options": options,
              "code": code if code is not None else code_digest(),
              "packages": package_versions(), "arithmetic": arithmetic()}
    text = json.dumps(inputs, sort_keys=True, allow_nan=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def write_key(folder: Path, key: str) -> None:
    (folder / KEY_FILE).write_text(
        f"{key}  sha256 of this report's inputs: runs, curves, sweep file, options "
        f"(bootstrap, seed, prompt), code ({', '.join(CODE_FOLDERS)}), package versions, "
        "arithmetic (BLAS kernels, numpy SIMD)\n",
        encoding="utf-8")


def is_current(folder: Path, key: str) -> bool:
    """The folder holds a complete report made from inputs with this key."""
    try:
        recorded = (folder / KEY_FILE).read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError):
        return False
    return bool(recorded) and recorded[0] == key and all(
        (folder / name).is_file() for name in REQUIRED)
