"""Parameters that the runs do not identify (analysis.checks.identification; issue 51): at a
bound of their fit, or with a flat profile; flagged in fit.json and beside the law in the
report."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from analysis.checks import identification as ident
from analysis.checks.identification import (
    DEVIANCE_LIMIT,
    Pending,
    _huber_kappa,
    flags_of,
    identify_approach3,
    identify_interaction,
    identify_kaplan_joint,
)
from analysis.fits import interaction
from analysis.fits.approach3 import fit_approach3
from analysis.fits.interaction import InteractionLaw
from analysis.fits.kaplan import fit_joint_law
from analysis.fits.spec import FitInput
from analysis.fits.table import FITS
from analysis.reporting.document import Bullets, Paragraph
from analysis.reporting.laws import identification_blocks, short_flags
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs
from analysis.schema import clean, estimate_to_json

BUDGETS = np.logspace(18, 21, 4)


def _arrays(runs):
    return tuple(runs.column(k) for k in ("N", "D", "loss"))


def _kinds(flags) -> set[tuple[str, str]]:
    return {(f.parameter, f.kind) for f in flags}


@pytest.fixture(scope="module")
def no_floor():
    """IsoFLOP runs of an additive law with E = 0 (Chinchilla's other constants), 0.5% noise,
    and the table's three parametric entries fitted on them (no bootstrap)."""
    runs = isoflop_runs(ChinchillaLaw(E=0.0), BUDGETS, sizes_per_budget=7, noise=0.005, seed=1)
    inp = FitInput(runs, None, float(BUDGETS.max()), 0, 0)
    return runs, {name: FITS[name].run(inp) for name in ("3", "interaction", "kaplan_joint")}


def test_a_well_identified_law_has_no_flag():
    runs = isoflop_runs(ChinchillaLaw(), BUDGETS, sizes_per_budget=7, noise=0.005, seed=1)
    fit = fit_approach3(*_arrays(runs))
    assert 1.5 < fit.E < 1.9  # the true E = 1.69 > 0, recovered
    assert identify_approach3(fit, *_arrays(runs)) == ()


def test_a_fit_of_runs_without_an_irreducible_loss_puts_E_at_its_bound(no_floor):
    _, fits = no_floor
    for name in ("3", "interaction"):
        est = fits[name]
        (flag,) = [f for f in flags_of(est.fit) if f.parameter == "E"]
        assert flag.kind == "at_bound" and flag.bound == 0.0 and flag.value < 1e-3
        assert flag.words.startswith("E not identified: at its bound 0")


def test_a_parameter_the_runs_cannot_pin_has_a_flat_profile():
    """Model sizes within a factor of 1.6 of each other: nothing pins how loss falls with N,
    so alpha can be halved or doubled (E and A refitted) at no cost in fit; D spans 100x, so
    beta stays identified."""
    rng = np.random.default_rng(0)
    n, d = (a.ravel() for a in np.meshgrid(np.logspace(8, 8.2, 4), np.logspace(9, 11, 5)))
    loss = ChinchillaLaw().loss(n, d) * np.exp(0.005 * rng.standard_normal(n.size))
    flags = identify_approach3(fit_approach3(n, d, loss), n, d, loss)
    (alpha,) = [f for f in flags if f.parameter == "alpha"]
    assert alpha.kind == "flat_profile" and 0 <= alpha.deviance < DEVIANCE_LIMIT
    assert alpha.moved_to and all(abs(math.log(end / alpha.value)) == pytest.approx(math.log(2))
                                  for end in alpha.moved_to)
    assert alpha.words.startswith("alpha not identified: flat profile")
    assert "beta" not in {f.parameter for f in flags}


def test_the_kaplan_joint_law_of_runs_whose_loss_ignores_N_has_a_flat_alpha_N():
    rng = np.random.default_rng(0)
    n, d = (a.ravel() for a in np.meshgrid(np.logspace(7, 10, 6), np.logspace(9, 12, 5)))
    loss = (5.4e13 / d) ** 0.095 * np.exp(0.003 * rng.standard_normal(n.size))
    flags = identify_kaplan_joint(fit_joint_law(n, d, loss), n, d, loss)
    assert ("alpha_N", "flat_profile") in _kinds(flags)
    assert "alpha_D" not in {f.parameter for f in flags}


def test_gamma_at_the_bound_of_its_fit_is_flagged():
    runs = isoflop_runs(ChinchillaLaw(), BUDGETS[:3], sizes_per_budget=5, noise=0.005, seed=0)
    theta = (6.0, 6.0, math.log(1.69), 0.34, 0.28, interaction.GAMMA_MAX)
    law = InteractionLaw(theta=theta, objective=0.0, converged=True, n_points=len(runs))
    flags = identify_interaction(law, *_arrays(runs))
    (gamma,) = [f for f in flags if f.parameter == "gamma" and f.kind == "at_bound"]
    assert gamma.bound == interaction.GAMMA_MAX == interaction.BOUNDS["gamma"][1]
    assert gamma.words.startswith("gamma not identified: at its bound 10")


def test_the_deviance_is_the_gaussian_likelihood_ratio_when_every_residual_is_small():
    """All residuals well inside Huber's δ: the objective is ½Σr², and 2Δf·κ must be the
    classical (n − p)·ΔSSR/SSR."""
    r = np.random.default_rng(0).normal(0.0, 1e-5, 30)
    kappa = _huber_kappa(r, 1e-3, 5)
    assert kappa == pytest.approx((30 - 5) / np.sum(r * r), rel=1e-9)


def test_the_flags_reach_fit_json(no_floor):
    _, fits = no_floor
    out = {name: json.loads(json.dumps(clean(estimate_to_json(name, est)))) for name, est in fits.items()}
    for name in ("3", "interaction", "kaplan_joint"):
        assert isinstance(out[name]["identification"], list)
    (e_flag,) = [f for f in out["3"]["identification"] if f["parameter"] == "E"]
    assert e_flag["kind"] == "at_bound" and e_flag["bound"] == 0.0
    assert e_flag["words"].startswith("E not identified: at its bound 0")
    assert set(e_flag) >= {"parameter", "kind", "value", "bound", "words"}
    assert any(f["parameter"] == "E" for f in out["interaction"]["identification"])


def test_the_report_shows_the_words_beside_the_laws(no_floor):
    _, fits = no_floor
    blocks = identification_blocks(SimpleNamespace(fits=fits))
    (bullets,) = [b for b in blocks if isinstance(b, Bullets)]
    assert any(item.startswith("3: E not identified: at its bound 0") for item in bullets.items)
    assert any(item.startswith("interaction: E not identified") for item in bullets.items)
    assert "E (at its bound 0)" in short_flags(flags_of(fits["3"].fit))
    runs = isoflop_runs(ChinchillaLaw(), BUDGETS, sizes_per_budget=7, noise=0.005, seed=1)
    clean = {"3": FITS["3"].run(FitInput(runs, None, float(BUDGETS.max()), 0, 0))}
    (para,) = identification_blocks(SimpleNamespace(fits=clean))
    assert isinstance(para, Paragraph) and "every parameter is identified" in para.text


def test_the_check_runs_once_and_only_when_the_flags_are_asked_for(monkeypatch):
    """The table's run functions also serve the backtest's refits, which never show flags:
    the check waits until fit.json or the report asks, then keeps its answer."""
    calls = []
    real = ident.identify_approach3
    monkeypatch.setattr(ident, "identify_approach3",
                        lambda *args: calls.append(1) or real(*args))
    runs = isoflop_runs(ChinchillaLaw(), BUDGETS, sizes_per_budget=5, noise=0.005, seed=2)
    est = FITS["3"].run(FitInput(runs, None, float(BUDGETS.max()), 0, 0))
    assert calls == [] and isinstance(est.fit.identification, Pending)
    first = flags_of(est.fit)
    assert flags_of(est.fit) is first and calls == [1]
