"""Which runs the fits read: main runs of one schedule, seed replicates averaged.

Five rules, applied in this order, each leaving out runs with a reason (or, the fourth,
setting them apart for the laws that can read them):

1. **Held-out runs are never fitted.** A run tagged ``role = holdout`` exists to test the
   law's prediction (``analysis.checks.heldout``); fitting it would make that test circular.
   So does every run whose cost (its IsoFLOP budget label, or its C without one) is above
   ``holdout_above`` (the CLIs' ``--holdout-above C``): a backtest of any sweep or published
   ladder, whose held-out cells every law predicts (``analysis.checks.backtest``).
2. **One learning-rate schedule.** A final loss depends on the schedule (a cosine run and
   a WSD run of the same N and D end at different losses), so mixing them would bend the
   law. When the main runs have several schedules the fits use the cosine runs (Chinchilla's
   recipe, and the sweep's default) or, without cosine runs, the most common schedule; the
   others are compared with them in ``analysis.checks.schedules`` instead.
3. **Repeated data, when asked** (``max_epochs``; the CLIs' ``--max-epochs``). A run that
   passed over its train split more than once (its ``epochs``, recorded since issue 17) has
   a lower loss than fresh data would give it (Muennighoff et al. 2023), so a law fitted
   through it is biased. Without ``max_epochs`` such runs are kept and named
   (``FitSelection.repeated``), for the report to say so.
4. **Fresh data first: repeat variants go to the data-constrained laws only.** A run at the
   same N and D as another but on fewer unique tokens U (a sweep's ``isoflop.repeats``, or
   published ablations of U) differs from it only by how often it repeated its data. The
   laws that assume fresh data would read its higher loss as noise about the same (N, D),
   and Approach 2's parabolas would mix two curves; so such runs (U below the largest U at
   their N and D, by more than ``U_RTOL``) are kept apart (``FitSelection.repeats``): the
   data-constrained laws, which model U, fit them beside the fitted runs
   (``analysis.fits.spec.FitInput.repeats``), and every other fit and check reads the rest.
5. **One point per cell.** Seed replicates are averaged (``analysis.checks.noise``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.checks.noise import collapse_replicates
from analysis.errors import DataError
from analysis.fits.optimum import line_costs
from analysis.runs.table import Excluded, RunsTable
from pipeline.vocab import keys

PREFERRED_SCHEDULE = "cosine"
U_RTOL = 1e-3
"""Relative difference in U below which two runs of one N and D trained on the same data (a
cell's seeds can record U a few tokens apart: U = D / epochs, epochs as recorded)."""


@dataclass(frozen=True)
class FitSelection:
    """The runs split into what is fitted, what is held out, and what is left out."""

    fitted: RunsTable
    """What every fit reads: main runs of one schedule, one row per cell (seeds averaged)."""
    replicates: RunsTable
    """The same runs before averaging: the input of the noise estimate."""
    holdout: RunsTable | None
    """Runs with role "holdout" or above ``holdout_above`` (None when there are none)."""
    schedule: str
    """The schedule of the fitted runs ("" when the runs do not record it)."""
    left_out: tuple[Excluded, ...]
    """Finished runs that are not fitted, with the reason (held out, another schedule,
    repeated data)."""
    repeated: tuple[tuple[str, float], ...] = ()
    """Fitted runs (before averaging) that trained more than one epoch: (name, epochs)."""
    repeats: RunsTable | None = None
    """Repeat variants (rule 4), one row per cell: fitted by the data-constrained laws only;
    None when there are none."""
    holdout_above: float | None = None
    """The cost above which runs were held out (--holdout-above), None when not asked."""

    @property
    def n_averaged(self) -> int:
        """Runs merged away by averaging seed replicates."""
        return len(self.replicates) - len(self.fitted)


def _names(runs: RunsTable, mask: np.ndarray) -> list[str]:
    frame = runs.frame
    names = frame["run_name"] if "run_name" in frame.columns else frame["run_id"]
    return [str(n) or str(r) for n, r in zip(names[mask], frame["run_id"][mask], strict=True)]


def select_runs(runs: RunsTable, max_epochs: float | None = None,
                holdout_above: float | None = None) -> FitSelection:
    """Apply the four rules of the module docstring. DataError when nothing is left to fit."""
    role = runs.values("role").astype(str).to_numpy()
    held = role == keys.ROLE_HOLDOUT
    if held.all():
        raise DataError(f"{runs.source}: every run has role 'holdout'; nothing to fit")
    left_out = [Excluded(name, "held out (role holdout): predicted, never fitted")
                for name in _names(runs, held)]
    if holdout_above is not None:
        # The cost is the budget label the sweep held constant (or C): a budget's runs are
        # held out together, whatever their exact C.
        above = ~held & (line_costs(runs) > holdout_above * (1 + 1e-9))
        if (held | above).all():
            lowest = float(line_costs(runs)[~held].min())
            raise DataError(f"{runs.source}: --holdout-above {holdout_above:g} holds out every "
                            f"run (the lowest budget is {lowest:.4g}); nothing to fit")
        left_out += [Excluded(name, f"held out (above --holdout-above {holdout_above:g}): "
                                    "predicted, never fitted") for name in _names(runs, above)]
        held |= above
    schedule = runs.values("schedule").astype(str).to_numpy()
    present, counts = np.unique(schedule[~held], return_counts=True)
    chosen = (PREFERRED_SCHEDULE if PREFERRED_SCHEDULE in present
              else str(present[np.argmax(counts)]))
    other = ~held & (schedule != chosen)
    for name, sched in zip(_names(runs, other), schedule[other], strict=True):
        left_out.append(Excluded(name, f"schedule {sched or 'unknown'}: the fits use the "
                                       f"{chosen or 'unknown-schedule'} runs only"))
    epochs = runs.values("epochs").to_numpy(dtype=float)
    kept = ~held & ~other
    if max_epochs is not None:
        over = kept & (epochs > max_epochs)  # NaN (not recorded) compares False: kept
        for name, e in zip(_names(runs, over), epochs[over], strict=True):
            left_out.append(Excluded(name, f"repeats its data ({e:.2f} epochs > "
                                           f"--max-epochs {max_epochs:g})"))
        kept &= ~over
        if not kept.any():
            raise DataError(f"{runs.source}: every run trained more than {max_epochs:g} "
                            "epoch(s) (--max-epochs); nothing to fit")
    variant = kept & repeat_variants(runs, kept)
    kept &= ~variant
    repeated = kept & (epochs > 1.0)
    replicates = runs.subset(kept)
    return FitSelection(
        repeats=collapse_replicates(runs.subset(variant)) if variant.any() else None,
        fitted=collapse_replicates(replicates), replicates=replicates,
        holdout=runs.subset(held) if held.any() else None, schedule=chosen,
        left_out=tuple(left_out),
        repeated=tuple(zip(_names(runs, repeated), map(float, epochs[repeated]), strict=True)),
        holdout_above=holdout_above,
    )


def repeat_variants(runs: RunsTable, among: np.ndarray) -> np.ndarray:
    """Rule 4: the runs of ``among`` whose U is below the largest U of the runs of ``among``
    at the same N and D (to ``U_RTOL``); False where U is unknown."""
    u = runs.unique_tokens()
    out = np.zeros(len(runs), dtype=bool)
    if not among.any() or not np.isfinite(u[among]).any():
        return out
    # N and D as planned are integers; published ones are rounded to 6 significant digits.
    key = pd.DataFrame({"n": [f"{x:.6g}" for x in runs.column("N")],
                        "d": [f"{x:.6g}" for x in runs.column("D")],
                        "u": np.where(among, u, np.nan)})
    top = key.groupby(["n", "d"])["u"].transform("max").to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        out = among & np.isfinite(u) & (u < top * (1 - U_RTOL))
    return out
