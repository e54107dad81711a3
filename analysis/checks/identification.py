"""Which parameters of a fitted law the runs do not identify: at a bound, or a flat profile.

Why (issue 51): a law can fit the runs while some parameters are not pinned by them. On
chinchilla_1gpu Approach 3 puts E ≈ 4e-13 (its bound 0) with α ≈ 0.13, and refitted without
its top budget E jumps to 0.98: such a value is the optimiser's, not the runs'. For Approach 3,
the interaction law and Kaplan's joint law each such parameter is a ``ParameterFlag``, listed
in fit.json (``identification``) and shown beside the law in the report.

* ``at_bound``: at a bound of its fit (the fit modules' ``BOUNDS`` / ``JOINT_BOUNDS``). A
  coefficient whose bound is 0 (E, A, B, N_c, D_c: fitted as logs, so they reach 0 only as
  ln → −∞) is at it when its term is below ``TERM_SHARE`` = 1% of the fitted loss (E, the
  additive law's A and B) or of the reducible part (the interaction law's A and B, the joint
  law's two terms) at every run. An exponent is at its lower bound within
  ``EXPONENT_TOLERANCE`` = 0.01 (such an exponent moves its term by < 5% over a 100x range);
  any other bound (γ's [0.05, 10]) within ``RELATIVE_TOLERANCE`` = 1% of it.

* ``flat_profile``: the parameter is moved from its estimate to the far end of a wide range (an
  exponent a factor of ``EXPONENT_FACTOR`` = 2 down and up; E down to half of it and up to
  halfway to the lowest observed loss) in ``PROFILE_STEPS`` = 3 steps, every other parameter
  refitted at each step from the previous one (a continuation). Flat on a side when at every
  step the deviance D = 2·Δf·κ stays below ``DEVIANCE_LIMIT`` = 3.84 (χ²₁ at 95%; Δ(−ln
  likelihood) = 1.92): the whole range lies inside the 95% profile-likelihood interval. κ puts
  the objective f on the scale of a log likelihood: for least squares (the joint law,
  f = ½Σr²) κ = (n − p)/Σr², the classical (n − p)·Δf/f̂; for the Huber objective (δ = 1e-3
  on ln L; most residuals of a real study lie beyond δ) κ = mean ψ' / (Σψ²/(n − p)), ψ the
  Huber derivative: the robust drop-in-dispersion test (Schrader & Hettmansperger 1980;
  Ronchetti 1982), a Gaussian deviance when every residual is within δ, a Laplace one when all
  lie beyond. mean ψ' (the share of residuals within δ) is read off a normal with the
  residuals' robust spread (1.4826 × median |r|), not counted: a Huber fit with δ far below
  the noise interpolates ~p of the n runs, so the count (5 of 20 on the committed studies,
  against 8-13% from the spread) measures p, not the noise. Each profile point is a local
  refit, at or above the true profile: a flat flag is never a solver artefact (a flat profile
  can be missed). E is refitted as E, not ln E: at its bound ln E has no gradient and a refit
  never revives it (chinchilla_1gpu, α up 26%: deviance 11.8 from the estimate in ln E, 1.2
  from a fresh grid start, 1.2 in E). Scale coefficients (A, B, N_c, D_c) are only checked at
  their bound: they are the terms at N = 1 or D = 1, far outside the runs, so with the exponent
  refitted they move 10x for an exponent change of ~0.15 and their profile restates the
  exponent's (a factor of 10 was "flat" on three of the four committed studies).

A side that would cross a bound is cut at it, and left out when the estimate is at that bound.
Cost on the committed 20-run studies (CPU, this shared machine): 0.15-0.3 s for Approach 3,
0.3-0.6 s for the interaction law, < 0.1 s for the joint law (a side stops at its first step
over the limit). Paid once per table entry, when its flags are first asked for (``Pending``),
never by a bootstrap, rolling-origin backtest or convention refit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares, minimize
from scipy.special import erf

from analysis.fits import approach3, interaction, kaplan
from analysis.fits.approach3 import LBFGS_OPTIONS, Approach3Fit
from analysis.fits.interaction import InteractionLaw
from analysis.fits.kaplan import KaplanJoint, _joint_jacobian, _joint_log_loss
from analysis.numerics.threads import single_threaded_blas
from analysis.text import fmt

DEVIANCE_LIMIT = 3.841458820694124
"""χ²₁'s 95% quantile: the profile deviance below which a value fits as well as the estimate."""
TERM_SHARE = 0.01
"""A coefficient is at its bound 0 when its term is below this share at every fitted run."""
EXPONENT_TOLERANCE = 0.01
"""An exponent within this (absolute) of its lower bound is at it."""
RELATIVE_TOLERANCE = 0.01
"""Any other bound: within this share of the bound's value."""
EXPONENT_FACTOR = 2.0
"""The wide range of an exponent's profile: from half to twice its estimate."""
E_FRACTION = 0.5
"""E's profile: down to half its estimate, up to halfway to the lowest observed loss."""
PROFILE_STEPS = 3
"""Profile points per side: the continuation's steps from the estimate to the far end."""
FLOOR_MIN = 1e-12
"""A profile refit's lower bound of E, as a share of the lowest observed loss (E = 0 in
effect; ln E stays finite)."""
ROBUST_SCALE = 1.4826
"""median |r| × this estimates a normal's standard deviation."""


@dataclass(frozen=True)
class ParameterFlag:
    """A parameter the runs do not identify, and why."""

    parameter: str
    kind: str
    """"at_bound" or "flat_profile"."""
    value: float
    """Its estimate."""
    bound: float | None
    """at_bound: the bound it sits at; flat_profile: None."""
    words: str
    """What the report says, e.g. "E not identified: at its bound 0 (...)"."""
    moved_to: tuple[float, ...] = ()
    """flat_profile: the far end(s) of the range, below and/or above the estimate, that fit
    as well as it, all along the way."""
    deviance: float | None = None
    """flat_profile: the largest profile deviance on the way there (below DEVIANCE_LIMIT)."""

    def to_json(self) -> dict[str, Any]:
        return {"parameter": self.parameter, "kind": self.kind, "value": self.value,
                "bound": self.bound, "words": self.words, "moved_to": list(self.moved_to),
                "deviance": self.deviance}


# --------------------------------------------------------------------------- the parameters


@dataclass(frozen=True)
class _Param:
    """One parameter of a law, as its optimiser sees it."""

    name: str
    index: int
    """Its position in the optimiser's vector."""
    log: bool
    """The optimiser works with ln(value) (a coefficient whose bound is 0)."""
    lower: float
    upper: float
    """Its bounds, in the parameter's own units (the fit module's)."""
    kind: str
    """"exponent", "floor" (E, the irreducible loss) or "scale" (A, B, N_c, D_c: checked at
    their bound, not profiled; module docstring)."""

    def coord(self, value: float) -> float:
        return math.log(value) if self.log else value

    def value(self, coord: float) -> float:
        return math.exp(coord) if self.log else coord


@dataclass(frozen=True)
class _Problem:
    """A fitted law as the profile sees it: its optimum, objective, refit and noise scale."""

    params: tuple[_Param, ...]
    x_hat: np.ndarray
    f_hat: float
    refit: Callable[[np.ndarray, int, float], tuple[float, np.ndarray]]
    """refit(x0, i, c): the objective's minimum with coordinate i held at c, from x0."""
    kappa: float
    """Objective -> half a deviance (module docstring); inf when the runs fit exactly."""
    n_free: int
    """Residual degrees of freedom n − p; no profile is judged without any."""
    min_loss: float


def _profile_end(problem: _Problem, p: _Param, side: int) -> float | None:
    """The far end of ``p``'s wide range on ``side`` (−1 down, +1 up), cut at its bounds;
    None when the estimate is already at that end."""
    est = p.value(problem.x_hat[p.index])
    if p.kind == "floor":  # E: half of it, or halfway to the lowest observed loss
        if side < 0 and est < TERM_SHARE * problem.min_loss:
            return None  # at its bound 0 already
        end = est * E_FRACTION if side < 0 else est + E_FRACTION * (problem.min_loss - est)
    else:
        end = est * EXPONENT_FACTOR ** side
    end = min(max(end, p.lower), p.upper)
    if (p.log and end <= 0) or not math.isfinite(end) or (
            abs(end - est) <= RELATIVE_TOLERANCE * abs(est)):
        return None
    return end


def _step(problem: _Problem, p: _Param, end: float, t: float) -> float:
    """The coordinate a share t of the way to ``end``: E in equal steps of its value (from
    its bound 0, equal steps of ln E would stay at 0 until the last), the others in equal
    steps of the optimiser's coordinate."""
    c0 = problem.x_hat[p.index]
    if p.kind == "floor":
        est = p.value(c0)
        return p.coord(est + (end - est) * t)
    return c0 + (p.coord(end) - c0) * t


def _deviance(problem: _Problem, f: float) -> float:
    delta_f = max(f - problem.f_hat, 0.0)
    if math.isinf(problem.kappa):
        return 0.0 if delta_f <= 1e-15 * max(problem.f_hat, 1e-300) else math.inf
    return 2.0 * delta_f * problem.kappa


def _flat(problem: _Problem, p: _Param) -> ParameterFlag | None:
    """The flat_profile flag of ``p``: the sides along which every profile point, to the far
    end of the range, fits as well as the estimate (None when neither does)."""
    if problem.n_free <= 0 or p.kind == "scale":
        return None
    est = p.value(problem.x_hat[p.index])
    ends: list[float] = []
    worst_flat = 0.0
    for side in (-1, 1):
        end = _profile_end(problem, p, side)
        if end is None:
            continue
        x, worst = problem.x_hat.copy(), 0.0
        for step in range(1, PROFILE_STEPS + 1):
            f, x = problem.refit(x, p.index, _step(problem, p, end, step / PROFILE_STEPS))
            worst = max(worst, _deviance(problem, f))
            if worst >= DEVIANCE_LIMIT:
                break
        if worst < DEVIANCE_LIMIT:
            ends.append(end)
            worst_flat = max(worst_flat, worst)
    if not ends:
        return None
    where = " and ".join(f"{'down' if end < est else 'up'} to {fmt(end)}" for end in ends)
    what = ("half of it, or halfway to the lowest observed loss "
            f"{fmt(problem.min_loss)}" if p.kind == "floor" else
            f"a factor of {EXPONENT_FACTOR:g}")
    return ParameterFlag(
        p.name, "flat_profile", est, None,
        f"{p.name} not identified: flat profile (moved from {fmt(est)} {where} ({what}), "
        f"the others refitted, the fit worsens by a deviance of at most {worst_flat:.2g}, "
        f"under the 95% limit {DEVIANCE_LIMIT:.2f})", moved_to=tuple(ends), deviance=worst_flat)


def _at_bound(p: _Param, value: float,
              share: tuple[np.ndarray, str] | None) -> ParameterFlag | None:
    """The at_bound flag of ``p`` (``share``: for a coefficient whose bound is 0, its term's
    share at every run and of what)."""
    if share is not None:
        if float(np.max(share[0])) < TERM_SHARE:
            return ParameterFlag(
                p.name, "at_bound", value, 0.0,
                f"{p.name} not identified: at its bound 0 ({p.name} = {fmt(value)}: its term "
                f"is under {TERM_SHARE:.0%} of {share[1]} at every run)")
        return None
    for bound in (p.lower, p.upper):
        if not math.isfinite(bound):
            continue
        tol = (EXPONENT_TOLERANCE if p.kind == "exponent" and bound == p.lower
               else RELATIVE_TOLERANCE * abs(bound))
        if abs(value - bound) <= tol:
            return ParameterFlag(
                p.name, "at_bound", value, bound,
                f"{p.name} not identified: at its bound {fmt(bound)} ({p.name} = {fmt(value)})")
    return None


def _check(problem: _Problem,
           shares: dict[str, tuple[np.ndarray, str]]) -> tuple[ParameterFlag, ...]:
    flags: list[ParameterFlag] = []
    with single_threaded_blas():
        for p in problem.params:
            value = p.value(problem.x_hat[p.index])
            bound = _at_bound(p, value, shares.get(p.name))
            if bound is not None:
                flags.append(bound)
            flat = _flat(problem, p)
            if flat is not None:
                flags.append(flat)
    return tuple(flags)


# --------------------------------------------------------------------------- objectives


def _huber_kappa(r: np.ndarray, delta: float, n_params: int) -> float:
    """Half-deviance per unit of a summed Huber objective (module docstring)."""
    n = r.size
    psi2 = float(np.sum(np.clip(r, -delta, delta) ** 2)) / max(n - n_params, 1)
    if psi2 == 0.0:
        return math.inf
    spread = ROBUST_SCALE * float(np.median(np.abs(r)))
    inside = 1.0 if spread == 0.0 else float(erf(delta / (spread * math.sqrt(2.0))))
    return inside / psi2


huber_kappa = _huber_kappa  # public: analysis.fits.data_constrained's profiles use it


def _lbfgs_refit(objective: Callable[..., tuple[float, np.ndarray]], args: tuple,
                 bounds: Sequence[tuple[float | None, float | None]], floor: int,
                 floor_min: float):
    """refit(x0, i, c) for an objective(θ, *args) -> (f, gradient) minimised by L-BFGS-B
    with the fit's own tolerances.

    Coordinate ``floor`` is ln E in θ; when free it is refitted as E itself, bounded below by
    ``floor_min`` (the chain rule: ∂f/∂E = (∂f/∂ln E)/E). In ln E an E at its bound 0 has no
    gradient (ln E = −29: ∂f/∂ln E ∝ E), so a refit started there never revives it and the
    profile comes out too steep (measured: on chinchilla_1gpu α up 26% gave a deviance of
    11.8 from the estimate, 1.2 from a fresh grid start); in E it has one."""
    def refit(x0: np.ndarray, i: int, c: float) -> tuple[float, np.ndarray]:
        free = np.array([j for j in range(len(x0)) if j != i])
        x = np.asarray(x0, dtype=float).copy()
        x[i] = c
        k = -1 if i == floor else int(np.flatnonzero(free == floor)[0])

        def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
            x[free] = z
            if k >= 0:
                x[floor] = math.log(z[k])
            f, g = objective(x, *args)
            g = g[free]
            if k >= 0:
                g[k] /= z[k]
            return f, g

        free_bounds = [bounds[j] for j in free]
        z0 = x[free].copy()
        if k >= 0:
            free_bounds[k] = (floor_min, None)
            z0[k] = max(math.exp(z0[k]), floor_min)
        z0 = np.clip(z0, [-np.inf if lo is None else lo for lo, _ in free_bounds],
                     [np.inf if hi is None else hi for _, hi in free_bounds])
        res = minimize(fun, z0, jac=True, method="L-BFGS-B", bounds=free_bounds,
                       options=LBFGS_OPTIONS)
        ok = np.isfinite(res.fun) and np.all(np.isfinite(res.x))
        fun(res.x)  # x holds the end point in θ
        return (float(res.fun) if ok else math.inf), x.copy()
    return refit


def _logs(n: object, d: object, loss: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(np.log(np.asarray(v, dtype=float).ravel()) for v in (n, d, loss))


# --------------------------------------------------------------------------- the laws


def _huber_params(bounds: dict[str, tuple[float, float]]) -> tuple[_Param, ...]:
    """The parameters of θ = (ln A, ln B, ln E, α, β[, γ]) that ``bounds`` names."""
    where = (("E", 2, "floor"), ("A", 0, "scale"), ("B", 1, "scale"), ("alpha", 3, "exponent"),
             ("beta", 4, "exponent"), ("gamma", 5, "exponent"))
    return tuple(_Param(name, i, kind != "exponent", *bounds[name], kind)
                 for name, i, kind in where if name in bounds)


def identify_approach3(fit: Approach3Fit, n: object, d: object,
                       loss: object) -> tuple[ParameterFlag, ...]:
    """The parameters of Approach 3's fit that the runs (N, D, loss) do not identify."""
    ln_n, ln_d, ln_l = _logs(n, d, loss)
    x_hat = np.asarray(fit.theta, dtype=float)  # (ln A, ln B, ln E, α, β)
    bounds = approach3.BOUNDS
    params = _huber_params(bounds)
    args = (ln_n, ln_d, ln_l, fit.delta)
    pred = fit.log_loss(ln_n, ln_d)
    a, b, e, alpha, beta = x_hat
    shares = {"E": (np.exp(e - pred), "the fitted loss"),
              "A": (np.exp(a - alpha * ln_n - pred), "the fitted loss"),
              "B": (np.exp(b - beta * ln_d - pred), "the fitted loss")}
    problem = _Problem(
        params, x_hat, approach3.huber_objective(x_hat, *args)[0],
        _lbfgs_refit(approach3.huber_objective, args, [(None, None)] * 3 + [(0.0, None)] * 2,
                     2, FLOOR_MIN * float(np.exp(ln_l.min()))),
        _huber_kappa(pred - ln_l, fit.delta, 5), ln_n.size - 5, float(np.exp(ln_l.min())))
    return _check(problem, shares)


def identify_interaction(law: InteractionLaw, n: object, d: object, loss: object, *,
                         delta: float = approach3.HUBER_DELTA) -> tuple[ParameterFlag, ...]:
    """The parameters of the interaction law's fit that the runs do not identify."""
    ln_n, ln_d, ln_l = _logs(n, d, loss)
    x_hat = np.asarray(law.theta, dtype=float)  # (ln A, ln B, ln E, α, β, γ)
    bounds = interaction.BOUNDS
    params = _huber_params(bounds)
    args = (ln_n, ln_d, ln_l, delta)
    pred = law.log_loss(ln_n, ln_d)
    a, b, e, alpha, beta, _ = x_hat
    _, w_n = interaction.lse(a - alpha * ln_n, b - beta * ln_d)  # the N term's share
    shares = {"E": (np.exp(e - pred), "the fitted loss"),
              "A": (w_n, "A/N^alpha + B/D^beta"), "B": (1.0 - w_n, "A/N^alpha + B/D^beta")}
    problem = _Problem(
        params, x_hat, interaction.huber_objective(x_hat, *args)[0],
        _lbfgs_refit(interaction.huber_objective, args,
                     [(None, None)] * 3 + [(0.0, None)] * 2 + [bounds["gamma"]], 2,
                     FLOOR_MIN * float(np.exp(ln_l.min()))),
        _huber_kappa(pred - ln_l, delta, interaction.N_PARAMS),
        ln_n.size - interaction.N_PARAMS, float(np.exp(ln_l.min())))
    return _check(problem, shares)


def identify_kaplan_joint(law: KaplanJoint, n: object, d: object,
                          loss: object) -> tuple[ParameterFlag, ...]:
    """The parameters of Kaplan's joint law's fit that the runs do not identify."""
    ln_n, ln_d, ln_l = _logs(n, d, loss)
    x_hat = np.array([law.alpha_N, law.alpha_D, math.log(law.N_c), math.log(law.D_c)])
    bounds = kaplan.JOINT_BOUNDS
    params = (
        _Param("alpha_N", 0, False, *bounds["alpha_N"], "exponent"),
        _Param("alpha_D", 1, False, *bounds["alpha_D"], "exponent"),
        _Param("N_c", 2, True, *bounds["N_c"], "scale"),
        _Param("D_c", 3, True, *bounds["D_c"], "scale"),
    )
    lower = np.array(kaplan.JOINT_LOWER, dtype=float)

    def residuals(x: np.ndarray) -> np.ndarray:
        return _joint_log_loss(x, ln_n, ln_d) - ln_l

    def refit(x0: np.ndarray, i: int, c: float) -> tuple[float, np.ndarray]:
        free = np.array([j for j in range(4) if j != i])
        x = np.asarray(x0, dtype=float).copy()
        x[i] = c

        def fun(z: np.ndarray) -> np.ndarray:
            x[free] = z
            return residuals(x)

        def jac(z: np.ndarray) -> np.ndarray:
            x[free] = z
            return _joint_jacobian(x, ln_n, ln_d)[:, free]

        res = least_squares(fun, np.maximum(x[free], lower[free]), jac=jac,
                            bounds=(lower[free], np.inf))
        out = x.copy()
        out[free] = res.x
        return (float(res.cost) if np.isfinite(res.cost) else math.inf), out

    r = residuals(x_hat)
    ssr = float(np.sum(r * r))
    k = KaplanJoint.n_params
    u = law.alpha_N / law.alpha_D * (x_hat[2] - ln_n)
    w_n = np.exp(u - np.logaddexp(u, x_hat[3] - ln_d))  # the N term's share
    problem = _Problem(params, x_hat, 0.5 * ssr, refit,
                       math.inf if ssr == 0.0 else max(ln_n.size - k, 1) / ssr,
                       ln_n.size - k, float(np.exp(ln_l.min())))
    bracket = "(N_c/N)^(alpha_N/alpha_D) + D_c/D"
    return _check(problem, {"N_c": (w_n, bracket), "D_c": (1.0 - w_n, bracket)})


# --------------------------------------------------------------------------- carried flags


class Pending:
    """The flags of a table's full-data fit, computed the first time they are asked for
    (``flags_of``: fit.json's ``identification``, the report) and kept.

    Not at fit time: the table's run functions also serve refits that never show their flags
    (the rolling-origin backtest refits every law on the lower budgets), and a law's check
    costs a few tenths of a second (module docstring)."""

    def __init__(self, identify: Callable[..., tuple[ParameterFlag, ...]], n: object,
                 d: object, loss: object) -> None:
        self.identify = identify
        self.points = tuple(np.array(v, dtype=float) for v in (n, d, loss))
        self.flags: tuple[ParameterFlag, ...] | None = None

    def get(self, law: object) -> tuple[ParameterFlag, ...]:
        if self.flags is None:
            self.flags = tuple(self.identify(law, *self.points))
        return self.flags


@dataclass(frozen=True)
class IdentifiedKaplanJoint(KaplanJoint):
    """Kaplan's joint law carrying the flags of its full-data fit (``identification``): the
    law of the table's ``kaplan_joint`` entry (analysis.fits.kaplan only exposes bounds)."""

    identification: object = field(default=(), repr=False, compare=False)


def fit_identified_joint(n: object, d: object, loss: object,
                         start: object = None) -> KaplanJoint:
    """kaplan.fit_joint_law; the full-data fit (no ``start``) carries its flags."""
    law = kaplan.fit_joint_law(n, d, loss, start)
    if start is not None:
        return law
    fields = {k: getattr(law, k) for k in ("alpha_N", "alpha_D", "N_c", "D_c", "n_points",
                                           "rmse_log")}
    return IdentifiedKaplanJoint(**fields,
                                 identification=Pending(identify_kaplan_joint, n, d, loss))


def fit_identified_interaction(n: object, d: object, loss: object,
                               start: object = None) -> InteractionLaw:
    """interaction.fit_interaction; the full-data fit (no ``start``) carries its flags."""
    law = interaction.fit_interaction(n, d, loss, start)
    if start is not None:
        return law
    return replace(law, identification=Pending(identify_interaction, n, d, loss))


def with_approach3_flags(fit: Approach3Fit, n: object, d: object, loss: object) -> Approach3Fit:
    """Approach 3's full-data fit carrying its flags (``Approach3Fit.identification``)."""
    return replace(fit, identification=Pending(identify_approach3, n, d, loss))


def flags_of(fit: object) -> tuple[ParameterFlag, ...]:
    """The flags a fit of the table carries (a law's LawFit, or the fit itself), computed
    now if they were not yet; () for a fit without any."""
    law = getattr(fit, "law", fit)
    flags = getattr(law, "identification", ())
    return flags.get(law) if isinstance(flags, Pending) else tuple(flags or ())


def checked(fit: object) -> bool:
    """Whether the fit carries flags (none, or some): the table's full-data fits."""
    return isinstance(getattr(getattr(fit, "law", fit), "identification", None), Pending)


def flags_json(fit: object) -> list[dict[str, Any]]:
    """fit.json's ``identification`` of a fit: one object per flag."""
    return [flag.to_json() for flag in flags_of(fit)]
