"""A sweep's runs and curves in one portable file, so a report regenerates without the ledger.

Why: a report is committed, its MLflow store usually is not (it lives on the machine that ran
the sweep). `python -m analysis.report` writes `runs_export.json` beside every sweep report,
and `--export FILE` fits and reports from it exactly as from the store: same runs, same
columns, same curves, bit for bit (floats are written with Python's repr, which round-trips).

Format (JSON, one object):
  format        "scaling-runs-export"; version: 1
  name          the report's name (the sweep's), the default name of a report made from it
  source        where the runs came from (e.g. "MLflow sweep 'chinchilla'")
  n_convention  the N column's convention (params_total)
  c_convention  the FLOP convention of the C column (6nd, exact, ...)
  excluded      [[run name, reason], ...]: the runs left out, and why
  runs          {"columns": [...], "dtypes": [...], "rows": [[...], ...]}: the runs table
  curves        the same for the eval curves (run_id, step, tokens, loss), or null
  plan          the plan manifest that chose the runs (pipeline.vocab.manifest: the one the
                sweep recorded, or its --sweep-file's view), or null; optional (exports
                written before it have none)
NaN is written as null.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from analysis.errors import DataError
from analysis.inputs import read_input
from analysis.runs.table import CURVE_COLUMNS, Excluded, RunsTable
from pipeline.vocab.manifest import ManifestError, PlanManifest, manifest_from_dict

FORMAT = "scaling-runs-export"
VERSION = 1
FILE_NAME = "runs_export.json"


def _cell(value: object) -> object:
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _frame_to_json(frame: pd.DataFrame) -> dict:
    return {"columns": [str(c) for c in frame.columns],
            "dtypes": [str(t) for t in frame.dtypes],
            "rows": [[_cell(v) for v in row] for row in frame.itertuples(index=False)]}


def _frame_from_json(obj: object, where: str) -> pd.DataFrame:
    if not isinstance(obj, dict) or not {"columns", "dtypes", "rows"} <= set(obj):
        raise DataError(f"{where}: expected an object with columns, dtypes and rows")
    columns, dtypes, rows = obj["columns"], obj["dtypes"], obj["rows"]
    if not (isinstance(columns, list) and all(isinstance(c, str) for c in columns)
            and isinstance(dtypes, list) and all(isinstance(t, str) for t in dtypes)
            and isinstance(rows, list) and all(isinstance(r, list) for r in rows)):
        raise DataError(f"{where}: columns and dtypes must be lists of strings, rows a list "
                        "of lists")
    if len(columns) != len(dtypes) or any(len(r) != len(columns) for r in rows):
        raise DataError(f"{where}: rows, columns and dtypes differ in length")
    frame = pd.DataFrame(rows, columns=columns)
    for col, dtype in zip(columns, dtypes, strict=True):
        try:
            if dtype.startswith("float"):
                frame[col] = frame[col].astype(float).astype(dtype)
            elif dtype != "object":
                frame[col] = frame[col].astype(dtype)
        except (TypeError, ValueError) as e:
            raise DataError(f"{where}: column {col!r} is not {dtype} ({e})") from e
    return frame


def to_json_dict(runs: RunsTable, curves: pd.DataFrame | None, name: str) -> dict:
    return {
        "format": FORMAT, "version": VERSION, "name": name, "source": runs.source,
        "n_convention": runs.n_convention, "c_convention": runs.c_convention,
        "excluded": [[e.run, e.reason] for e in runs.excluded],
        "runs": _frame_to_json(runs.frame),
        "curves": None if curves is None else _frame_to_json(curves),
        "plan": None if runs.plan is None else runs.plan.to_dict(),
    }


def write_export(path: Path, runs: RunsTable, curves: pd.DataFrame | None, *,
                 name: str) -> None:
    path.write_text(json.dumps(to_json_dict(runs, curves, name), allow_nan=False) + "\n",
                    encoding="utf-8")


def export_name(path: str | Path, option: str = "--export") -> str:
    """The name recorded in an export (the sweep's); read_export validates the rest."""
    _, _, name = _read(Path(path), option)
    return name


def export_convention(path: str | Path, option: str = "--export") -> str:
    """The FLOP convention of an export's C column."""
    runs, _, _ = _read(Path(path), option)
    return runs.c_convention


def read_export(path: str | Path,
                option: str = "--export") -> tuple[RunsTable, pd.DataFrame | None]:
    """The runs and curves of an export; DataError naming the file and field otherwise
    (``option``: the argument that gave ``path``; a FIFO or device is refused unread)."""
    runs, curves, _ = _read(Path(path), option)
    return runs, curves


def _plan(obj: object, path: Path) -> PlanManifest | None:
    """The export's plan (null or absent: none)."""
    if obj is None:
        return None
    try:
        return manifest_from_dict(obj, f"{path}: field 'plan'")
    except ManifestError as e:
        raise DataError(str(e)) from e


def _read(path: Path, option: str) -> tuple[RunsTable, pd.DataFrame | None, str]:
    raw = read_input(path, option)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise DataError(f"{path}: cannot read as a runs export ({e})") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DataError(f"{path}: not a runs export (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise DataError(f"{path}: export version {data.get('version')!r}; this code reads "
                        f"version {VERSION}")
    for field in ("name", "source", "n_convention", "c_convention"):
        if not isinstance(data.get(field), str):
            raise DataError(f"{path}: field {field!r} must be a string")
    excluded = data.get("excluded")
    if not isinstance(excluded, list) or not all(
            isinstance(e, list) and len(e) == 2 for e in excluded):
        raise DataError(f"{path}: field 'excluded' must be a list of [name, reason] pairs")
    frame = _frame_from_json(data.get("runs"), f"{path}: field 'runs'")
    plan = _plan(data.get("plan"), path)
    try:
        runs = RunsTable(frame, source=data["source"], n_convention=data["n_convention"],
                         c_convention=data["c_convention"],
                         excluded=tuple(Excluded(str(n), str(r)) for n, r in excluded),
                         plan=plan)
    except DataError as e:
        raise DataError(f"{path}: field 'runs': {e}") from e
    curves = None
    if data.get("curves") is not None:
        curves = _frame_from_json(data["curves"], f"{path}: field 'curves'")
        if list(curves.columns) != list(CURVE_COLUMNS):
            raise DataError(f"{path}: field 'curves' has columns {list(curves.columns)}, "
                            f"expected {list(CURVE_COLUMNS)}")
    return runs, curves, data["name"]
