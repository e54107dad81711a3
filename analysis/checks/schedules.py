"""WSD runs against cosine runs of the same model and tokens.

Why: a warmup-stable-decay (WSD) run can be *branched* from the stable phase of a longer
trunk, so one trunk yields runs of many lengths for the price of one. That is only worth it
if a branched run ends where a cosine run of the same length does (Hägele et al. 2024 find
WSD matches cosine). Runs pair when they share family, shape (n_layer, d_model), N and D;
seeds of one schedule in a pair are averaged. Per pair: difference = WSD − cosine loss, and
that difference in units of its noise, σ·sqrt(1/n_cosine + 1/n_wsd) with σ the run-to-run
noise (``analysis.checks.noise``), so |z| ≲ 2 is "no difference the seeds could not make".
All finished runs take part, held-out ones too: this is a comparison, not a fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.checks.noise import row_keys
from analysis.fits.results import Skipped
from analysis.runs.table import RunsTable

PAIR_COLUMNS = ("family", "n_layer", "d_model", "N", "D")
COSINE = "cosine"
WSD = "wsd"


@dataclass(frozen=True)
class SchedulePair:
    """One cell trained with both schedules."""

    family: str
    n_layer: float
    d_model: float
    N: float
    D: float
    cosine_loss: float
    """Mean final loss over the cell's cosine runs (seeds)."""
    wsd_loss: float
    n_cosine: int
    n_wsd: int
    branched: bool
    """At least one WSD run of the cell was branched from a trunk (tag branch_of)."""
    noise_sd: float | None
    """σ·sqrt(1/n_cosine + 1/n_wsd): the spread of the difference from seeds alone."""

    @property
    def difference(self) -> float:
        """WSD − cosine final loss (negative: WSD is better)."""
        return self.wsd_loss - self.cosine_loss

    @property
    def rel_difference(self) -> float:
        return self.difference / self.cosine_loss

    @property
    def z(self) -> float | None:
        """The difference in units of its noise (None without a noise estimate)."""
        return None if not self.noise_sd else self.difference / self.noise_sd


@dataclass(frozen=True)
class ScheduleComparison:
    """Every pair, and the mean difference over pairs."""

    pairs: tuple[SchedulePair, ...]
    sigma: float | None
    """The run-to-run noise used for z (None: no seed replicates)."""

    @property
    def mean_difference(self) -> float:
        return float(np.mean([p.difference for p in self.pairs]))

    @property
    def se_difference(self) -> float | None:
        """Standard error of the mean difference over pairs (None for a single pair)."""
        diffs = np.array([p.difference for p in self.pairs])
        return None if diffs.size < 2 else float(diffs.std(ddof=1) / np.sqrt(diffs.size))


def _number(row: pd.Series, name: str) -> float:
    return float(row[name]) if name in row.index else float("nan")


def compare_schedules(runs: RunsTable, sigma: float | None = None
                      ) -> ScheduleComparison | Skipped:
    """Pair cosine and WSD runs of the same cell (module docstring)."""
    frame = runs.frame.assign(schedule=runs.values("schedule").astype(str).to_numpy(),
                              branch_of=runs.values("branch_of").astype(str).to_numpy())
    frame = frame[frame["schedule"].isin((COSINE, WSD))]
    pairs = []
    for _, cell in frame.groupby(row_keys(frame, PAIR_COLUMNS), sort=True):
        cosine = cell[cell["schedule"] == COSINE]
        wsd = cell[cell["schedule"] == WSD]
        if cosine.empty or wsd.empty:
            continue
        first = cell.iloc[0]
        n_c, n_w = len(cosine), len(wsd)
        pairs.append(SchedulePair(
            family=str(first["family"]), n_layer=_number(first, "n_layer"),
            d_model=_number(first, "d_model"), N=float(first["N"]), D=float(first["D"]),
            cosine_loss=float(cosine["loss"].mean()), wsd_loss=float(wsd["loss"].mean()),
            n_cosine=n_c, n_wsd=n_w, branched=bool((wsd["branch_of"] != "").any()),
            noise_sd=None if sigma is None else float(sigma * np.sqrt(1 / n_c + 1 / n_w))))
    if not pairs:
        return Skipped("no cell has both a cosine and a WSD run")
    pairs.sort(key=lambda p: (float(f"{p.D * p.N:.3g}"), p.N))  # by compute, then size
    return ScheduleComparison(pairs=tuple(pairs), sigma=sigma)
