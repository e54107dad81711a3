"""Kaplan et al. (2020) laws: L(N), L(D), L(C_min), N_opt(C), and the joint L(N, D).

Kaplan et al. (2020), "Scaling Laws for Neural Language Models", Eqs. (1.1)-(1.5):
    L(N) = (N_c/N)^α_N            with data not the bottleneck
    L(D) = (D_c/D)^α_D            with the model not the bottleneck
    L(C_min) = (C_c/C_min)^α_C    along the compute-efficient frontier (training curves)
    L(N, D) = [(N_c/N)^(α_N/α_D) + D_c/D]^α_D
N is Kaplan's non-embedding count and C = 6·N·D with that N, whenever the runs record it.

Which runs stand for "the other variable is not the bottleneck": a sweep does not train every
size to convergence, so L(N) and L(D) are fitted to the *lower frontier* of the final losses:
a run is kept when its loss is below that of every run with a smaller-or-equal N (for L(N))
or D (for L(D)). With a full N x D grid this is the longest-trained run per size (and the
largest model per data size); with an IsoFLOP grid it is an approximation that reports say is
one. L(C_min) and N_opt(C) come from the envelope of training curves (analysis.fits.envelope).
The joint law is fitted to every run by least squares on log L. The table of fits also has it
as a law of its own ("kaplan_joint", ``fit_joint_law``): fitted on the sweep's N rather than
Kaplan's, with the allocation it implies along the sweep's IsoFLOP lines (analysis.fits.optimum),
so it can be compared with, and judged like, the other laws (issue 16).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from scipy.optimize import least_squares

from analysis.errors import FitError
from analysis.fits.envelope import DEFAULT_GRID_POINTS, Curve, envelope, interior_points
from analysis.fits.powerlaw import (
    InversePowerLaw,
    PowerLaw,
    as_positive,
    fit_inverse_power_law,
    fit_power_law,
    require_points,
    require_varying,
)
from analysis.numerics.batched import least_squares_batch, resample_counts
from analysis.numerics.bootstrap import Bootstrap, run_bootstrap
from analysis.numerics.threads import single_threaded_blas

WHAT_JOINT = "Kaplan joint L(N, D)"
JOINT_LOWER = (1e-4, 1e-4, -np.inf, -np.inf)
"""Lower bounds of (α_N, α_D, ln N_c, ln D_c) in every fit of the joint law."""
JOINT_BOUNDS: dict[str, tuple[float, float]] = {
    "alpha_N": (JOINT_LOWER[0], np.inf), "alpha_D": (JOINT_LOWER[1], np.inf),
    "N_c": (0.0, np.inf), "D_c": (0.0, np.inf)}
"""The same bounds by parameter, in its own units (analysis.checks.identification reads them):
N_c and D_c reach 0 only as their log runs to −∞."""
JOINT_BATCH_TOL = 1e-8
"""ftol, xtol and gtol of the batched refit: SciPy least_squares' defaults, the reference's."""
JOINT_BATCH_MAX_ITER = 500


def lower_frontier(x: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points whose loss is below every point with smaller-or-equal x (sorted by x)."""
    order = np.lexsort((loss, x))  # by x, then loss: the best run of each x comes first
    xs, ls = x[order], loss[order]
    keep = ls < np.concatenate([[np.inf], np.minimum.accumulate(ls)[:-1]])
    return xs[keep], ls[keep]


@dataclass(frozen=True)
class KaplanJoint:
    """L(N, D) = [(N_c/N)^(α_N/α_D) + D_c/D]^α_D (Kaplan et al. 2020, Eq. 1.5)."""

    alpha_N: float
    alpha_D: float
    N_c: float
    D_c: float
    n_points: int
    rmse_log: float

    n_params: ClassVar[int] = 4

    def __call__(self, n: float | np.ndarray, d: float | np.ndarray) -> float | np.ndarray:
        return np.exp(self.log_loss(np.log(n), np.log(d)))

    def log_loss(self, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
        """ln L̂ at (ln N, ln D): what the optimum (analysis.fits.optimum) minimises."""
        return _joint_log_loss(np.array([self.alpha_N, self.alpha_D, np.log(self.N_c),
                                         np.log(self.D_c)]), ln_n, ln_d)

    def parameters(self) -> dict[str, float]:
        return {"alpha_N": self.alpha_N, "alpha_D": self.alpha_D, "N_c": self.N_c,
                "D_c": self.D_c}


def _joint_log_loss(p: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
    """ln L = α_D · ln[exp((α_N/α_D)(ln N_c − ln N)) + exp(ln D_c − ln D)], overflow-free."""
    alpha_n, alpha_d, ln_nc, ln_dc = p
    return alpha_d * np.logaddexp(alpha_n / alpha_d * (ln_nc - ln_n), ln_dc - ln_d)


def _joint_jacobian(p: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
    """d ln L / d (α_N, α_D, ln N_c, ln D_c), (points, 4). With u = (α_N/α_D)(ln N_c − ln N),
    v = ln D_c − ln D, S = logaddexp(u, v) and w = exp(u − S) (the N term's share):
    (w (ln N_c − ln N), S − w u, w α_N, α_D (1 − w)). Analytic: least squares then needs no
    finite differences (5 evaluations per Jacobian): 1.65x less CPU per fit (BENCHMARKS.md)."""
    alpha_n, alpha_d, ln_nc, ln_dc = p
    gap = ln_nc - ln_n
    u, v = alpha_n / alpha_d * gap, ln_dc - ln_d
    total = np.logaddexp(u, v)
    w = np.exp(u - total)
    return np.column_stack([w * gap, total - w * u, w * alpha_n, alpha_d * (1.0 - w)])


def _joint_logs(n: object, d: object, loss: object) -> tuple[np.ndarray, ...]:
    """(ln N, ln D, ln L) of points the joint law can be fitted to; FitError otherwise."""
    ln_n = np.log(as_positive("N", n, what=WHAT_JOINT))
    ln_d = np.log(as_positive("D", d, what=WHAT_JOINT))
    ln_l = np.log(as_positive("loss", loss, what=WHAT_JOINT))
    if not ln_n.size == ln_d.size == ln_l.size:
        raise FitError(f"{WHAT_JOINT}: N, D and loss differ in length")
    require_points(ln_n.size, 4, what=WHAT_JOINT)
    require_varying("loss", ln_l, what=WHAT_JOINT)
    require_varying("N", ln_n, what=WHAT_JOINT)
    require_varying("D", ln_d, what=WHAT_JOINT)
    return ln_n, ln_d, ln_l


def _joint_at(x: np.ndarray, cost: float, n_points: int) -> KaplanJoint:
    """The law at least squares' end point x = (α_N, α_D, ln N_c, ln D_c), or FitError."""
    alpha_n, alpha_d, ln_nc, ln_dc = (float(v) for v in x)
    if max(abs(ln_nc), abs(ln_dc)) > 700:
        raise FitError(f"{WHAT_JOINT}: N_c or D_c out of range (ln = {ln_nc:.4g}, {ln_dc:.4g})")
    return KaplanJoint(alpha_N=alpha_n, alpha_D=alpha_d, N_c=float(np.exp(ln_nc)),
                       D_c=float(np.exp(ln_dc)), n_points=n_points,
                       rmse_log=float(np.sqrt(2.0 * cost / n_points)))


def fit_kaplan_joint(n: object, d: object, loss: object, *,
                     starts: Sequence[Sequence[float]] | None = None) -> KaplanJoint:
    """Least squares on ln L from a few starts (or the given (α_N, α_D, ln N_c, ln D_c) rows)."""
    ln_n, ln_d, ln_l = _joint_logs(n, d, loss)
    if starts is None:  # exponents as Kaplan's magnitudes; scales beyond the data
        starts = [(an, ad, ln_n.max() + sn, ln_d.max() + sd)
                  for an in (0.05, 0.3) for ad in (0.05, 0.3) for sn in (3.0, 15.0)
                  for sd in (3.0, 15.0)]
    best = None
    with single_threaded_blas():
        for p0 in starts:
            res = least_squares(lambda p: _joint_log_loss(p, ln_n, ln_d) - ln_l,
                                np.asarray(p0), jac=lambda p: _joint_jacobian(p, ln_n, ln_d),
                                bounds=(JOINT_LOWER, np.inf))
            if np.all(np.isfinite(res.x)) and (best is None or res.cost < best.cost):
                best = res
    if best is None:
        raise FitError(f"{WHAT_JOINT}: no start reached a finite optimum")
    return _joint_at(best.x, float(best.cost), int(ln_n.size))


def refit_joint_batch(n: np.ndarray, d: np.ndarray, loss: np.ndarray, start: KaplanJoint,
                      indices: np.ndarray) -> list[KaplanJoint | str]:
    """fit_kaplan_joint(n[idx], d[idx], loss[idx], starts=[start]) for every row idx of
    ``indices`` at once: each resample's fit or its FitError message, in order.

    Each resample is the full data weighted by how often it drew each point; all of them
    take Levenberg-Marquardt steps together (analysis.numerics.batched.least_squares_batch) from
    the full-data optimum, with the tolerances of the one-at-a-time reference (SciPy
    least_squares' defaults). The same least-squares problem, start and bounds, so the same
    minimum where the resample identifies the law: tests/test_fits_kaplan.py compares them
    resample by resample. Where it does not (a flat valley: log N and log D nearly collinear,
    or a dozen runs), the two solvers stop at different points of the valley with costs
    within ~1e-7 of each other; a resample that the batch does not finish (out of iterations,
    or a scale out of range) is refitted by the reference itself. 400 resamples of the
    quickstart's 12 runs: 3.3 s of CPU -> 0.2 s (issue 21; BENCHMARKS.md).
    """
    ln_n, ln_d, ln_l = _joint_logs(n, d, loss)
    out: list[KaplanJoint | str]
    out, weights, row_data = resample_counts(  # the same checks (and messages) as a refit
        indices, ln_n.size, lambda idx: _joint_logs(n[idx], d[idx], loss[idx]))
    if not row_data:
        return out
    x0 = np.tile([start.alpha_N, start.alpha_D, np.log(start.N_c), np.log(start.D_c)],
                 (len(weights), 1))

    def res(x: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        alpha_n, alpha_d, ln_nc, ln_dc = (col[:, None] for col in x.T)
        gap = ln_nc - ln_n
        u, v = alpha_n / alpha_d * gap, ln_dc - ln_d
        total = np.logaddexp(u, v)
        share = np.exp(u - total)  # as _joint_jacobian, for k problems
        jac = np.stack([share * gap, total - share * u, share * alpha_n,
                        alpha_d * (1.0 - share)], axis=2)
        return alpha_d * total - ln_l, jac

    fit = least_squares_batch(res, x0, weights, ftol=JOINT_BATCH_TOL, xtol=JOINT_BATCH_TOL,
                              gtol=JOINT_BATCH_TOL, max_iter=JOINT_BATCH_MAX_ITER,
                              lower=np.array(JOINT_LOWER))
    p0 = [tuple(x0[0])]
    for j, (k, (ln_nk, _, _)) in enumerate(row_data):
        try:
            if fit.success[j] and np.all(np.isfinite(fit.x[j])) and np.isfinite(fit.cost[j]):
                out[k] = _joint_at(fit.x[j], float(fit.cost[j]), int(ln_nk.size))
                continue
        except FitError:
            pass  # drifted out of range along a flat valley: the reference decides
        idx = indices[k]
        try:  # not finished here (a law that the resample does not identify): the reference
            out[k] = fit_kaplan_joint(n[idx], d[idx], loss[idx], starts=p0)
        except FitError as err:
            out[k] = str(err)
    return out


def fit_joint_law(n: object, d: object, loss: object, start: object = None) -> KaplanJoint:
    """The joint law as a law of the table (analysis.fits.laws): on the sweep's own N, so its
    allocation is read in the same convention as every other law's. ``start``: a previous
    fit, the only start of a bootstrap refit (least squares does not stop early there)."""
    starts = None
    if isinstance(start, KaplanJoint):
        starts = [(start.alpha_N, start.alpha_D, float(np.log(start.N_c)),
                   float(np.log(start.D_c)))]
    return fit_kaplan_joint(n, d, loss, starts=starts)


@dataclass(frozen=True)
class KaplanFit:
    """Every Kaplan law that could be fitted; ``skipped`` says why the others were not."""

    l_of_n: InversePowerLaw | None
    l_of_d: InversePowerLaw | None
    l_of_c: InversePowerLaw | None
    n_opt: PowerLaw | None
    """N_opt ∝ C^exponent along the envelope (Kaplan et al. 2020 find 0.73)."""
    joint: KaplanJoint | None
    conventions: str
    skipped: Mapping[str, str] = field(default_factory=dict)

    def statistics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.l_of_n is not None:
            out["alpha_N"] = self.l_of_n.alpha
        if self.l_of_d is not None:
            out["alpha_D"] = self.l_of_d.alpha
        if self.l_of_c is not None:
            out["alpha_C"] = self.l_of_c.alpha
        if self.n_opt is not None:
            out["n_opt_exponent"] = self.n_opt.exponent
        if self.joint is not None:
            out["joint_alpha_N"] = self.joint.alpha_N
            out["joint_alpha_D"] = self.joint.alpha_D
        return out


def fit_kaplan(n: object, d: object, loss: object, curves: Sequence[Curve | None] | None, *,
               conventions: str, grid_points: int = DEFAULT_GRID_POINTS,
               joint_starts: Sequence[Sequence[float]] | None = None,
               joint: KaplanJoint | str | None = None) -> KaplanFit:
    """Fit all Kaplan laws that the data allow. ``n``: Kaplan's N; ``curves`` on Kaplan's C.
    ``joint``: the joint law already fitted to these points (or why it could not be), as a
    batched bootstrap refit has it; None fits it here.

    FitError only when none of them can be fitted (the message lists every reason).
    """
    n_arr, d_arr, l_arr = (np.asarray(v, dtype=float).ravel() for v in (n, d, loss))
    parts: dict[str, object] = {}
    skipped: dict[str, str] = {}

    def attempt(name: str, fn: Callable[[], object]) -> None:
        try:
            parts[name] = fn()
        except FitError as err:
            skipped[name] = str(err)

    attempt("L(N)", lambda: fit_inverse_power_law(
        *lower_frontier(n_arr, l_arr), what="Kaplan L(N) (lower frontier of final losses)"))
    attempt("L(D)", lambda: fit_inverse_power_law(
        *lower_frontier(d_arr, l_arr), what="Kaplan L(D) (lower frontier of final losses)"))
    if curves is None or all(c is None for c in curves):
        skipped["L(C)"] = skipped["N_opt(C)"] = "no training curves"
    else:
        what = "Kaplan L(C_min) (envelope of training curves)"
        try:
            env = interior_points(envelope(curves, grid_points=grid_points, what=what), what=what)
        except FitError as err:
            skipped["L(C)"] = skipped["N_opt(C)"] = str(err)
        else:
            attempt("L(C)", lambda: fit_inverse_power_law(env.flops, env.loss, what=what))
            attempt("N_opt(C)", lambda: fit_power_law(env.flops, env.n,
                                                      what="Kaplan N_opt(C) (envelope)"))
    if isinstance(joint, str):
        skipped["L(N,D)"] = joint
    elif joint is not None:
        parts["L(N,D)"] = joint
    else:
        attempt("L(N,D)", lambda: fit_kaplan_joint(n_arr, d_arr, l_arr, starts=joint_starts))
    if not parts:
        raise FitError("Kaplan laws: none could be fitted: " +
                       "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    return KaplanFit(
        l_of_n=parts.get("L(N)"), l_of_d=parts.get("L(D)"), l_of_c=parts.get("L(C)"),
        n_opt=parts.get("N_opt(C)"), joint=parts.get("L(N,D)"), conventions=conventions,
        skipped=skipped,
    )


@dataclass(frozen=True)
class _Refit:
    n: np.ndarray
    d: np.ndarray
    loss: np.ndarray
    curves: tuple[Curve | None, ...] | None
    joint_start: tuple[float, ...] | None
    grid_points: int

    def __call__(self, idx: np.ndarray, joint: KaplanJoint | str | None = None
                 ) -> dict[str, float]:
        curves = None if self.curves is None else [self.curves[i] for i in np.unique(idx)]
        starts = None if self.joint_start is None else [self.joint_start]
        fit = fit_kaplan(self.n[idx], self.d[idx], self.loss[idx], curves, conventions="",
                         grid_points=self.grid_points, joint_starts=starts, joint=joint)
        return fit.statistics()

    def batch(self, indices: np.ndarray) -> list[dict[str, float] | str]:
        """Every resample at once: the joint law by refit_joint_batch, the others one by one
        (closed-form lines and the envelope: no iterations to batch)."""
        joints: list[KaplanJoint | str | None] = [None] * len(indices)
        if self.joint_start is not None:
            alpha_n, alpha_d, ln_nc, ln_dc = self.joint_start
            start = KaplanJoint(alpha_n, alpha_d, float(np.exp(ln_nc)), float(np.exp(ln_dc)),
                                0, 0.0)
            joints = list(refit_joint_batch(self.n, self.d, self.loss, start, indices))
        out: list[dict[str, float] | str] = []
        for idx, joint in zip(indices, joints, strict=True):
            try:
                out.append(self(idx, joint))
            except FitError as err:
                out.append(str(err))
        return out


def bootstrap_kaplan(n: object, d: object, loss: object, curves: Sequence[Curve | None] | None,
                     fit: KaplanFit, *, n_resamples: int, seed: int,
                     grid_points: int = DEFAULT_GRID_POINTS,
                     strata: np.ndarray | None = None) -> Bootstrap:
    """Resample runs; refit every Kaplan law (the joint law starts from the full-data fit:
    least squares, unlike L-BFGS-B's relative-reduction test, does not stop early there)."""
    j = fit.joint
    start = None if j is None else (j.alpha_N, j.alpha_D, float(np.log(j.N_c)),
                                    float(np.log(j.D_c)))
    refit = _Refit(*(np.asarray(v, dtype=float) for v in (n, d, loss)),
                   None if curves is None else tuple(curves), start, grid_points)
    return run_bootstrap(len(refit.n), refit, n_resamples=n_resamples, seed=seed, strata=strata)
