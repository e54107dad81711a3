"""Whether the runs pin the data-constrained law's decay constants R_D* and R_N*: their
profiles and the flags of the report and fit.json.

Why (issue 52): R_D* only matters where runs repeat their data enough for exp(−R_D/R_D*) to
move, and R_N* where runs hold parameters in excess of N_opt(U); elsewhere any value fits as
well and the estimate is the optimiser's, not the runs'. Each R* is profiled over
``PROFILE_GRID`` (the whole of analysis.fits.data_constrained.R_BOUNDS, 0.01 to 1e4): held at
each value while every other parameter is refitted from the optimum, the worsening of the
Huber objective put on a deviance scale as analysis.checks.identification does (κ, the robust
drop-in-dispersion test). R* is flagged "not identified" when its 95% profile interval (the
values with deviance under DEVIANCE_LIMIT = 3.84) reaches an end of the grid: the runs then do
not bound it on that side. Each profile costs ~10 local refits (~0.5 s on the 296 published
runs): paid once per table entry, when the flags are first asked for (``PendingProfiles``).
"""

from __future__ import annotations

import math

import numpy as np

from analysis.checks.identification import DEVIANCE_LIMIT, ParameterFlag, Pending, huber_kappa
from analysis.fits import data_constrained as dc
from analysis.fits.approach3 import HUBER_DELTA
from analysis.fits.data_constrained import DataConstrainedLaw
from analysis.text import fmt

PROFILE_GRID = (1e-2, 0.1, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1e3, 1e4)
"""Values of R* at which its profile is evaluated (the whole range of ``dc.R_BOUNDS``)."""

def profile(law: DataConstrainedLaw, n: object, d: object, u: object, loss: object,
            which: str) -> tuple[tuple[float, float], ...]:
    """(R*, deviance) at each PROFILE_GRID value of R_D* or R_N* (``which``), the other
    parameters refitted from the optimum (deviance: analysis.checks.identification's)."""
    pts = dc.points(n, d, u, loss, law.form)
    index = law.n_params - 2 if which == "R_D_star" else law.n_params - 1
    x_hat = np.asarray(law.theta)
    r = dc.log_loss(x_hat, pts.ln_n, pts.ln_d, pts.ln_u, law.form) - pts.ln_loss
    kappa = huber_kappa(r, HUBER_DELTA, law.n_params)
    out = []
    for value in PROFILE_GRID:
        start = x_hat.copy()
        start[index] = math.log(value)
        best = dc.minimize_from(pts, law.form, np.array([start]), fixed=(index, math.log(value)))
        f = law.objective if best is None else min(float(best.fun), 1e300)
        dev = 2.0 * max(f - law.objective, 0.0) * kappa if math.isfinite(kappa) else (
            0.0 if f <= law.objective * (1 + 1e-12) else math.inf)
        out.append((value, float(dev)))
    return tuple(out)


def identify(law: DataConstrainedLaw, n: object, d: object, u: object, loss: object
             ) -> tuple[tuple[ParameterFlag, ...], dict[str, tuple[tuple[float, float], ...]]]:
    """The flags of R_D* and R_N*: not identified when their 95% profile interval (deviance
    under DEVIANCE_LIMIT) reaches an end of PROFILE_GRID; and the profiles."""
    flags, profiles = [], {}
    values = law.parameters()
    for name, words, why in (
            ("R_D_star", "R_D*", "repeat their data enough"),
            ("R_N_star", "R_N*", "hold enough parameters in excess of N_opt(U)")):
        prof = profile(law, n, d, u, loss, name)
        profiles[name] = prof
        inside = [v for v, dev in prof if dev < DEVIANCE_LIMIT]
        if not inside or (inside[0] > PROFILE_GRID[0] and inside[-1] < PROFILE_GRID[-1]):
            continue
        lo, hi, est = min(inside), max(inside), values[name]
        at_bound = any(abs(math.log(est / b)) < 0.01 for b in dc.R_BOUNDS)
        span = f"at {fmt(lo)}" if lo == hi else f"from {fmt(lo)} to {fmt(hi)}"
        flags.append(ParameterFlag(
            name, "flat_profile", est, None,
            f"{words} not identified: its 95% profile interval reaches the end of the range "
            f"tested ({fmt(PROFILE_GRID[0])} to {fmt(PROFILE_GRID[-1])}; within the limit "
            f"{span}, the others refitted; estimate {fmt(est)}"
            f"{', at its bound' if at_bound else ''}): the runs do not {why} to pin it",
            moved_to=(lo, hi), deviance=max(dev for _, dev in prof if dev < DEVIANCE_LIMIT)))
    return tuple(flags), profiles


class PendingProfiles(Pending):
    """The full-data fit's flags and profiles, computed when first asked for (an
    analysis.checks.identification.Pending: the rolling-origin refits never need them)."""

    def __init__(self, n: object, d: object, u: object, loss: object) -> None:
        self.points = tuple(np.array(v, dtype=float) for v in (n, d, u, loss))
        self.result: tuple[tuple[ParameterFlag, ...], dict] | None = None

    def get(self, law: DataConstrainedLaw) -> tuple[ParameterFlag, ...]:
        return self.both(law)[0]

    def both(self, law: DataConstrainedLaw) -> tuple[tuple[ParameterFlag, ...], dict]:
        if self.result is None:
            self.result = identify(law, *self.points)
        return self.result


def law_profiles(law: DataConstrainedLaw) -> dict[str, tuple[tuple[float, float], ...]]:
    """The profiles of the table's full-data fit ({} on other fits)."""
    pending = law.identification
    return pending.both(law)[1] if isinstance(pending, PendingProfiles) else {}
