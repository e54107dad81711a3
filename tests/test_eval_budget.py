"""The evaluation budget (issue 21): evaluations cost at most a stated share of a run's
training compute, every run keeps its final evaluation on the same held-out tokens, and the
cap changes only the evaluation curve, never what is trained.

* ScalingRecipe.evals_per_run: the largest count within the budget, never below 0 (the final
  evaluation stays), never above evals_per_run; None means no cap.
* The planner resolves it into each run's TrainSpec (so run_id follows the evaluations a run
  makes), keeps the checkpoint cadence of evals_per_run, and leaves vit (which scores its
  whole validation split) alone.
* Training is independent of the evaluations: a run with every evaluation and one with only
  the final one end with bit-identical weights and final loss.
* The single-run CLI's --evals and --eval-budget resolve the same way and refuse bad values.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pipeline import checkpoint
from pipeline.config import parse_sweep
from pipeline.planner import expand
from pipeline.train import NullTracker, train
from pipeline.train.cli import build_parser, spec_from_args
from pipeline.train.cli import main as cli_main
from pipeline.vocab import keys
from pipeline.vocab.families import make_config
from pipeline.vocab.recipe import ScalingRecipe
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

ROOT = Path(__file__).resolve().parents[1]


@given(wanted=st.integers(0, 64), steps=st.integers(1, 100_000), eval_batches=st.integers(1, 256),
       budget=st.floats(0.001, 1.0))
def test_the_evaluations_fit_the_budget_or_only_the_final_one_is_left(
        wanted: int, steps: int, eval_batches: int, budget: float) -> None:
    k = ScalingRecipe(eval_budget=budget).evals_per_run(wanted, steps, eval_batches)
    assert 0 <= k <= wanted
    cost = (k + 1) * eval_batches / 3  # in training steps: a forward pass is ~1/3 of a step
    if k > 0:
        assert cost <= budget * steps * (1 + 1e-9)
    if k < wanted:  # one more evaluation would exceed the budget
        assert (k + 2) * eval_batches / 3 > budget * steps * (1 - 1e-9)


def test_no_budget_keeps_every_evaluation_and_the_worked_example_holds() -> None:
    assert ScalingRecipe(eval_budget=None).evals_per_run(8, 10, 64) == 8
    # The single-run CLI's 1M-token run: 122 steps of 64 x 128, 8 eval batches of 64. Its 9
    # evaluations cost 9 x 8 / 3 = 24 steps (20%); 5% of 122 steps = 6.1 steps affords
    # 3 x 0.05 x 122 / 8 = 2.29 evaluations: the final one and 1 along the way.
    assert ScalingRecipe(eval_budget=0.05).evals_per_run(8, 122, 8) == 1
    assert ScalingRecipe(eval_budget=0.05).evals_per_run(8, 10_000, 8) == 8


SWEEP = """\
name: eb
kind: isoflop
family: {family}
shape: {shape}
data: {data}
train: {train}
isoflop:
  budgets: [{budget}]
  sizes: {{shapes: [{{n_layer: 1, d_model: 16}}, {{n_layer: 2, d_model: 32}}]}}
"""
TEXT = dict(family="gpt", shape="{head_dim: 8}", data="{corpus: stdlib, seq_len: 32}")


def _plan(train: str, budget: float = 4e9, **kw: str) -> list[RunSpec]:
    cfg = parse_sweep(SWEEP.format(train=train, budget=budget, **{**TEXT, **kw}), "eb.yaml")
    return expand(cfg, ROOT, vocab_size=256).specs


def test_the_planner_caps_the_evaluations_of_short_runs_and_records_them_in_the_run() -> None:
    train = "{batch_size: 4, evals_per_run: 8, eval_batches: 16, min_steps: 1}"
    capped = _plan(train)
    free = _plan(train.replace("}", ", eval_budget: null}"))
    steps = [s.steps for s in capped]
    assert [s.train.evals_per_run for s in free] == [8, 8]
    for s in capped:
        want = ScalingRecipe(eval_budget=0.05).evals_per_run(8, s.steps, 16)
        assert s.train.evals_per_run == want < 8, steps
        # Checkpoints keep the cadence of evals_per_run: a lost run redoes at most 1/8.
        assert s.exec.checkpoint_interval == max(1, s.steps // 8)
    # The evaluations are part of what a run records, so they are part of its identity.
    assert {s.run_id for s in capped}.isdisjoint(s.run_id for s in free)


def test_long_runs_keep_every_evaluation_and_their_run_ids() -> None:
    train = "{batch_size: 4, evals_per_run: 4, eval_batches: 2}"
    capped = _plan(train, budget=4e11)
    free = _plan(train.replace("}", ", eval_budget: null}"), budget=4e11)
    assert [s.train.evals_per_run for s in capped] == [4, 4]
    assert [s.run_id for s in capped] == [s.run_id for s in free]


def test_the_evaluations_do_not_change_what_is_trained(tmp_path: Path) -> None:
    cfg = make_config("gpt", 1, 32, vocab_size=256, seq_len=32)

    def run(evals: int) -> tuple[NullTracker, float, dict[str, torch.Tensor]]:
        spec = RunSpec(sweep="eb", model=cfg, data=DataSpec(max_bytes=300_000),
                       train=TrainSpec(batch_size=8, evals_per_run=evals, eval_batches=2),
                       steps=24, exec=ExecSpec(threads=1, device="cpu", log_interval=4))
        tracker = NullTracker()
        result = train(spec, tracker, checkpoint_dir=tmp_path / str(evals))
        state = checkpoint.load_latest(tmp_path / str(evals))
        assert state is not None and state["step"] == 24
        return tracker, result.final_val_loss, state["model"]

    every, loss_every, weights_every = run(8)
    final_only, loss_final, weights_final = run(0)
    assert loss_every == loss_final
    assert all(torch.equal(weights_every[k], weights_final[k]) for k in weights_every)
    val = [[step for step, m in t.metrics if keys.VAL_LOSS in m] for t in (every, final_only)]
    assert val == [[3, 6, 9, 12, 15, 18, 21, 24], [24]]


def test_the_single_run_cli_resolves_the_budget_like_the_planner() -> None:
    parse = build_parser().parse_args
    args = ["--tokens", "2e4", "--batch-size", "4", "--seq-len", "32"]  # 156 steps
    spec = spec_from_args(parse(args))
    assert spec.train.evals_per_run == ScalingRecipe().evals_per_run(8, spec.steps, 8) == 1
    assert spec_from_args(parse(args + ["--eval-budget", "1"])).train.evals_per_run == 8
    assert spec_from_args(parse(args + ["--evals", "0"])).train.evals_per_run == 0


@pytest.mark.parametrize("flags, message", [
    (["--evals", "-1"], "--evals must be >= 0, got -1"),
    (["--eval-budget", "0"], "--eval-budget must be in (0, 1], got 0.0"),
    (["--eval-budget", "1.5"], "--eval-budget must be in (0, 1], got 1.5"),
    (["--family", "vit", "--patch-size", "2", "--eval-budget", "0.1"],
     "--eval-budget: family 'vit' scores its whole validation split at each evaluation; "
     "set --evals instead"),
])
def test_the_single_run_cli_refuses_bad_evaluation_flags_in_one_line(
        flags: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli_main(flags) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert list(tmp_path.iterdir()) == []  # no store, no checkpoint folder
