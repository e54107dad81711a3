"""The sweep's progress line tells the time left from the plan's estimates (the dry run's),
not from the FLOP rate of the first runs (issue 55: ~20 minutes for a 3-minute quickstart,
climbing at every line): from the first line, before any run has finished; corrected by the
pace of the runs finished; the FLOP rate only where a run has no estimate. Pure arithmetic:
no Ray, no torch."""

from __future__ import annotations

import math

import pytest

from pipeline.terminal.tables import Progress, dur, pace, planned_seconds, time_left


def test_time_left_spreads_the_estimates_over_the_slots_as_the_dry_run() -> None:
    # The dry run's wall: the sum over the runs / the runs at a time.
    assert time_left([10, 20, 30, 40], [], slots=2) == pytest.approx(50)
    # The running ones (the first in line) have done what they have been running.
    assert time_left([10, 20, 30, 40], [4, 6], slots=2) == pytest.approx((6 + 14 + 70) / 2)
    # Never below the longest run left (one slot busy, one idle, at the tail)...
    assert time_left([100, 10], [0, 5], slots=2) == pytest.approx(100)
    # ... and a run past its estimate has nothing left, not less than nothing.
    assert time_left([10, 30], [15, 0], slots=2) == pytest.approx(30)
    assert time_left([], [], slots=2) == 0
    # A pace of 1.5 (the runs take 1.5x their estimates) scales what is left.
    assert time_left([10, 20], [], slots=1, factor=1.5) == pytest.approx(45)


def test_the_pace_of_finished_runs_moves_the_estimate_as_they_add_up() -> None:
    assert pace(0, 0, mean_estimate=60) == 1  # nothing measured: the estimates as they are
    # One small run twice as slow as estimated moves it little (one mean run of prior)...
    assert pace(20, 10, mean_estimate=60) == pytest.approx(80 / 70)
    # ... many runs, much.
    assert pace(1200, 600, mean_estimate=60) == pytest.approx(1260 / 660)
    assert pace(0, 0, mean_estimate=0) == 1


def _progress(estimates: dict[str, float | None], slots: int = 2) -> Progress:
    p = Progress(total=len(estimates), started=0.0, slots=slots)
    for run_id, seconds in estimates.items():
        p.expect(run_id, seconds)
    return p


def test_the_first_line_has_the_plans_eta_and_it_falls_as_the_runs_train() -> None:
    p = _progress({"a": 60, "b": 120, "c": 180, "d": 240})
    assert p.eta(now=1.0) == pytest.approx(300)  # 600 s of runs, 2 at a time
    assert "time left ~5m00s" in p.line(now=1.0)
    # 30 s later, nothing finished: a and b have trained 30 s each (the rule it replaces grew
    # with every line until a run finished).
    assert p.eta(now=31.0) == pytest.approx((30 + 90 + 180 + 240) / 2)
    # a finishes on time at 61 s: c takes its slot; the pace stays 1.
    p.finish("a", wall_s=60.0, now=61.0)
    assert p.since == {"b": 1.0, "c": 61.0}
    assert p.eta(now=61.0) == pytest.approx((60 + 180 + 240) / 2)


def test_runs_slower_than_estimated_raise_what_is_left() -> None:
    p = _progress({"a": 50, "b": 50, "c": 50, "d": 50})
    p.eta(now=0.0)
    p.finish("a", wall_s=100.0, now=100.0)
    p.finish("b", wall_s=100.0, now=100.0)
    factor = (200 + 50) / (100 + 50)  # one mean run (50 s) of prior
    assert p.eta(now=100.0) == pytest.approx(factor * 100 / 2)
    # The pace is the seconds a run reports training, not the time it held its slot (with
    # its Ray worker's start); what the running ones have done is the time they held it.
    q = _progress({"a": 50, "b": 50, "c": 50})
    q.eta(now=0.0)
    q.finish("a", wall_s=20.0, now=30.0)
    assert (q.measured, q.estimated) == (20, 50)
    # Pace (20 + 50) / (50 + 50) = 0.7 (one mean run of prior): b, in its slot since 0, is
    # past its 35 s; c, since a finished at 30, has 35 - 10 left: the longest run left.
    assert q.eta(now=40.0) == pytest.approx(25)
    q.finish("z", wall_s=20.0, now=41.0)  # not expected here (trained elsewhere): no pace
    assert (q.measured, q.estimated) == (20, 50)


def test_skipped_failed_and_diverged_runs_leave_the_count_without_a_pace() -> None:
    p = _progress({"a": 50, "b": 50, "c": 50})  # runs already in the ledger are never expected
    p.finish("a", wall_s=None, now=10.0)  # failed or diverged: no measure of the pace
    assert (p.measured, p.estimated) == (0, 0)
    assert p.eta(now=10.0) == pytest.approx(50)


def test_without_an_estimate_the_flop_rate_rule_is_kept() -> None:
    p = _progress({"a": None, "b": 10})
    p.flops_left = 3e9
    assert math.isnan(p.eta(now=10.0)) and "time left ~?" in p.line(now=10.0)
    p.flops_done, p.flops_left = 1e9, 2e9
    assert p.eta(now=10.0) == pytest.approx(20)
    assert dur(p.eta(now=10.0)) == "20s"


def test_a_wsd_branch_is_planned_from_its_branch_step() -> None:
    from dataclasses import replace

    from pipeline.vocab.families import make_config
    from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

    cfg = make_config("gpt", 1, 16, vocab_size=64, seq_len=16, head_dim=8)
    spec = RunSpec(sweep="p", model=cfg, data=DataSpec(), train=TrainSpec(batch_size=4),
                   steps=100)
    assert planned_seconds(spec, {spec.run_id: 40.0}) == pytest.approx(40)
    assert planned_seconds(spec, None) is None and planned_seconds(spec, {}) is None
    branch = replace(spec, exec=ExecSpec(branch_from="trunk", branch_step=75))
    assert planned_seconds(branch, {branch.run_id: 40.0}) == pytest.approx(10)
