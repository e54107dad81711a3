"""Where a report's numbers came from: code version, sweep file, data, software, machine.

Every probe degrades to a word ("unknown", "not recorded") instead of failing: a report
must not break because git is missing or the folder is not a repository.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from analysis.runs.table import RunsTable

PACKAGES = ("numpy", "scipy", "pandas", "matplotlib", "seaborn", "mlflow")
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The checkout the analysis code runs from (for its git commit)."""
_ABSOLUTE = re.compile(r"(^|[\s=:'\"(]|sqlite:///)(/[^/\s'\")][^\s'\")]*)")
"""An absolute POSIX path at the start of a word, after '=', ':' or a quote, or in a sqlite URI."""


def portable(text: str) -> str:
    """A path (or a URI or command holding paths) as a committed report may show it: relative
    to the checkout when inside it, "~" for the home folder, else the absolute prefix
    replaced by "<local>/" (a committed report never names the machine's folders)."""
    root, home = str(PACKAGE_ROOT), os.path.expanduser("~")
    out = text.replace(root + os.sep, "").replace(root, ".")
    if home not in ("", "/"):
        out = out.replace(home + os.sep, "~/")
    return _ABSOLUTE.sub(lambda m: m.group(1) + "<local>/" + m.group(2).rsplit("/", 1)[-1], out)


@dataclass(frozen=True)
class GitState:
    commit: str
    """``git rev-parse HEAD``, or "unknown" outside a repository (or without git)."""
    dirty: bool | None
    """Tracked files differ from the commit (None when unknown)."""

    def describe(self) -> str:
        if self.commit == "unknown":
            return "unknown (not a git repository)"
        return self.commit + (" + uncommitted changes" if self.dirty else "")


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(folder: Path) -> GitState:
    commit = _git(["rev-parse", "HEAD"], folder)
    if not commit:
        return GitState("unknown", None)
    status = _git(["status", "--porcelain", "--untracked-files=no"], folder)
    return GitState(commit, None if status is None else bool(status))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def arithmetic() -> dict[str, str]:
    """What decides the last bits of a fit's floating-point results here: the BLAS kernels
    (OpenBLAS picks them by CPU at load) and numpy's SIMD level.

    Why it is recorded: the bootstrap refits of the iterative laws stop where those bits put
    them, and these laws have flat directions, so the ends of their intervals move by a few
    percent from one arithmetic to another while every full-data estimate agrees to ~1e-11.
    Measured on reports/bert_chinchilla (2026-12-07, one commit, one export): OpenBLAS's
    Haswell kernels against its Sandybridge ones moved 124 of fit.json's 592 values, e.g.
    kaplan_joint's interval of a from [0.00830, 0.01651] to [0.00723, ...]; `--jobs` and
    numpy's own SIMD level below X86_V3 moved none. A report regenerates with the same numbers
    on the same arithmetic only."""
    import numpy as np
    import scipy.linalg  # noqa: F401 - scipy's own BLAS, when it has one, is loaded too

    try:
        from threadpoolctl import threadpool_info

        blas = sorted({f"{i.get('internal_api', '?')} {i.get('version', '?')} "
                       f"{i.get('architecture', '?')} kernels"
                       for i in threadpool_info() if i.get("user_api") == "blas"})
    except Exception:  # a probe: a word, never a failure (module docstring)
        blas = []
    try:
        simd = np.show_config(mode="dicts").get("SIMD Extensions", {})
        numpy_simd = (f"baseline {'+'.join(simd.get('baseline', [])) or 'none'}, "
                      f"found {'+'.join(simd.get('found', [])) or 'none'}")
    except Exception:  # as above
        numpy_simd = "unknown"
    return {"blas": "; ".join(blas) or "unknown", "numpy_simd": numpy_simd}


def machine() -> str:
    return (f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs "
            f"(nproc), host {platform.node()}")


def _distinct(runs: RunsTable, column: str) -> list[str]:
    if column not in runs.frame.columns:
        return []
    values = runs.frame[column].fillna("").astype(str)
    return sorted({v for v in values if v})


def data_lines(runs: RunsTable) -> list[str]:
    """What the runs say about their training data (corpus, tokenizer, fingerprints)."""
    if "data_corpus" not in runs.frame.columns:
        return [f"data: {runs.source} (published runs; no corpus fingerprint)"]
    lines = []
    corpus = ", ".join(_distinct(runs, "data_corpus")) or "not recorded"
    tokenizer = ", ".join(_distinct(runs, "data_tokenizer")) or "not recorded"
    lines.append(f"corpus: {corpus}" if runs.images else
                 f"corpus: {corpus}; tokenizer: {tokenizer}")
    data = "image data (split)" if runs.images else "token data"
    for column, what in (("corpus_fingerprint", "corpus fingerprint (sha256)"),
                         ("data_fingerprint", f"{data} fingerprint (sha256)")):
        values = _distinct(runs, column)
        missing = int((runs.frame[column].fillna("").astype(str) == "").sum()) \
            if column in runs.frame.columns else len(runs)
        if not values:
            lines.append(f"{what}: not recorded on these runs (runs logged before the "
                         "pipeline recorded it)")
            continue
        text = f"{what}: {', '.join(values)}"
        if len(values) > 1:
            text += " (runs differ: they did not all train on the same data)"
        if missing:
            text += f"; not recorded on {missing} of {len(runs)} runs"
        lines.append(text)
    return lines


def plan_lines(runs: RunsTable) -> list[str]:
    """Which plan chose the runs (RunsTable.plan: the manifest the sweep recorded in its
    ledger, or its --sweep-file's view), when they came with one."""
    plan = runs.plan
    if plan is None:
        return []
    held = len(plan.holdout())
    return [f"plan: sweep {plan.sweep!r}, sweep file sha256 {plan.sweep_sha256}, "
            f"{len(plan.runs)} planned runs ({len(plan.runs) - held} main, {held} held-out), "
            f"budgets in the {plan.flops_convention} FLOP convention; {len(runs)} of its runs "
            "finished and used"]


def provenance_lines(runs: RunsTable, *, sweep_file: Path | None,
                     now: datetime | None = None) -> list[str]:
    """Bullet lines for the report's provenance section."""
    code = git_state(PACKAGE_ROOT)
    here = Path.cwd()
    lines = [f"code: git commit {code.describe()} (the checkout of the analysis code)"]
    if here.resolve() != PACKAGE_ROOT:
        lines.append(f"working folder {portable(str(here))}: git commit "
                     f"{git_state(here).describe()}")
    if sweep_file is None:
        lines.append("sweep file: not given (`--sweep-file`)")
    elif sweep_file.is_file():
        lines.append(f"sweep file: {portable(str(sweep_file.resolve()))} "
                     f"(sha256 {sha256_file(sweep_file)})")
    else:
        lines.append(f"sweep file: {portable(str(sweep_file))} (not found when the report "
                     "was written)")
    lines += plan_lines(runs)
    lines += data_lines(runs)
    lines.append("packages: " + ", ".join(f"{k} {v}" for k, v in package_versions().items()))
    lines.append(f"machine: {machine()}")
    lines.append("arithmetic: " + ", ".join(f"{k} {v}" for k, v in arithmetic().items())
                 + " (intervals of iterative fits move with it: "
                 "analysis.reporting.provenance.arithmetic)")
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S %Z")
    lines.append(f"date: {stamp}")
    lines.append(f"python: {platform.python_implementation()} {platform.python_version()}")
    return lines
