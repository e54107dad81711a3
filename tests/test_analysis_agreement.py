"""Approaches compared on a: draws pair up across bootstraps, and the paired difference is
the test (analysis.checks.agreement)."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.checks.agreement import Agreement, compare_approaches, paired_difference
from analysis.errors import FitError
from analysis.fits.results import Estimate, Skipped
from analysis.numerics.bootstrap import Bootstrap, Interval, run_bootstrap

RNG = np.random.default_rng(5)
X = RNG.normal(0.5, 0.2, size=30)
"""One data set; every 'approach' below estimates its mean, some with an offset."""


class Mean:
    """A picklable refit: the mean of the resample plus an offset; fails on some draws."""

    def __init__(self, offset: float = 0.0, fail_when_first_is: int | None = None,
                 fail_when_first_below: int = 0):
        self.offset, self.fail_when_first_is = offset, fail_when_first_is
        self.fail_when_first_below = fail_when_first_below

    def __call__(self, idx: np.ndarray) -> dict[str, float]:
        if self.fail_when_first_is is not None and idx[0] == self.fail_when_first_is:
            raise FitError("unlucky draw")
        if idx[0] < self.fail_when_first_below:
            raise FitError("unlucky draw")
        return {"a": float(X[idx].mean()) + self.offset}


def _boot(refit: Mean, seed: int = 0, n: int = 300) -> Bootstrap:
    return run_bootstrap(X.size, refit, n_resamples=n, seed=seed)


def test_by_draw_puts_each_value_at_its_draw_and_nan_where_the_refit_failed():
    plain, holey = _boot(Mean()), _boot(Mean(fail_when_first_is=0))
    assert 0 < holey.n_failed < 40 and holey.fitted.sum() == 300 - holey.n_failed
    full, with_holes = plain.by_draw("a"), holey.by_draw("a")
    assert np.isnan(with_holes[~holey.fitted]).all()
    # The fitted draws keep their place: equal to the same draws of the complete bootstrap.
    np.testing.assert_allclose(with_holes[holey.fitted], full[holey.fitted])


def test_paired_difference_sees_an_offset_that_the_separate_intervals_hide():
    one, two = _boot(Mean()), _boot(Mean(offset=0.05, fail_when_first_is=3))
    iv1, iv2 = one.interval("a"), two.interval("a")
    assert iv1.low <= iv2.high and iv2.low <= iv1.high  # separate intervals overlap widely
    diff, n_paired = paired_difference(one, two, "a")
    assert n_paired == 300 - two.n_failed
    # Same draws: the difference is the offset exactly, on every draw both fitted.
    assert diff.low == pytest.approx(-0.05) and diff.high == pytest.approx(-0.05)


def test_draws_of_other_seeds_do_not_pair():
    with pytest.raises(ValueError, match="did not draw the same resamples"):
        paired_difference(_boot(Mean(), seed=0), _boot(Mean(), seed=1), "a")
    derived = Bootstrap(n_resamples=300, n_failed=0, seed=0, samples={"a": X[:1]})
    with pytest.raises(ValueError, match="did not draw the same resamples"):
        paired_difference(derived, _boot(Mean()), "a")


def test_compare_approaches_reads_agreement_overlap_and_containment():
    same = {"2": Estimate(None, {"a": 0.50}, _boot(Mean())),
            "3": Estimate(None, {"a": 0.51}, _boot(Mean(offset=0.01)))}
    (row,) = compare_approaches(same)
    assert (row.first, row.second) == ("2", "3")
    assert row.difference == pytest.approx(-0.01)
    # A constant offset of 0.01 between the approaches: significant although tiny.
    assert not row.agree and row.overlap and row.each_inside_other
    far = {"1": Estimate(None, {"a": 0.5}, _boot(Mean())),
           "2": Estimate(None, {"a": 1.5}, _boot(Mean(offset=1.0))),
           "3": Skipped("no budgets")}
    (row,) = compare_approaches(far)
    assert (row.first, row.second) == ("1", "2")
    assert not row.agree and not row.overlap and not row.each_inside_other
    assert isinstance(compare_approaches({"2": far["2"], "3": far["3"]}), Skipped)


def test_a_pair_fitted_together_in_at_most_half_of_the_draws_is_not_judged():
    # Approach 2 fails whenever a draw starts with one of the first 20 of 30 points (~2/3).
    mostly_failing = {"1": Estimate(None, {"a": 0.5}, _boot(Mean())),
                      "2": Estimate(None, {"a": 0.5}, _boot(Mean(fail_when_first_below=20)))}
    (row,) = compare_approaches(mostly_failing)
    assert row.n_draws == 300 and row.n_paired < 150
    assert row.agree is None and not row.judged
    assert row.to_json_dict()["agree"] is None
    (row,) = compare_approaches({**mostly_failing,
                                 "2": Estimate(None, {"a": 0.5},
                                               _boot(Mean(fail_when_first_below=5)))})
    assert row.n_paired > 150 and row.agree is True


@pytest.mark.parametrize(("paired", "judged"), [(500, True), (499, False)])
def test_half_of_the_draws_is_enough_as_for_a_single_interval(paired, judged):
    iv = Interval(-0.1, 0.1)
    row = Agreement("1", "2", "a", 0.5, 0.5, iv, iv, iv, n_paired=paired, n_draws=1000)
    assert row.judged is judged and (row.agree is None) is (not judged)
