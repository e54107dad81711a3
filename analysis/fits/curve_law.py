"""A whole-curve, schedule-aware scaling law: every validation point of every run, jointly in N.

Why: an endpoint law (Approach 3, analysis.fits.interaction) uses one number per run, the
last, and throws away the 3-8 validation points logged along it. Those points are not on the
final-loss surface L(N, D): a cosine run at half its tokens has had a higher LR than a run of
that length annealed to the end, so its loss is higher. A law that knows each run's learning
rate reads them all (Tissue et al. 2024, "Scaling law with learning rate annealing", arXiv
2408.11029: L(s) = L0 + A·S1^-α − C·S2; Luo et al. 2025, the multi-power law, arXiv
2503.12811). The form fitted here, per validation point of a run of N parameters after s steps:

    L(N, s) = E + (A/N^α + B/S1(s)^β)^γ − C·S2(s)

* S1(s) = τ·Σ_{i<s} m_i, the forward area of the LR in *LR-weighted tokens*: m_i the step's
  LR / the run's peak LR (analysis.runs.lr_schedule), τ the run's tokens per step. Why tokens
  and the peak-normalised LR: the runs of one sweep differ in batch (a batch rule) and peak LR
  (scaled with width and batch by the recipe, pipeline.vocab.recipe), so Tissue's Σ η_i in
  absolute LR x steps would credit a run with a 4x batch at a 2x LR (the square-root rule)
  with half the progress of one that reads the same tokens in 4x the steps; in LR-weighted
  tokens a constant-LR run has S1 = D, and a run's final S1 is its D times its mean
  multiplier, so the law reduces to a law in D at the end of a run.
* S2(s) = (1 − λ)·Σ_{i<s} M_i, M_i = λ·M_{i−1} + (m_{i−1} − m_i): Tissue's annealing area with
  momentum λ (per step), scaled by (1 − λ) so that it is dimensionless: the LR drop (in peak
  units) that has taken effect, between 0 and 1 − min_lr_ratio. Warmup steps add nothing (the
  LR rises there). λ is chosen from ``LAMBDAS`` by the fit's objective (Tissue's 0.999 and two
  shorter memories: our runs are 2,900-5,700 steps, Tissue's tens of thousands).
* The N x S1 interaction (γ) is the interaction law's (analysis.fits.interaction), and the
  annealing term is Tissue's, additive and linear in S2. Measured on the chinchilla_1gpu curves
  (cosine runs up to 3.2e13 FLOPs, 142 points; exploratory fits at λ = 0.99 / 0.999, issue 51):
  the additive E + A/N^α + B/S1^β − C·S2 fitted worse (summed Huber 0.00195 / 0.00215 against
  0.00165 / 0.00206) and missed the 1e14 runs by 5.9% / 4.4% (median) against 1.6% / 2.5%;
  a multiplicative annealing term E + (…)^γ·(1 − C·S2) fitted 0.00193 / 0.00213, 3.9% / 3.9%.
  Those 1e14 errors were seen when the form was chosen: the held-out check of the choice is
  the 3e14 cell and the half-curve backtest (benchmarks/studies/curve_law_backtest.py).
* λ is picked by the objective on the fitted points only; on those runs the objective and the
  1e14 error order the λ alike (0.98: 0.00169, 1.8%; 0.99: 0.00165, 1.6%; 0.995: 0.00162,
  1.35%; 0.999: 0.00206, 2.5%; 0.9995: 0.00245, 3.7%).
* E goes to 0 on those runs (flagged in ``flags``), as in the endpoint laws there: the curves
  do not identify an irreducible loss at this scale.

Fitted as Approach 3 is (analysis.fits.approach3): Huber δ = 1e-3 on ln L̂ − ln L, summed over
points, L-BFGS-B with the analytic gradient and bounds, from a grid of starts screened all at
once. Its ``log_loss(ln N, ln D)`` is the predicted *final* loss of a run of N parameters trained
on D tokens under the standard recipe's schedule (``RecipeSchedule.for_tokens``: the batch
rule, steps, warmup, cosine/WSD/constant), so the law is a ``Law`` of analysis.fits.laws;
``predict_curve`` gives a whole curve for a run's own schedule.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.signal import lfilter

from analysis.errors import FitError
from analysis.fits.approach3 import HUBER_DELTA, LBFGS_OPTIONS
from analysis.numerics.threads import single_threaded_blas
from analysis.runs.lr_schedule import RecipeSchedule, Schedule, multipliers, schedule_of

WHAT = "Curve law (L = E + (A/N^alpha + B/S1^beta)^gamma - C*S2)"
LAMBDAS = (0.99, 0.995, 0.999)
"""Momentum of the annealing area per optimizer step (Tissue et al. 2024 use 0.999)."""
N_PARAMS = 8
"""E, A, B, α, β, γ, C and λ (chosen from LAMBDAS)."""
DEFAULT_KEEP = 12
"""Screened grid starts that L-BFGS-B runs from, per λ."""
BOUNDS = [(-60.0, 5.0), (None, None), (1e-3, 3.0), (None, None), (1e-3, 3.0), (0.05, 10.0),
          (0.0, 5.0)]
"""(ln E, ln A, α, ln B, β, γ, C): exponents positive, γ as the interaction law's, C >= 0."""
LOSS_FLOOR = 1e-6
"""Predicted loss floor (nats) where C·S2 would exceed the rest: no log of a negative loss."""
MAX_LN = 700.0
"""ln of the largest reducible loss computed (exp(709) overflows float64): far starts stay
finite."""
E_VANISHED = 1e-3
"""E below this (nats) is reported as not identified: the fit sent it to its bound 0."""


@dataclass(frozen=True)
class StartGrid:
    """L-BFGS-B starts: every combination, screened by the objective (Approach 3's idea)."""

    e: tuple[float, ...] = (-1.0, 0.0, 0.5)
    a: tuple[float, ...] = (0.0, 5.0, 10.0, 15.0)
    alpha: tuple[float, ...] = (0.25, 0.5, 1.0)
    b: tuple[float, ...] = (0.0, 5.0, 10.0, 15.0)
    beta: tuple[float, ...] = (0.25, 0.5, 1.0)
    gamma: tuple[float, ...] = (0.5, 1.0)
    c: tuple[float, ...] = (0.05, 0.3)

    def points(self) -> np.ndarray:
        return np.array(list(itertools.product(self.e, self.a, self.alpha, self.b, self.beta,
                                               self.gamma, self.c)), dtype=float)


def schedule_areas(schedule: Schedule, tokens_per_step: float,
                   lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(S1, S2) after 0, 1, ..., steps steps (arrays of steps + 1): S1 in LR-weighted tokens,
    S2 dimensionless (module docstring)."""
    if not 0.0 <= lam < 1.0:
        raise FitError(f"{WHAT}: momentum lambda = {lam!r} must lie in [0, 1)")
    m = multipliers(schedule)
    drop = np.zeros_like(m)
    drop[1:] = m[:-1] - m[1:]
    drop[: schedule.warmup_steps + 1] = 0.0  # the LR rises in warmup: no annealing
    momentum = lfilter([1.0], [1.0, -lam], np.maximum(drop, 0.0))
    s1 = np.concatenate([[0.0], np.cumsum(m)]) * float(tokens_per_step)
    s2 = np.concatenate([[0.0], np.cumsum(momentum)]) * (1.0 - lam)
    return s1, s2


@dataclass(frozen=True)
class CurvePoints:
    """Every usable validation point: one row per point, the run it belongs to."""

    run_id: np.ndarray
    step: np.ndarray
    ln_n: np.ndarray
    ln_s1: np.ndarray
    s2: np.ndarray
    ln_loss: np.ndarray


def _run_rows(runs: pd.DataFrame) -> dict[str, Mapping[str, object]]:
    missing = [c for c in ("run_id", "N", "D") if c not in runs.columns]
    if missing:
        raise FitError(f"{WHAT}: the runs table has no column {missing[0]!r}")
    return {str(r["run_id"]): r for r in runs.to_dict("records")}


def curve_points(runs: pd.DataFrame, curves: pd.DataFrame, lam: float) -> CurvePoints:
    """The points of ``curves`` (run_id, step, tokens, loss) of the runs in ``runs`` (N, D and
    the schedule fields of analysis.runs.lr_schedule.schedule_of, whose DataError names a
    missing one); points at step 0 or with a non-finite loss are left out."""
    for col in ("run_id", "step", "tokens", "loss"):
        if col not in curves.columns:
            raise FitError(f"{WHAT}: the curves have no column {col!r}")
    rows = _run_rows(runs)
    out: list[tuple[np.ndarray, ...]] = []
    for rid, group in curves.groupby("run_id", sort=False):
        run = rows.get(str(rid))
        if run is None:
            continue
        schedule = schedule_of(run)
        steps = group["step"].to_numpy(dtype=np.int64)
        loss = group["loss"].to_numpy(dtype=float)
        if np.any(steps > schedule.steps):
            raise FitError(f"{WHAT}: run {rid}: a validation point at step {steps.max()} "
                           f"beyond its steps = {schedule.steps}")
        per_step = float(run["D"]) / schedule.steps  # tokens per optimizer step
        keep = (steps > 0) & np.isfinite(loss) & (loss > 0)
        s1, s2 = schedule_areas(schedule, per_step, lam)
        k = steps[keep]
        out.append((np.full(k.size, str(rid), dtype=object), k,
                     np.full(k.size, np.log(float(run["N"]))), np.log(s1[k]), s2[k],
                     np.log(loss[keep])))
    if not out:
        raise FitError(f"{WHAT}: no validation point of the runs given")
    return CurvePoints(*(np.concatenate(cols) for cols in zip(*out, strict=True)))


def _lse(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ln(e^u + e^v) and the weight e^u / (e^u + e^v), overflow-free."""
    top = np.maximum(u, v)
    eu, ev = np.exp(u - top), np.exp(v - top)
    return top + np.log(eu + ev), eu / (eu + ev)


def predict_log(theta: np.ndarray, ln_n: np.ndarray, ln_s1: np.ndarray,
                s2: np.ndarray) -> np.ndarray:
    """ln L̂ for θ = (ln E, ln A, α, ln B, β, γ, C); θ may be (7, k) against (m, 1) points."""
    e, a, alpha, b, beta, gamma, c = theta
    s, _ = _lse(a - alpha * ln_n, b - beta * ln_s1)
    p, _ = _lse(e, gamma * s)  # ln(E + R), R = (A/N^α + B/S1^β)^γ
    return np.log(np.maximum(np.exp(np.minimum(p, MAX_LN)) - c * s2, LOSS_FLOOR))


def objective(theta: np.ndarray, pts: CurvePoints,
              delta: float = HUBER_DELTA) -> tuple[float, np.ndarray]:
    """Summed Huber terms of ln L̂ − ln L and the analytic gradient in θ.

    With P = E + R, R = e^(γs), s = LSE(u1, u2), w its weight of u1 and L̂ = P − C·S2:
    ∂L̂/∂lnE = E, ∂L̂/∂lnA = Rγw, ∂L̂/∂α = −Rγw lnN, ∂L̂/∂lnB = Rγ(1−w), ∂L̂/∂β = −Rγ(1−w) lnS1,
    ∂L̂/∂γ = R s, ∂L̂/∂C = −S2; each divided by L̂ for ln L̂ (0 where L̂ is at its floor).
    """
    e, a, alpha, b, beta, gamma, c = theta
    s, w = _lse(a - alpha * pts.ln_n, b - beta * pts.ln_s1)
    big_e, big_r = np.exp(e), np.exp(np.minimum(gamma * s, MAX_LN))
    raw = big_e + big_r - c * pts.s2
    pred = np.maximum(raw, LOSS_FLOOR)
    r = np.log(pred) - pts.ln_loss
    clipped = np.clip(r, -delta, delta)
    f = float((clipped * (r - 0.5 * clipped)).sum())
    psi = np.where(raw > LOSS_FLOOR, clipped / pred, 0.0)
    rg = psi * big_r * gamma
    grad = np.array([np.dot(psi, np.full_like(psi, big_e)), np.dot(rg, w),
                     -np.dot(rg * w, pts.ln_n), np.dot(rg, 1.0 - w),
                     -np.dot(rg * (1.0 - w), pts.ln_s1), np.dot(psi * big_r, s),
                     -np.dot(psi, pts.s2)])
    return f, grad


def screen(starts: np.ndarray, pts: CurvePoints, keep: int,
           delta: float = HUBER_DELTA) -> np.ndarray:
    """The ``keep`` starts with the lowest objective, evaluated in chunks (bounded memory)."""
    ln_n, ln_s1, s2, ln_loss = (v[:, None] for v in (pts.ln_n, pts.ln_s1, pts.s2, pts.ln_loss))
    f0 = []
    for chunk in np.array_split(starts, max(1, len(starts) // 200)):
        r = predict_log(chunk.T[:, None, :], ln_n, ln_s1, s2) - ln_loss
        clipped = np.clip(r, -delta, delta)
        f0.append((clipped * (r - 0.5 * clipped)).sum(axis=0))
    return starts[np.argsort(np.concatenate(f0), kind="stable")[:keep]]


@dataclass(frozen=True)
class CurveLaw:
    """Fitted L(N, s) = E + (A/N^α + B/S1^β)^γ − C·S2 (a ``Law`` of analysis.fits.laws)."""

    theta: tuple[float, ...]
    """(ln E, ln A, α, ln B, β, γ, C)."""
    lam: float
    """Momentum of the annealing area (per optimizer step)."""
    recipe: RecipeSchedule | None
    """The standard schedule a final loss L(N, D) refers to (None: curves only)."""
    objective: float
    converged: bool
    n_points: int
    n_runs: int
    flags: tuple[str, ...] = field(default=())
    """Parameters the points do not identify, as sentences ("E not identified: at its bound
    0"): at a bound of BOUNDS, or E below E_VANISHED."""
    n_params: int = N_PARAMS

    def parameters(self) -> dict[str, float]:
        ln_e, ln_a, alpha, ln_b, beta, gamma, c = self.theta
        return {"E": float(np.exp(ln_e)), "A": float(np.exp(ln_a)), "B": float(np.exp(ln_b)),
                "alpha": alpha, "beta": beta, "gamma": gamma, "C": c, "lambda": self.lam}

    def log_loss_at(self, ln_n: np.ndarray, ln_s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
        """ln L̂ at points given by their areas (S1 in LR-weighted tokens, S2 dimensionless)."""
        return predict_log(np.asarray(self.theta), np.asarray(ln_n, dtype=float),
                           np.asarray(ln_s1, dtype=float), np.asarray(s2, dtype=float))

    def log_loss(self, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
        """ln of the predicted final loss of runs of N parameters on D tokens, each trained
        under the recipe's schedule for D (RecipeSchedule.for_tokens)."""
        if self.recipe is None:
            raise FitError(f"{WHAT}: fitted without a recipe, so a final loss L(N, D) has no "
                           "schedule; give recipe= to fit_curve_law")
        ln_n, ln_d = np.broadcast_arrays(np.asarray(ln_n, float), np.asarray(ln_d, float))
        areas = np.array([_final_areas(self.recipe, float(np.exp(v)), self.lam)
                          for v in ln_d.ravel()]).reshape(*ln_d.shape, 2)
        return self.log_loss_at(ln_n, np.log(areas[..., 0]), areas[..., 1])

    def predict_curve(self, run: Mapping[str, object]) -> pd.DataFrame:
        """The whole predicted curve of a run (a mapping with N, D and the schedule fields of
        schedule_of): one row per step 1 .. steps with columns step, tokens, loss."""
        schedule = schedule_of(run)
        per_step = float(run["D"]) / schedule.steps  # type: ignore[arg-type]
        s1, s2 = schedule_areas(schedule, per_step, self.lam)
        ln_n = np.full(schedule.steps, np.log(float(run["N"])))  # type: ignore[arg-type]
        loss = np.exp(self.log_loss_at(ln_n, np.log(s1[1:]), s2[1:]))
        step = np.arange(1, schedule.steps + 1)
        return pd.DataFrame({"step": step, "tokens": step * per_step, "loss": loss})


@lru_cache(maxsize=4096)
def _final_areas(recipe: RecipeSchedule, tokens: float, lam: float) -> tuple[float, float]:
    schedule, per_step = recipe.for_tokens(tokens)
    s1, s2 = schedule_areas(schedule, per_step, lam)
    return float(s1[-1]), float(s2[-1])


def _fit_one(pts: CurvePoints, starts: np.ndarray, delta: float):
    best = None
    with single_threaded_blas():
        for x0 in starts:
            x0 = np.clip(x0, [lo if lo is not None else -np.inf for lo, _ in BOUNDS],
                         [hi if hi is not None else np.inf for _, hi in BOUNDS])
            res = minimize(objective, x0, args=(pts, delta), jac=True, method="L-BFGS-B",
                           bounds=BOUNDS, options=LBFGS_OPTIONS)
            if np.all(np.isfinite(res.x)) and np.isfinite(res.fun) and (
                    best is None or res.fun < best.fun):
                best = res
    return best


def fit_curve_law(runs: pd.DataFrame, curves: pd.DataFrame, *,
                  recipe: RecipeSchedule | None = None, lambdas: Sequence[float] = LAMBDAS,
                  keep: int = DEFAULT_KEEP, grid: StartGrid | None = None,
                  warm_start: CurveLaw | None = None,
                  delta: float = HUBER_DELTA) -> CurveLaw:
    """Fit the law to every validation point of ``runs`` (a runs table with N, D and the
    schedule fields; analysis.runs.lr_schedule) read from ``curves``. For each λ of
    ``lambdas`` L-BFGS-B runs from the ``keep`` best starts of the grid (and from
    ``warm_start``'s optimum); the lowest objective over λ and starts wins."""
    starts_all = (grid or StartGrid()).points()
    best, best_lam, best_pts = None, None, None
    for lam in lambdas:
        pts = curve_points(runs, curves, lam)
        if np.unique(pts.run_id).size < 2 or pts.ln_loss.size < N_PARAMS:
            raise FitError(f"{WHAT}: {pts.ln_loss.size} points of "
                           f"{np.unique(pts.run_id).size} run(s); need {N_PARAMS} points of "
                           "2 runs or more")
        if np.ptp(pts.ln_n) <= 0:
            raise FitError(f"{WHAT}: every run has N = {np.exp(pts.ln_n[0]):.4g}; the N "
                           "term cannot be fitted")
        starts = screen(starts_all, pts, keep, delta)
        if warm_start is not None:
            starts = np.vstack([np.asarray(warm_start.theta), starts])
        res = _fit_one(pts, starts, delta)
        if res is not None and (best is None or res.fun < best.fun):
            best, best_lam, best_pts = res, lam, pts
    if best is None:
        raise FitError(f"{WHAT}: no L-BFGS-B run reached a finite optimum")
    return _law_at(best, float(best_lam), recipe, best_pts)


def _law_at(best, lam: float, recipe: RecipeSchedule | None, pts: CurvePoints) -> CurveLaw:
    names = ("ln E", "ln A", "alpha", "ln B", "beta", "gamma", "C")
    flags = []
    for name, value, (lo, hi) in zip(names, best.x, BOUNDS, strict=True):
        if lo is not None and value <= lo + 1e-9:
            flags.append(f"{name} not identified: at its bound {lo}")
        elif hi is not None and value >= hi - 1e-9:
            flags.append(f"{name} not identified: at its bound {hi}")
    if np.exp(best.x[0]) < E_VANISHED and not any(f.startswith("ln E") for f in flags):
        flags.insert(0, f"E not identified: {np.exp(best.x[0]):.2g} nats (at its bound 0)")
    return CurveLaw(theta=tuple(float(v) for v in best.x), lam=lam, recipe=recipe,
                    objective=float(best.fun),
                    converged=bool(best.success or np.max(np.abs(best.jac)) < 1e-6),
                    n_points=int(pts.ln_loss.size), n_runs=int(np.unique(pts.run_id).size),
                    flags=tuple(flags))
