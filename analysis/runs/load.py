"""Runs into a RunsTable: from an MLflow sweep, or from a CSV of published data.

MLflow (the contract of pipeline/tracking.py, keys from pipeline/vocab/keys.py): experiment name =
sweep name; one child run (tag kind=trial) per RunSpec. A run is used only when its tag
``status`` is "finished" *and* its MLflow status is FINISHED, and it has a finite, positive
final loss, N, D and C; every other run is excluded and named with the reason (printed, and
kept in ``RunsTable.excluded`` for the report). Curves come from the ``curve.json`` artifact
(one cheap read), else from the metric history of val/loss and tokens. The recipe columns
``seed``, ``data_seed``, ``lr``, ``schedule`` come from the params ``train.*`` and ``role``, ``branch_of`` from
the tags; a ledger older than them gets the defaults of ``analysis.runs.table.OPTIONAL``.
The sweep's plan (the manifest its last launch recorded on the parent run, plan.json:
analysis.runs.ledger_plan) decides which trial runs belong to it (the others, of an earlier
version of the sweep file, are excluded and named) and the FLOP convention of C; a ledger
without one gets the convention its runs recorded (param ``flops_convention``), else 6nd.

CSV: one row per run; columns mapped by name (defaults recognise the Epoch Chinchilla file
and plain N/D/C/loss); D = C/(6N) when the file has no D column (as Besiroglu et al. 2024 do
for the Chinchilla data), N = C/(6D) when it has no N column (IsoFLOP points published as C and
D only, as Dubey et al. 2024, Fig. 2), C = 6·N·D when it has no C column. Optional columns ``seed`` (default 0), ``data_seed`` (the
batches' seed; default -1, unknown) and ``role`` ("main" or "holdout"; default "main") mark
seed replicates and held-out runs; ``schedule``,
``lr``, ``N_kaplan`` and ``flops_<convention>`` are kept when present, so the runs.csv of a
report loads back with what the fits need. A column of U, the unique tokens each run trained on
(``unique_col``, else one of published.UNIQUE_ALIASES: U, unique_tokens, unique), is the table's
``unique_tokens`` (the data-constrained laws, Muennighoff et al. 2023) and gives ``epochs`` =
D/U when the file has none; 0 < U <= D. ``where`` keeps the rows that meet a filter such as
``model_type == 'dense' and N >= 1e8`` (analysis.runs.published.parse_where: a small parser,
never eval). Runs whose C agree within its BUDGET_RTOL form an IsoFLOP budget (or a budget
column gives them, group_budgets); a C column is checked against 6ND for its unit
(check_flop_units). Malformed input raises DataError naming the
file and the column.
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.errors import DataError
from analysis.inputs import read_input
from analysis.runs.ledger_plan import no_progress_bars, read_plan
from analysis.runs.published import (
    check_flop_units,
    filter_rows,
    group_budgets,
    non_embedding,
    unique_tokens,
)
from analysis.runs.published import flag_name as _flag
from analysis.runs.table import CURVE_COLUMNS, OPTIONAL, Excluded, RunsTable
from pipeline.vocab import keys
from pipeline.vocab.flops import CONVENTIONS
from pipeline.vocab.manifest import PlanManifest

Log = Callable[[str], None]
N_ALIASES = ("N", "params", "n_params", "Model Size", "param_count")
D_ALIASES = ("D", "tokens", "n_tokens")
C_ALIASES = ("C", "flops", "FLOPs", "Training FLOP", "compute")
LOSS_ALIASES = ("loss", "Loss", "val_loss", "final_loss")
SHAPE_PARAMS = ("n_layer", "d_model", "n_heads", "vocab_size", "seq_len")
IMAGE_PARAMS = ("image_size", "patch_size", "channels")
"""vit's image geometry (params ``model.<name>``), kept as columns where a run records it."""
DATA_PARAMS = ("corpus", "tokenizer")
"""Params ``data.<name>`` kept as columns ``data_<name>`` (provenance for reports)."""
FINGERPRINT_TAGS = (keys.TAG_DATA_FINGERPRINT, keys.TAG_CORPUS_FINGERPRINT)
"""Tags kept as columns of the same name ("" for runs that predate them)."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


@dataclass(frozen=True)
class SweepData:
    """A loaded sweep: finished runs (with the exclusions) and their training curves."""

    runs: RunsTable
    curves: pd.DataFrame | None
    """Columns run_id, step, tokens, loss; None when no run has a curve."""
    plan: PlanManifest | None = None
    """The plan the sweep's last launch recorded (its parent run's plan.json), None when the
    ledger has none (written before the manifest)."""


# --------------------------------------------------------------------------- MLflow


def _float(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")


def _seed(value: object) -> int:
    """The ``train.seed`` param as an int; OPTIONAL's -1 when absent or not an integer."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return int(OPTIONAL["seed"])  # type: ignore[call-overload]


def _exclusion_reason(run: object, flops_key: str | None) -> str | None:
    """Why a child run cannot be used, or None when it can (``flops_key`` None: whatever its
    C)."""
    tags, metrics = run.data.tags, run.data.metrics
    status = tags.get(keys.TAG_STATUS, "")
    if status != keys.STATUS_FINISHED:
        reason = status or "no status tag"
        if tags.get(keys.TAG_DIVERGED_STEP):
            reason += f" at step {tags[keys.TAG_DIVERGED_STEP]}"
        if tags.get(keys.TAG_ERROR):
            reason += f": {tags[keys.TAG_ERROR]}"
        return reason
    if run.info.status != "FINISHED":
        return f"MLflow status {run.info.status} (unfinished)"
    for key in (keys.FINAL_VAL_LOSS, keys.PARAMS_TOTAL, keys.FINAL_TOKENS, flops_key):
        if key is None:
            continue
        value = _float(metrics.get(key))
        if not (np.isfinite(value) and value > 0):
            return f"missing or invalid metric {key} ({metrics.get(key)!r})"
    return None


def _row(run: object, flops_key: str) -> dict:
    tags, metrics, params = run.data.tags, run.data.metrics, run.data.params
    n = _float(metrics[keys.PARAMS_TOTAL])
    d = _float(metrics[keys.FINAL_TOKENS])
    n_k = _float(metrics.get(keys.PARAMS_NON_EMBEDDING))
    c_k = _float(metrics.get(keys.flops_key("6nd_non_embedding")))
    row = {
        "run_id": tags.get(keys.TAG_RUN_ID) or run.info.run_id,
        "N": n, "D": d, "C": _float(metrics[flops_key]),
        "loss": _float(metrics[keys.FINAL_VAL_LOSS]),
        "budget": _float(tags.get(keys.TAG_BUDGET) or "nan"),
        "N_kaplan": n_k,
        "C_kaplan": c_k if np.isfinite(c_k) else 6.0 * n_k * d,
        "family": tags.get(keys.TAG_FAMILY, ""),
        "val_bpb": _float(metrics.get(keys.FINAL_VAL_BPB)),
        "mlflow_run_id": run.info.run_id,
        "run_name": run.info.run_name or "",
    }
    for key, value in metrics.items():
        if key.startswith(keys.FLOPS_PREFIX):
            row["flops_" + key.removeprefix(keys.FLOPS_PREFIX)] = _float(value)
    for name in SHAPE_PARAMS:
        row[name] = _float(params.get(f"model.{name}"))
    for name in IMAGE_PARAMS:
        if f"model.{name}" in params and params[f"model.{name}"] not in ("0", "None"):
            row[name] = _float(params[f"model.{name}"])
    for name in DATA_PARAMS:
        row[f"data_{name}"] = params.get(f"data.{name}", "")
    for tag in FINGERPRINT_TAGS:
        row[tag] = tags.get(tag, "")
    row["seed"] = _seed(params.get("train.seed"))
    # The batches' seed: train.data_seed where a sweep set it (pipeline.vocab.spec), else the seed.
    data_seed = _seed(params.get("train.data_seed"))
    row["data_seed"] = row["seed"] if data_seed == OPTIONAL["data_seed"] else data_seed
    row["lr"] = _float(params.get("train.lr"))
    row["schedule"] = params.get("train.schedule", OPTIONAL["schedule"])
    # A missing role tag means main: ledgers written before held-out runs existed.
    row["role"] = tags.get(keys.TAG_ROLE) or keys.ROLE_MAIN
    row["branch_of"] = tags.get(keys.TAG_BRANCH_OF, "")
    row["epochs"] = _float(metrics.get(keys.FINAL_EPOCHS))  # NaN: recorded before issue 17
    return row


def _inline_curve(run: object) -> dict | None:
    """The curve the run carries as a tag (keys.TAG_CURVE), None when it has none."""
    text = run.data.tags.get(keys.TAG_CURVE)
    if not text:
        return None
    try:
        data = json.loads(text)
        return data if len(data["step"]) == len(data["tokens"]) == len(data["val_loss"]) else None
    except (ValueError, KeyError, TypeError):
        return None


def _curve(client: object, run: object) -> pd.DataFrame | None:
    """The run's eval curve: its tag (already loaded with the run: no round trip), else the
    curve.json artifact, else the metric history (runs logged before either existed)."""
    from mlflow.exceptions import MlflowException

    rid = run.info.run_id
    try:
        data = _inline_curve(run)
        if data is None:
            with tempfile.TemporaryDirectory() as tmp, no_progress_bars():
                path = client.download_artifacts(rid, keys.CURVE_ARTIFACT, tmp)
                data = json.loads(Path(path).read_text())
        frame = pd.DataFrame({"step": data["step"], "tokens": data["tokens"],
                              "loss": data["val_loss"]})
    except (MlflowException, OSError, KeyError, ValueError, TypeError):
        try:
            loss = client.get_metric_history(rid, keys.VAL_LOSS)
            tokens = client.get_metric_history(rid, keys.TOKENS)
        except MlflowException:
            return None
        frame = pd.merge(
            pd.DataFrame({"step": [m.step for m in loss], "loss": [m.value for m in loss]}),
            pd.DataFrame({"step": [m.step for m in tokens], "tokens": [m.value for m in tokens]}),
            on="step",
        ).drop_duplicates("step", keep="last")
    if frame.empty:
        return None
    frame["run_id"] = run.data.tags.get(keys.TAG_RUN_ID) or rid
    return frame[list(CURVE_COLUMNS)]


def _name(run: object) -> str:
    return run.info.run_name or run.data.tags.get(keys.TAG_RUN_ID) or run.info.run_id


NOT_IN_PLAN = (f"not in the plan of the sweep's last launch ({keys.PLAN_ARTIFACT}): a run of "
               "an earlier version of the sweep file")


def _trial_runs(client: object, experiment_id: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], f"tags.{keys.TAG_KIND} = 'trial'",
                                  max_results=5000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _run_id(run: object) -> str:
    return run.data.tags.get(keys.TAG_RUN_ID) or run.info.run_id


def _in_plan(runs: list, plan: PlanManifest, where: str, sweep: str) -> tuple[list, list]:
    """(the runs ``plan`` lists, the others excluded); DataError when it lists none of them."""
    planned = plan.run_ids
    kept = [r for r in runs if _run_id(r) in planned]
    if runs and not kept:
        raise DataError(f"{where}: none of the {len(runs)} trial runs of sweep {sweep!r} is in "
                        f"the plan its last launch recorded ({keys.PLAN_ARTIFACT}, "
                        f"{len(plan.runs)} planned runs): every run is of an earlier version "
                        "of the sweep file")
    return kept, [Excluded(_name(r), NOT_IN_PLAN) for r in runs if _run_id(r) not in planned]


def recorded_convention(runs: Sequence[object]) -> str | None:
    """The FLOP convention the usable runs recorded (the ``flops_convention`` param of their
    spec, pipeline.tracking.Ledger.create_trial), when they all record the same one."""
    found = {r.data.params.get("flops_convention") for r in runs
             if _exclusion_reason(r, None) is None}
    return found.pop() if len(found) == 1 and next(iter(found)) in CONVENTIONS else None


def load_sweep(sweep: str, *, tracking_uri: str | None = None,
               flops_convention: str | None = None, with_curves: bool = True,
               log: Log = _stderr, use_plan: bool = True) -> SweepData:
    """Finished runs of ``sweep`` (an MLflow experiment) with C = final/flops_<convention>.

    With a plan recorded in the ledger (its parent run's plan.json, ``SweepData.plan``), the
    trial runs it does not list are excluded, each named (``use_plan`` False: every run is
    kept, for a caller that applies another view, a ``--sweep-file``'s). The convention:
    ``flops_convention`` when given, else the plan's, else the one every usable run recorded,
    else 6nd (C = 6ND)."""
    import mlflow
    from mlflow import MlflowClient

    from pipeline.vocab.store import missing_store

    uri = tracking_uri or mlflow.get_tracking_uri()
    if problem := missing_store(uri):  # a read: never create a store
        raise DataError(problem)
    client = MlflowClient(tracking_uri=uri)
    where = f"MLflow store {client.tracking_uri}"
    experiment = client.get_experiment_by_name(sweep)
    if experiment is None:
        raise DataError(f"{where}: no sweep (experiment) named {sweep!r}")
    plan = read_plan(client, experiment.experiment_id, sweep, where)
    runs = _trial_runs(client, experiment.experiment_id)
    applied = plan if use_plan else None
    excluded: list[Excluded] = []
    if applied is not None:
        runs, excluded = _in_plan(runs, applied, where, sweep)
    convention = (flops_convention or (plan.flops_convention if plan is not None else None)
                  or recorded_convention(runs) or "6nd")
    flops_key = keys.flops_key(convention)
    usable: dict[str, object] = {}
    for run in runs:
        reason = _exclusion_reason(run, flops_key)
        if reason is not None:
            excluded.append(Excluded(_name(run), reason))
            continue
        rid = _run_id(run)
        older = usable.get(rid)
        if older is not None:  # two finished MLflow runs of one RunSpec: keep the later one
            first, later = sorted((older, run), key=lambda r: r.info.end_time or 0)
            excluded.append(Excluded(_name(first), "superseded by a later finished run "
                                                   "of the same run_id"))
            run = later
        usable[rid] = run
    _report(log, sweep, len(usable), excluded)
    if not usable:
        raise DataError(f"{where}: sweep {sweep!r} has no finished runs "
                        f"({len(runs)} trial run(s), all excluded)")
    frame = pd.DataFrame([_row(r, flops_key) for r in usable.values()])
    table = RunsTable(frame, source=f"MLflow sweep {sweep!r}", n_convention="params_total",
                      c_convention=convention, excluded=tuple(excluded), plan=applied)
    curves = None
    if with_curves:
        parts = [c for c in (_curve(client, r) for r in usable.values()) if c is not None]
        if len(parts) < len(usable):
            log(f"{sweep}: {len(usable) - len(parts)} of {len(usable)} runs have no curve")
        curves = pd.concat(parts, ignore_index=True) if parts else None
    return SweepData(table, curves, plan)


def _report(log: Log, sweep: str, kept: int, excluded: Sequence[Excluded]) -> None:
    if not excluded:
        log(f"{sweep}: {kept} finished runs, none excluded")
        return
    names = "; ".join(f"{e.run} ({e.reason})" for e in excluded)
    log(f"{sweep}: {kept} finished runs; excluded {len(excluded)}: {names}")


# --------------------------------------------------------------------------- CSV


def _pick(columns: Sequence[str], given: str | None, aliases: Sequence[str], path: Path,
          flag: str) -> str | None:
    if given is not None:
        if given not in columns:
            raise DataError(f"{path}: no column {given!r} ({flag}); the columns are "
                            f"{', '.join(map(repr, columns))}")
        return given
    return next((a for a in aliases if a in columns), None)


def _numeric(frame: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    """A column as floats; DataError naming file, column and rows for missing or <= 0."""
    values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
    rows = frame.index.to_numpy() + 2  # file line numbers: the header is line 1
    bad = ~np.isfinite(values)
    if bad.any():
        raise DataError(f"{path}: column {col!r} has {int(bad.sum())} missing or non-numeric "
                        f"value(s) (lines {', '.join(map(str, rows[bad][:5]))})")
    bad = values <= 0
    if bad.any():
        raise DataError(f"{path}: column {col!r} has {int(bad.sum())} value(s) <= 0 "
                        f"(lines {', '.join(map(str, rows[bad][:5]))})")
    return values


def _budget_column(frame: pd.DataFrame, col: str, path: Path,
                   flags: Mapping[str, str] | None = None) -> np.ndarray:
    """The budget of each run; blank where a run is not an IsoFLOP cell, never <= 0."""
    if col not in frame.columns:
        raise DataError(f"{path}: no column {col!r} ({_flag(flags, '--budget-col')})")
    values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
    if (values <= 0).any():
        raise DataError(f"{path}: column {col!r} has value(s) <= 0")
    return values


def _optional_columns(source: pd.DataFrame, table: pd.DataFrame, path: Path) -> None:
    """Copy the optional columns of the file into ``table`` (in place), with defaults."""
    lines = source.index.to_numpy() + 2
    for name, default in (("seed", 0), ("data_seed", OPTIONAL["data_seed"])):
        values = pd.to_numeric(source[name], errors="coerce").to_numpy(dtype=float) \
            if name in source.columns else np.full(len(source), default, dtype=float)
        bad = ~(np.isfinite(values) & (values == np.round(values)))
        if bad.any():
            raise DataError(f"{path}: column {name!r} has {int(bad.sum())} value(s) that are "
                            f"not integers (lines {', '.join(map(str, lines[bad][:5]))})")
        table[name] = values.astype(int)
    role = source["role"].fillna(keys.ROLE_MAIN).astype(str).to_numpy() \
        if "role" in source.columns else np.full(len(source), keys.ROLE_MAIN)
    bad = ~np.isin(role, keys.ROLES)
    if bad.any():
        raise DataError(f"{path}: column 'role' must be one of {', '.join(keys.ROLES)}; "
                        f"lines {', '.join(map(str, lines[bad][:5]))} are not")
    table["role"] = role
    for name in ("schedule", "branch_of"):
        if name in source.columns:
            table[name] = source[name].fillna("").astype(str).to_numpy()
    numeric = [c for c in source.columns
               if c in ("lr", "N_kaplan", "epochs") or c.startswith("flops_")]
    for name in numeric:
        table[name] = pd.to_numeric(source[name], errors="coerce").to_numpy(dtype=float)
    if "N_kaplan" in source.columns:
        table["C_kaplan"] = 6.0 * table["N_kaplan"] * table["D"]


def load_csv(path: str | Path, *, n_col: str | None = None, d_col: str | None = None,
             c_col: str | None = None, loss_col: str | None = None,
             budget_col: str | None = None, drop_highest_loss: int = 0,
             log: Log = _stderr, option: str = "--csv", where: str | None = None,
             flags: Mapping[str, str] | None = None,
             n_nonembed_col: str | None = None, unique_col: str | None = None) -> RunsTable:
    """Published runs from a CSV (one row per run). See the module docstring. ``option``
    names the argument that gave ``path`` in errors (a FIFO or device is refused unread);
    ``where`` keeps the rows that meet it (filter_rows), before anything else is read;
    ``flags`` renames the column options in errors for a command that spells them otherwise
    (analysis.compare's per-side options); ``n_nonembed_col`` (or a column named as one of
    ``analysis.runs.published.NON_EMBEDDING_ALIASES``) is each run's non-embedding parameter count, so that the fits
    are also made under that convention (analysis.checks.conventions) and Kaplan's laws use
    it; ``unique_col`` (or a column named as one of ``analysis.runs.published.UNIQUE_ALIASES``)
    is U, the unique tokens each run trained on: the table's ``unique_tokens``, and ``epochs`` =
    D/U when the file has no ``epochs`` column (checked: analysis.runs.published.unique_tokens)."""
    path = Path(path)
    data = read_input(path, option)
    try:
        frame = pd.read_csv(io.BytesIO(data))
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text (byte {err.object[err.start:err.start + 1]!r}"
                        f" at offset {err.start}); a CSV of runs is text") from err
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        reason = " ".join(str(err).split())  # one line (pandas' messages end in newlines)
        raise DataError(f"{path}: cannot read as CSV ({reason})") from err
    cols = list(frame.columns)
    n_name = _pick(cols, n_col, N_ALIASES, path, _flag(flags, "--n-col"))
    d_name = _pick(cols, d_col, D_ALIASES, path, _flag(flags, "--d-col"))
    c_name = _pick(cols, c_col, C_ALIASES, path, _flag(flags, "--c-col"))
    l_name = _pick(cols, loss_col, LOSS_ALIASES, path, _flag(flags, "--loss-col"))
    if l_name is None:
        raise DataError(f"{path}: no loss column: none of {', '.join(LOSS_ALIASES)} (give "
                        f"{_flag(flags, '--loss-col')}); the columns are "
                        f"{', '.join(map(repr, cols))}")
    # Two of N, D, C give the third under C = 6·N·D, the convention of data published as
    # IsoFLOP points without N (Dubey et al. 2024, Fig. 2: C and D only).
    if [n_name, d_name, c_name].count(None) > 1:
        missing = " and ".join(
            f"{what}, {_flag(flags, flag)})" for what, flag, name in (
                ("N (parameters", "--n-col", n_name), ("D (tokens", "--d-col", d_name),
                ("C (FLOPs", "--c-col", c_name)) if name is None)
        raise DataError(f"{path}: needs two of N, D and C; no {missing} column (aliases "
                        f"{', '.join(N_ALIASES + D_ALIASES + C_ALIASES)}); the columns are "
                        f"{', '.join(map(repr, cols))}")
    if frame.empty:
        raise DataError(f"{path}: no rows")
    if where is not None:
        total = len(frame)
        frame = filter_rows(frame, where, path, _flag(flags, "--where"))
        log(f"{path}: {_flag(flags, '--where')} {where!r} keeps {len(frame)} of {total} rows")
    if not 0 <= drop_highest_loss < len(frame):
        raise DataError(f"{path}: cannot drop {drop_highest_loss} of {len(frame)} rows")
    loss = _numeric(frame, l_name, path)
    if drop_highest_loss:
        keep = np.sort(np.argsort(loss, kind="stable")[: len(loss) - drop_highest_loss])
        frame, loss = frame.iloc[keep], loss[keep]
        log(f"{path}: dropped the {drop_highest_loss} highest-loss rows")
    c = _numeric(frame, c_name, path) if c_name else None
    if n_name:
        n = _numeric(frame, n_name, path)
        d = _numeric(frame, d_name, path) if d_name else c / (6.0 * n)
    else:
        d = _numeric(frame, d_name, path)
        n = c / (6.0 * d)
    if c is not None:
        check_flop_units(c, n, d, c_name=c_name, n_name=n_name, d_name=d_name, path=path)
    else:
        c = 6.0 * n * d
    c_label = repr(c_name) if c_name else f"C = 6·N·D (columns {n_name!r}, {d_name!r})"
    if np.unique(np.round(c / c.max(), 9)).size < 2:
        raise DataError(f"{path}: column {c_label} has a single compute budget ({c[0]:.4g}); "
                        "scaling fits need at least two")
    budget = (_budget_column(frame, budget_col, path, flags) if budget_col
              else group_budgets(c, n, path, log, flags))
    table = pd.DataFrame({
        "run_id": [f"line{i + 2}" for i in frame.index], "N": n, "D": d, "C": c, "loss": loss,
        "budget": budget, "N_kaplan": np.nan, "C_kaplan": np.nan, "family": "",
    })
    _optional_columns(frame, table, path)
    n_k = non_embedding(frame, n, n_nonembed_col, path, _flag(flags, "--n-nonembed-col"))
    if n_k is not None:
        table["N_kaplan"], table["C_kaplan"] = n_k, 6.0 * n_k * d
    u = unique_tokens(frame, d, unique_col, path, _flag(flags, "--unique-col"))
    if u is not None:
        table["unique_tokens"] = u
        if "epochs" not in frame.columns:
            table["epochs"] = d / u
    derived = ", N = C/(6D)" if not n_name else "" if d_name else ", D = C/(6N)"
    dropped = f", {drop_highest_loss} highest-loss rows dropped" if drop_highest_loss else ""
    kept = f", rows where {where}" if where is not None else ""
    return RunsTable(
        table, source=f"{path}{derived}{kept}{dropped}",
        n_convention=f"column {n_name!r}" if n_name else "C/(6D) (no N column)",
        c_convention=f"column {c_name!r}" if c_name else "6nd (6·N·D)",
    )

