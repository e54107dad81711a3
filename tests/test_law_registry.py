"""A law is one object: its ``FitSpec`` in the table of fits (analysis.fits.table.FITS) says
which lists it is on, and every consumer reads its list off the table, in table order: the
verdict's judged laws and headline candidates, the agreement pairs, the report's table of
allocations, the --approach choices of `python -m analysis.fit` and `python -m
analysis.predict`, and fit.json (docs/analysis.md "Adding a fit").

A toy law registered here, with nothing else changed, is judged, compared, offered and written
like the built-in ones; and the built-in lists are the ones that were spelled out by hand
before the table carried the roles."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from scipy.optimize import least_squares

from analysis import fit as fit_command
from analysis import predict as predict_command
from analysis.analyze import analyze
from analysis.checks.verdict import LAWS, choose_headline, headline_rule
from analysis.errors import FitError
from analysis.fits import table
from analysis.fits.laws import Law, run_law
from analysis.fits.spec import FitInput, FitSpec
from analysis.reporting.document import Table
from analysis.reporting.laws import laws_section
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs
from analysis.schema import analysis_to_json


# --- the toy "module": L = E + A/N^α + B/D^α (one exponent for both), fitted with SciPy --------
@dataclass(frozen=True)
class SharedExponentLaw:
    """A ``Law`` of analysis.fits.laws: ln L̂ = ln(E + A/N^α + B/D^α)."""

    E: float
    A: float
    B: float
    alpha: float
    n_points: int
    n_params: int = 4

    def log_loss(self, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
        return np.logaddexp.reduce([np.full_like(np.asarray(ln_n, dtype=float), np.log(self.E)),
                                    np.log(self.A) - self.alpha * np.asarray(ln_n),
                                    np.log(self.B) - self.alpha * np.asarray(ln_d)], axis=0)

    def parameters(self) -> dict[str, float]:
        return {"E": self.E, "alpha": self.alpha}


def fit_shared(n: np.ndarray, d: np.ndarray, loss: np.ndarray,
               start: Law | None = None) -> SharedExponentLaw:
    ln_n, ln_d, ln_l = np.log(n), np.log(d), np.log(loss)
    x0 = ([np.log(start.E), np.log(start.A), np.log(start.B), start.alpha]
          if isinstance(start, SharedExponentLaw) else [0.5, 6.0, 6.0, 0.3])

    def residuals(p: np.ndarray) -> np.ndarray:
        law = SharedExponentLaw(*np.exp(p[:3]), p[3], len(n))
        return law.log_loss(ln_n, ln_d) - ln_l

    res = least_squares(residuals, x0, bounds=([-5, 0, 0, 0.05], [3, 20, 20, 1.0]))
    if not res.success:
        raise FitError(f"shared-exponent law: {res.message}")
    return SharedExponentLaw(*np.exp(res.x[:3]), float(res.x[3]), len(n))


def run_shared(inp: FitInput):
    return run_law(inp, fit_shared)


# --- the one table entry: its roles are its flags ---------------------------------------------
TOY = FitSpec("shared", "Shared-exponent law (L = E + A/N^α + B/D^α)", run_shared,
              json_fields=lambda f: {"n_params": f.n_params, "n_points": f.law.n_points},
              words="shared-exponent law E + A/N^α + B/D^α", n_params=4, judged=True,
              headline_candidate=True, allocation=True, agreement=True)

DATA_CONSTRAINED = ("data_constrained", "data_constrained_interaction")  # issue 52
BUILTIN_JUDGED = ("3", "interaction", "kaplan_joint", "quadratic", *DATA_CONSTRAINED)
BUILTIN_PARAMETRIC = ("3", "interaction", "kaplan_joint", *DATA_CONSTRAINED)
BUILTIN_ALLOCATIONS = ("1", "2", "3", "interaction", "kaplan_joint", "quadratic",
                       *DATA_CONSTRAINED)
BUILTIN_PREDICTED = ("1", "2", "3", "interaction", "kaplan_joint", *DATA_CONSTRAINED)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(table.FITS, TOY.name, TOY)  # = register(TOY), removed after the test
    return TOY


@pytest.fixture(scope="module")
def runs():
    return isoflop_runs(ChinchillaLaw(), np.logspace(18, 20, 4), sizes_per_budget=7, seed=5)


def _choices(parser) -> list[str]:
    return list(next(a.choices for a in parser._actions if a.dest == "approach"))


def test_the_builtin_lists_are_the_ones_once_spelled_out_by_hand():
    """Order and contents of every former hand-written list, now read off the table."""
    assert table.judged() == BUILTIN_JUDGED
    assert dict(LAWS) == {
        "3": ("Approach 3 (additive E + A/N^α + B/D^β)", 5),
        "interaction": ("interaction law E + (A/N^α + B/D^β)^γ", 6),
        "kaplan_joint": ("Kaplan joint law [(N_c/N)^(α_N/α_D) + D_c/D]^α_D", 4),
        "quadratic": ("model-free quadratic surface in (ln N, ln D)", 6),
        "data_constrained": ("data-constrained law E + A/N'^α + B/D'^β (repeats decayed)", 7),
        "data_constrained_interaction": (
            "data-constrained interaction law E + (A/N'^α + B/D'^β)^γ", 8),
    }
    assert table.headline_candidates() == BUILTIN_PARAMETRIC
    assert table.allocations() == table.compared() == BUILTIN_ALLOCATIONS
    assert table.predictable() == BUILTIN_PREDICTED
    assert _choices(predict_command.parser()) == list(BUILTIN_PREDICTED)
    assert _choices(fit_command.parser()) == [*table.FITS, "all"]
    assert headline_rule().startswith(
        "among the parametric laws (3, interaction, kaplan_joint, data_constrained, "
        "data_constrained_interaction) whose residuals are not beyond")
    assert "shared" not in LAWS and "shared" not in table.FITS


def test_a_role_needs_what_it_reads():
    with pytest.raises(ValueError, match="words and n_params"):
        FitSpec("x", "x", run_shared, judged=True)
    with pytest.raises(ValueError, match="must be judged"):
        FitSpec("x", "x", run_shared, headline_candidate=True)
    with pytest.raises(ValueError, match="allocation"):
        FitSpec("x", "x", run_shared, agreement=True)
    plain = FitSpec("x", "x", run_shared)  # a fit with no role is on no list
    assert not (plain.judged or plain.headline_candidate or plain.allocation or plain.agreement)


def test_a_registered_law_is_on_every_list_it_declares(toy):
    assert table.judged() == (*BUILTIN_JUDGED, "shared")
    assert LAWS["shared"] == (TOY.words, 4) and list(LAWS)[-1] == "shared"
    assert table.headline_candidates() == (*BUILTIN_PARAMETRIC, "shared")
    assert table.compared() == table.allocations() == (*BUILTIN_ALLOCATIONS, "shared")
    assert _choices(predict_command.parser()) == [*BUILTIN_PREDICTED, "shared"]
    assert "shared" in _choices(fit_command.parser())
    assert "data_constrained_interaction, shared) whose residuals" in headline_rule()


def test_a_registered_law_is_judged_compared_reported_and_in_fit_json(toy, runs):
    result = analyze(runs, bootstrap=8, seed=0, approaches=("2", "shared"), conventions=False)
    est = result.fits["shared"]
    assert est.fit.n_params == TOY.n_params  # the entry's count is the law's
    assert 0.3 < est.point["a"] < 0.7  # one exponent for N and D: a ≈ 1/2

    judged = result.verdict.law("shared")
    assert judged is not None and judged.what == TOY.words
    assert [v.approach for v in result.verdict.laws] == ["shared"]  # 3 was not asked for
    assert result.verdict.headline == "shared"
    assert "shared" in result.verdict.rule
    assert choose_headline((judged,)) == "shared"  # a headline candidate

    pairs = [(a.first, a.second) for a in result.agreement]
    assert pairs == [("2", "shared")]
    assert TOY.words in {r.what for r in result.residuals}

    out = analysis_to_json(result)
    shared = out["approaches"]["shared"]
    assert shared["status"] == "ok" and shared["n_params"] == 4
    assert shared["n_points"] == len(result.fitted_runs)
    assert shared["a"] == pytest.approx(est.point["a"])
    assert "a" in shared["ci95"] and shared["bootstrap"]["resamples"] == 8
    assert out["summary"]["approaches"]["shared"]["describes_runs"] == judged.describes
    assert "shared" in out["summary"]["rule"]

    allocation_table = [b for b in laws_section(result) if isinstance(b, Table)][-1]
    assert [row[0] for row in allocation_table.rows] == [*BUILTIN_ALLOCATIONS, "shared"]
    assert allocation_table.rows[-1][1] == TOY.title and "[" in allocation_table.rows[-1][2]
