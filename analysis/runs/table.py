"""The tidy table every fit reads: one row per finished run.

Why one table: the MLflow loader and the CSV loader produce the same columns, so the fits,
the bootstrap and the report never care where the runs came from.

Columns of ``RunsTable.frame``
------------------------------
run_id     str    stable id (the MLflow ``run_id`` tag, or ``row<k>`` for a CSV row)
N          float  parameters, Chinchilla's convention (all parameters; Hoffmann et al. 2022)
D          float  training tokens actually consumed
C          float  training FLOPs under ``RunsTable.c_convention`` (default 6·N·D)
loss       float  final validation loss, nats/token
budget     float  planned IsoFLOP budget of the run (NaN when the run is not an IsoFLOP cell)
N_kaplan   float  non-embedding parameters (Kaplan et al. 2020); NaN when unknown
C_kaplan   float  6·N_kaplan·D (Kaplan's C); NaN when unknown
family     str    model family ("" when unknown, e.g. published data)

Optional columns (``OPTIONAL``; ``RunsTable.values`` gives the default where one is absent,
so tables of old ledgers, published CSVs and tests keep working)
--------------------------------------------------------------------------------------------
seed       int    training seed (param ``train.seed``; -1 when unknown)
data_seed  int    seed of the run's batches (param ``train.data_seed``, else its seed; -1 when
                  unknown): two runs of one seed on other batches are two replicates
lr         float  peak learning rate (param ``train.lr``; NaN when unknown)
schedule   str    "cosine", "wsd" or "constant" (param ``train.schedule``; "" when unknown)
role       str    "main" (fitted) or "holdout" (predicted, never fitted): tag ``role``
branch_of  str    run_id of the WSD trunk a run was branched from ("" otherwise)
epochs     float  passes over the train split, D / its size (metric ``final/epochs``; NaN when
                  unknown)
unique_tokens float  U, the distinct tokens a run trained on: min(D, the data it repeats). A
                  CSV's ``--unique-col`` (analysis.runs.load); absent, ``RunsTable.unique_tokens``
                  derives it from ``epochs`` (U = D / max(epochs, 1)). The data-constrained
                  laws read it (analysis.fits.data_constrained); NaN when unknown
Extra columns (``flops_<convention>``, ``n_layer``, ``vocab_size``, ``seq_len``...) may follow.

Training curves travel separately as a DataFrame with columns run_id, step, tokens, loss;
the FLOPs of a curve point are tokens × (C / D) of its run (the contract of pipeline.tracking).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.errors import DataError
from pipeline.vocab import keys
from pipeline.vocab.families import CAUSAL, FAMILY_REGISTRY, Objective
from pipeline.vocab.manifest import PlanManifest

REQUIRED = ("run_id", "N", "D", "C", "loss", "budget", "N_kaplan", "C_kaplan", "family")
POSITIVE = ("N", "D", "C", "loss")
CURVE_COLUMNS = ("run_id", "step", "tokens", "loss")
OPTIONAL: dict[str, object] = {"seed": -1, "data_seed": -1, "lr": float("nan"), "schedule": "",
                               "role": keys.ROLE_MAIN, "branch_of": "",
                               "epochs": float("nan"), "unique_tokens": float("nan")}
"""Optional columns and the value a run has when its table lacks the column."""


@dataclass(frozen=True)
class Excluded:
    """A run left out of the analysis, and why (printed by the loader, kept for the report)."""

    run: str
    reason: str


@dataclass(frozen=True)
class RunsTable:
    """Finished runs, validated: every N, D, C and loss is finite and positive."""

    frame: pd.DataFrame
    source: str
    """Where the runs came from, e.g. ``mlflow sweep 'quick'`` or a CSV path."""
    n_convention: str = "params_total"
    c_convention: str = "6nd"
    excluded: tuple[Excluded, ...] = field(default=())
    plan: PlanManifest | None = None
    """The plan that chose these runs (the ledger's manifest, or a sweep file's view of it;
    analysis.runs.planned); None for published data and for a sweep without one."""

    def __post_init__(self) -> None:
        missing = [c for c in REQUIRED if c not in self.frame.columns]
        if missing:
            raise DataError(f"{self.source}: runs table lacks column(s) {', '.join(missing)}")
        for col in POSITIVE:
            values = self.frame[col].to_numpy(dtype=float)
            bad = ~(np.isfinite(values) & (values > 0))
            if bad.any():
                names = ", ".join(map(str, self.frame["run_id"][bad].head(5)))
                raise DataError(
                    f"{self.source}: column {col!r} must be finite and > 0; "
                    f"{int(bad.sum())} run(s) are not ({names})"
                )

    def __len__(self) -> int:
        return len(self.frame)

    def column(self, name: str) -> np.ndarray:
        """A numeric column as a float array (NaN where unknown)."""
        return self.frame[name].to_numpy(dtype=float)

    def values(self, name: str) -> pd.Series:
        """An OPTIONAL column, or its default for every run when the table lacks it."""
        if name in self.frame.columns:
            return self.frame[name]
        return pd.Series([OPTIONAL[name]] * len(self.frame), index=self.frame.index,
                         name=name)

    def unique_tokens(self) -> np.ndarray:
        """U of every run: the ``unique_tokens`` column where it has a value, else the size of
        the train split the run repeated, D / max(epochs, 1) (the ledger records ``epochs``:
        why not the sampled count ``final/unique_tokens``: with random windows two seeds of
        one cell see slightly different counts, and the law's U is the data the run was
        allowed, the design); NaN where neither is known. Never above D."""
        d = self.column("D")
        given = self.values("unique_tokens").to_numpy(dtype=float)
        epochs = self.values("epochs").to_numpy(dtype=float)
        derived = d / np.maximum(epochs, 1.0)  # NaN where epochs is
        return np.minimum(np.where(np.isfinite(given), given, derived), d)

    def subset(self, mask: object, *, source: str | None = None,
               excluded: tuple[Excluded, ...] | None = None) -> RunsTable:
        """The runs where ``mask`` is true, with the same conventions (a new table)."""
        frame = self.frame[np.asarray(mask, dtype=bool)].reset_index(drop=True)
        return self.with_frame(frame, source=source, excluded=excluded)

    def with_frame(self, frame: pd.DataFrame, *, source: str | None = None,
                   excluded: tuple[Excluded, ...] | None = None,
                   plan: PlanManifest | None = None) -> RunsTable:
        """Another frame under this table's conventions and plan (validated again)."""
        return RunsTable(frame, source=self.source if source is None else source,
                         n_convention=self.n_convention, c_convention=self.c_convention,
                         excluded=self.excluded if excluded is None else excluded,
                         plan=self.plan if plan is None else plan)

    @property
    def has_kaplan_conventions(self) -> bool:
        """True when every run knows its non-embedding N (MLflow runs; not published CSVs)."""
        n = self.column("N_kaplan")
        c = self.column("C_kaplan")
        return bool(np.all(np.isfinite(n) & (n > 0) & np.isfinite(c) & (c > 0)))

    def kaplan_n_c(self) -> tuple[np.ndarray, np.ndarray, str]:
        """(N, C, label) in Kaplan's conventions, or the table's own N, C when unknown."""
        if self.has_kaplan_conventions:
            return self.column("N_kaplan"), self.column("C_kaplan"), "non-embedding N, 6·N·D"
        return self.column("N"), self.column("C"), f"{self.n_convention}, {self.c_convention}"

    def family(self) -> str | None:
        """The most common model family of the runs, or None for published data."""
        fams = self.frame["family"].astype(str)
        fams = fams[fams != ""]
        return None if fams.empty else str(fams.value_counts().index[0])

    @property
    def objective(self) -> Objective:
        """What the runs' family predicts (its Family in pipeline.vocab.families): the next
        token (CAUSAL) for text models and for published data, a masked token (bert) or an
        image's class (vit)."""
        fam = FAMILY_REGISTRY.get(self.family() or "")
        return fam.objective if fam is not None else CAUSAL

    @property
    def described(self) -> str:
        """What the runs' models are, in words ("a masked language model: ...")."""
        return self.objective.described

    @property
    def generates(self) -> bool:
        """Whether the runs' models generate text (causal LMs: samples can be drawn)."""
        return self.objective.generates

    @property
    def images(self) -> bool:
        """Whether the runs are of an image family (vit): D counts images, not tokens."""
        return self.objective.images

    @property
    def tokens_per_unit(self) -> float:
        """Tokens a unit of D makes: 1 (text), an image's patches + [CLS] (vit, from the
        runs' image_size and patch_size; 1 when they are not recorded)."""
        frame = self.frame
        if not self.images or not {"image_size", "patch_size"} <= set(frame.columns):
            return 1.0
        side = (frame["image_size"] / frame["patch_size"]).dropna()
        return float((side.median() ** 2) + 1) if not side.empty else 1.0

    @property
    def loss_unit(self) -> str:
        """The unit of the final loss: nats per token, per masked token (bert) or per image."""
        return self.objective.loss_unit

    @property
    def data_unit(self) -> str:
        """What D counts: "tokens", or "images" (vit; docs/families.md)."""
        return self.objective.data_unit


def runs_from_arrays(
    n: object, d: object, loss: object, *, c: object | None = None,
    budget: object | None = None, run_ids: object | None = None, n_kaplan: object | None = None,
    source: str = "arrays",
    n_convention: str = "params_total", c_convention: str = "6nd",
    extra: Mapping[str, object] | None = None,
) -> RunsTable:
    """A RunsTable from plain arrays (published data, synthetic data, tests).

    C defaults to 6·N·D; budget to NaN (no IsoFLOP cells); Kaplan's N to unknown (NaN), and
    Kaplan's C is 6·N_kaplan·D when it is given. ``extra``: more columns by name (e.g. the
    OPTIONAL ``seed``, ``role``, ``schedule``, or ``flops_exact``), one value per run.
    """
    n_arr = np.asarray(n, dtype=float).ravel()
    d_arr = np.asarray(d, dtype=float).ravel()
    size = n_arr.size
    nk = np.full(size, np.nan) if n_kaplan is None else np.asarray(n_kaplan, dtype=float).ravel()
    frame = pd.DataFrame({
        "run_id": ([f"row{i}" for i in range(size)] if run_ids is None
                   else [str(r) for r in np.asarray(run_ids).ravel()]),
        "N": n_arr,
        "D": d_arr,
        "C": 6.0 * n_arr * d_arr if c is None else np.asarray(c, dtype=float).ravel(),
        "loss": np.asarray(loss, dtype=float).ravel(),
        "budget": np.full(size, np.nan) if budget is None
        else np.asarray(budget, dtype=float).ravel(),
        "N_kaplan": nk,
        "C_kaplan": 6.0 * nk * d_arr,
        "family": [""] * size,
    })
    for name, values in (extra or {}).items():
        frame[name] = np.asarray(values).ravel() if np.ndim(values) else values
    return RunsTable(frame, source=source, n_convention=n_convention, c_convention=c_convention)


def empty_curves() -> pd.DataFrame:
    """A curves frame with no rows (the schema without data)."""
    return pd.DataFrame({c: pd.Series(dtype=object if c == "run_id" else float)
                         for c in CURVE_COLUMNS})
