"""Sweep options for a trustworthy law: WSD branch reuse, recipe variants, seed replicates and
held-out budgets; planning and training (no Ray)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipeline.config import SweepError, load_sweep
from pipeline.data import CACHE_ENV, load_data
from pipeline.planner import expand, plan_holdout
from pipeline.planner.ladder import shape_rule, size_ladder
from pipeline.train import train
from pipeline.vocab import flops, keys
from pipeline.vocab.spec import RunSpec, branch_folder

BASE = {
    "name": "w", "kind": "grid", "family": "gpt",
    "shape": {"knob": "width", "head_dim": 8, "aspect_ratio": 16},
    "data": {"corpus": "stdlib", "max_bytes": 300_000, "seq_len": 32},
    "train": {"batch_size": 4, "lr": 3e-3, "schedules": ["cosine", "wsd"],
              "wsd_reuse": True, "evals_per_run": 2, "eval_batches": 2},
    "grid": {"sizes": {"widths": [1]}, "tokens": [3200, 6400, 12800]},
}


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _plan(tmp_path: Path, doc: dict):
    path = _write(tmp_path, doc)
    return expand(load_sweep(path), path)


def _with(section: str, **changes: object) -> dict:
    doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    doc[section] = {**doc[section], **changes}
    return doc


# --- planning ------------------------------------------------------------------------------


def test_wsd_runs_of_one_shape_share_the_longest_as_trunk(tmp_path: Path) -> None:
    specs = _plan(tmp_path, BASE).specs
    wsd = sorted((s for s in specs if s.train.schedule == "wsd"), key=lambda s: s.steps)
    cosine = [s for s in specs if s.train.schedule == "cosine"]
    assert [s.steps for s in wsd] == [25, 50, 100] and len(cosine) == 3
    trunk = wsd[-1]
    # Each branch starts where its own decay begins (20% of its steps), from the trunk.
    assert [(s.exec.branch_from, s.exec.branch_step) for s in wsd[:2]] == [
        (trunk.run_id, 20), (trunk.run_id, 40)]
    assert trunk.exec.branch_steps == (20, 40) and not trunk.exec.branch_from
    # Warmup follows the trunk so the schedules agree up to every branch point...
    assert {s.train.warmup_steps for s in wsd} == {int(0.05 * 100)}
    # ...while cosine runs keep their own warmup and never branch.
    assert [s.train.warmup_steps for s in sorted(cosine, key=lambda s: s.steps)] == [1, 2, 5]
    assert all(not s.exec.branch_from and not s.exec.branch_steps for s in cosine)


def test_branching_does_not_change_run_ids(tmp_path: Path) -> None:
    """run_id is what is trained: a branch is the same run as the same spec trained alone."""
    shared = _plan(tmp_path, BASE).specs
    for s in shared:
        alone = dataclasses.replace(s, exec=dataclasses.replace(
            s.exec, branch_from="", branch_step=0, branch_steps=()))
        assert alone.run_id == s.run_id
    assert RunSpec.from_dict(shared[1].to_dict()) == shared[1]


@pytest.mark.parametrize(("section", "changes", "message"), [
    ("train", {"schedules": None, "schedule": "cosine"},
     "train.wsd_reuse: is ignored without schedule 'wsd' (schedule 'cosine'); remove it"),
    ("train", {"schedule": "wsd"}, "train.schedule: is replaced by schedules"),
    ("train", {"schedules": ["wsd", "wsd"]}, "train.schedules[1]: duplicate"),
])
def test_bad_wsd_settings_are_refused(tmp_path: Path, section: str, changes: dict,
                                      message: str) -> None:
    doc = _with(section, **changes)
    doc[section] = {k: v for k, v in doc[section].items() if v is not None}
    with pytest.raises(SweepError) as err:
        load_sweep(_write(tmp_path, doc))
    assert message in str(err.value)
    assert str(tmp_path / "sweep.yaml") in str(err.value)


ISO = {
    "name": "iso", "kind": "isoflop", "family": "gpt",
    "shape": {"knob": "width", "head_dim": 8, "aspect_ratio": 16},
    "data": {"corpus": "stdlib", "max_bytes": 300_000, "seq_len": 32},
    "train": {"batch_size": 4, "lr": 3e-3},
    "isoflop": {"budgets": [3e9, 6e9], "sizes": {"widths": [1, 2]},
                "replicates": {"seeds": [1, 2], "budgets": [6e9]},
                "holdout": {"budgets": [2e10], "count": 2}},
}


def _iso(**isoflop: object) -> dict:
    return {**ISO, "isoflop": {**ISO["isoflop"], **isoflop}}


def test_replicates_add_seeds_to_their_budgets_only(tmp_path: Path) -> None:
    cfg = load_sweep(_write(tmp_path, ISO))
    specs = expand(cfg, tmp_path / "sweep.yaml").specs
    seeds = sorted((s.budget, s.model.d_model, s.train.seed) for s in specs)
    assert seeds == [(3e9, 8, 0), (3e9, 16, 0),
                     (6e9, 8, 0), (6e9, 8, 1), (6e9, 8, 2), (6e9, 16, 0), (6e9, 16, 1),
                     (6e9, 16, 2)]
    assert cfg.planned_runs() == len(specs)
    assert all(s.role == keys.ROLE_MAIN for s in specs)  # held-out runs come later


@pytest.mark.parametrize(("isoflop", "message"), [
    ({"replicates": {"seeds": [1], "budgets": [5e9]}},
     "isoflop.replicates.budgets[0]: is not one of budgets [3000000000.0, 6000000000.0] "
     "(got 5000000000.0)"),
    ({"replicates": {"seeds": [0], "budgets": [6e9]}},
     "isoflop.replicates.seeds[0]: is already one of train.seeds [0] (got 0)"),
    ({"holdout": {"budgets": [6e9]}},
     "isoflop.holdout.budgets[0]: is also a main budget"),
    ({"holdout": {"budgets": [2e10], "count": 0}}, "isoflop.holdout.count"),
])
def test_bad_replicates_and_holdout_are_refused(tmp_path: Path, isoflop: dict,
                                                message: str) -> None:
    with pytest.raises(SweepError) as err:
        load_sweep(_write(tmp_path, _iso(**isoflop)))
    assert message in str(err.value)


def test_holdout_runs_sit_at_the_predicted_optimum(tmp_path: Path) -> None:
    cfg = load_sweep(_write(tmp_path, ISO))
    n_opt = 14_000.0
    plan = plan_holdout(cfg, {2e10: n_opt}, tmp_path / "sweep.yaml")
    assert {s.role for s in plan.specs} == {keys.ROLE_HOLDOUT}
    assert len(plan.specs) == 2 and all(s.budget == 2e10 for s in plan.specs)
    # count 2: the two rungs of the ladder nearest to N_opt in log N.
    ladder = sorted(flops.params_total(m) for m in size_ladder(cfg, shape_rule(cfg), 256))
    nearest = sorted(ladder, key=lambda n: abs(math.log(n / n_opt)))[:2]
    assert sorted(flops.params_total(s.model) for s in plan.specs) == sorted(nearest)
    for s in plan.specs:  # achieved compute on the budget, under the sweep's convention
        assert flops.training_flops(s.model, s.tokens, "exact") == pytest.approx(2e10, rel=0.01)


# --- training: a branch equals the same run trained alone, bit for bit -----------------------


@pytest.fixture()
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    folder = str(tmp_path_factory.getbasetemp() / "wsd-token-cache")
    monkeypatch.setenv(CACHE_ENV, folder)
    return folder


def test_branch_from_trunk_equals_training_alone(tmp_path: Path, _cache: str) -> None:
    specs = _plan(tmp_path, BASE).specs
    wsd = sorted((s for s in specs if s.train.schedule == "wsd"), key=lambda s: s.steps)
    branch, trunk = wsd[0], wsd[-1]
    data = load_data(trunk.data, cache_dir=_cache)
    trunk_dir = tmp_path / "ckpt" / trunk.run_id
    train(trunk, checkpoint_dir=trunk_dir, data=data)
    kept = branch_folder(trunk_dir, branch.exec.branch_step)
    assert kept.is_dir()  # kept apart from the trunk's rolling checkpoints

    steps_trained: list[int] = []
    branched = train(branch, checkpoint_dir=tmp_path / "ckpt" / branch.run_id, data=data,
                     branch_dir=kept, on_step=steps_trained.append)
    alone = train(branch, data=data)
    assert branched.resumed_from == branch.exec.branch_step
    assert steps_trained[0] == branch.exec.branch_step + 1  # only the decay was trained
    assert branched.final_val_loss == alone.final_val_loss
    assert branched.final_train_loss == alone.final_train_loss


def test_branch_without_trunk_state_trains_alone_and_warns(tmp_path: Path, _cache: str) -> None:
    specs = _plan(tmp_path, BASE).specs
    branch = min((s for s in specs if s.train.schedule == "wsd"), key=lambda s: s.steps)
    data = load_data(branch.data, cache_dir=_cache)
    with pytest.warns(UserWarning, match="no trunk state in .*training from step 0"):
        result = train(branch, data=data, branch_dir=tmp_path / "missing")
    assert result.resumed_from is None
    assert result.final_val_loss == train(branch, data=data).final_val_loss


def test_branch_state_at_the_wrong_step_is_an_error(tmp_path: Path, _cache: str) -> None:
    specs = _plan(tmp_path, BASE).specs
    wsd = sorted((s for s in specs if s.train.schedule == "wsd"), key=lambda s: s.steps)
    data = load_data(wsd[0].data, cache_dir=_cache)
    trunk_dir = tmp_path / "trunk"
    train(wsd[-1], checkpoint_dir=trunk_dir, data=data)
    wrong = branch_folder(trunk_dir, wsd[1].exec.branch_step)  # the 2x run's branch point
    with pytest.raises(ValueError, match=r"is at step 40, the branch starts at 20"):
        train(wsd[0], data=data, branch_dir=wrong)


# --- the driver's held-out planning from the main runs --------------------------------------


def test_holdout_plan_reads_the_approach2_optimum_of_the_main_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Synthetic main runs with N_opt = 0.1 * C^0.5: the sweep's fit predicts it and the
    held-out run lands next to it."""
    from analysis.runs.table import runs_from_arrays
    from pipeline.planner import holdout_plan
    from pipeline.sweep import predicted_optimum

    rows = []
    for c in (1e10, 3e10, 1e11, 3e11):
        n_opt = 0.1 * math.sqrt(c)
        for f in (0.25, 0.5, 1.0, 2.0, 4.0):
            n = n_opt * f
            rows.append((n, c / (6 * n), c, 2.0 + 0.05 * math.log(f) ** 2, c))
    n, d, c, loss, budget = (np.array(col) for col in zip(*rows, strict=True))
    table = runs_from_arrays(n, d, loss, c=c, budget=budget)
    holdout = pd.Series(keys.ROLE_MAIN, index=table.frame.index)
    table.frame["role"] = holdout

    class Loaded:
        runs = table

    monkeypatch.setattr("analysis.runs.load.load_sweep", lambda *a, **k: Loaded)
    # Synthetic runs carry no planned run_id: keep them all (restrict_to_plan is tested below).
    monkeypatch.setattr("analysis.runs.planned.restrict_to_plan", lambda runs, _ids, _file: runs)
    doc = _iso(budgets=[1e10, 3e10, 1e11, 3e11], holdout={"budgets": [1e12], "count": 1},
               replicates=None)
    doc["isoflop"] = {k: v for k, v in doc["isoflop"].items() if v is not None}
    cfg = load_sweep(_write(tmp_path, doc))
    n_opt = predicted_optimum(cfg, str(tmp_path / "sweep.yaml"), "sqlite:///unused.db",
                              expand(cfg, tmp_path, 256))
    predicted = 0.1 * math.sqrt(1e12)
    assert n_opt.keys() == {1e12} and abs(n_opt[1e12] / predicted - 1) < 0.05
    plan = holdout_plan(cfg, n_opt, str(tmp_path / "sweep.yaml"), 256)
    (spec,) = plan.specs
    # The rung is the ladder's nearest to the predicted 1e5 parameters.
    assert spec.role == keys.ROLE_HOLDOUT and spec.budget == 1e12
    assert abs(math.log(flops.params_total(spec.model) / predicted)) < math.log(1.6)


def test_holdout_planning_reads_the_plan_it_ran_not_the_file_edited_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver passes the plan it ran: a file edited (even into an invalid one) while the
    main runs trained changes nothing; a ledger without those runs is a clear error."""
    from analysis.runs.table import runs_from_arrays
    from pipeline.planner import HoldoutError
    from pipeline.sweep import predicted_optimum

    class Loaded:
        runs = runs_from_arrays([1e3, 2e3], [1e6, 1e6], [2.0, 2.1], budget=[1e10, 1e10])

    monkeypatch.setattr("analysis.runs.load.load_sweep", lambda *a, **k: Loaded)
    doc = _iso(replicates=None)
    path = _write(tmp_path, doc)
    cfg = load_sweep(path)
    plan = expand(cfg, path, 256)
    doc["isoflop"]["holdout"] = {**doc["isoflop"]["holdout"], "bogus": 1}
    _write(tmp_path, doc)
    with pytest.raises(HoldoutError, match=r"cannot tell the main runs of .*sweep.yaml: "
                                           r".*none of its 2 runs is planned") as err:
        predicted_optimum(cfg, str(path), "sqlite:///unused.db", plan)
    assert "bogus" not in str(err.value)


def test_holdout_plan_is_planning_alone(tmp_path: Path) -> None:
    """pipeline.planner.holdout plans from the predicted optimum only (no ledger, no analysis); a
    held-out budget without a usable N_opt is a HoldoutError, not a plan."""
    from pipeline.planner import HoldoutError, holdout_plan

    doc = _iso(replicates=None)
    path = _write(tmp_path, doc)
    cfg = load_sweep(path)
    (budget,) = cfg.isoflop.holdout.budgets
    plan = holdout_plan(cfg, {budget: 1e4}, str(path), 256)
    assert plan.specs and {s.role for s in plan.specs} == {keys.ROLE_HOLDOUT}
    assert {s.budget for s in plan.specs} == {budget}
    for bad in ({}, {budget: float("nan")}, {budget: 0.0}):
        with pytest.raises(HoldoutError, match="no predicted optimum to train at"):
            holdout_plan(cfg, bad, str(path), 256)


# --- recipe variants (an ablation) -----------------------------------------------------------


def test_variants_train_every_cell_with_each_recipe(tmp_path: Path) -> None:
    doc = _iso(replicates=None, holdout=None)
    doc["isoflop"] = {k: v for k, v in doc["isoflop"].items() if v is not None}
    doc["train"] = {**doc["train"], "variants": [{"batch_size": 8}, {"weight_decay": 0.0},
                                                 {"batch_size": 4}]}
    cfg = load_sweep(_write(tmp_path, doc))
    plan = expand(cfg, tmp_path / "sweep.yaml")
    recipes = sorted({(s.train.batch_size, s.train.weight_decay) for s in plan.specs})
    # {batch_size: 4} is the recipe itself: planned once, and listed as a duplicate.
    assert recipes == [(4, 0.0), (4, 0.1), (8, 0.1)]
    assert len(plan.specs) == 3 * 2 * 2 == cfg.planned_runs() - 2 * 2
    assert sum("duplicate" in s.reason for s in plan.skipped) == 2 * 2
    for s in plan.specs:  # the same tokens at every batch size: steps follow
        assert s.tokens == pytest.approx(flops.tokens_for_budget(s.model, s.budget, "exact"),
                                         rel=0.01)


@pytest.mark.parametrize(("variant", "message"), [
    ({"bogus": 1}, "train.variants[0].bogus: cannot vary here; a variant may set batch_max, batch_min, "
     "batch_rule_steps, batch_size"),
    ({"seeds": [3]}, "train.variants[0].seeds: cannot vary here"),
    ({"weight_decay": 2}, "train.variants[0].weight_decay: Input should be less than 1 (got 2)"),
    ({"decay_fraction": 0.3},
     "train.variants[0].decay_fraction: is ignored without schedule 'wsd'"),
])
def test_bad_variants_are_refused_naming_the_variant(tmp_path: Path, variant: dict,
                                                      message: str) -> None:
    doc = _iso(replicates=None, holdout=None)
    doc["isoflop"] = {k: v for k, v in doc["isoflop"].items() if v is not None}
    doc["train"] = {**doc["train"], "variants": [variant]}
    with pytest.raises(SweepError) as err:
        load_sweep(_write(tmp_path, doc))
    assert message in str(err.value)


def test_warmup_floor_lengthens_short_runs_only(tmp_path: Path) -> None:
    doc = _iso(replicates=None, holdout=None, budgets=[3e9, 2e10, 1e11])
    doc["isoflop"] = {k: v for k, v in doc["isoflop"].items() if v is not None}
    plain = {s.run_id: s for s in expand(load_sweep(_write(tmp_path, doc)), tmp_path).specs}
    doc["train"] = {**doc["train"], "warmup_min_steps": 100}
    floored = expand(load_sweep(_write(tmp_path, doc)), tmp_path).specs
    for s in floored:
        frac = int(0.05 * s.steps)
        assert s.train.warmup_steps == max(frac, min(100, s.steps // 5))
        # A run whose 5% warmup already reaches the floor is the same run (same run_id).
        assert (s.run_id in plain) == (s.train.warmup_steps == frac)
    assert any(s.run_id in plain for s in floored)
    assert any(s.run_id not in plain for s in floored)


def test_runs_of_an_earlier_recipe_are_left_out(tmp_path: Path) -> None:
    """After an edit of the sweep file, the ledger's runs of the old recipe are not fitted,
    and a held-out run is kept only if the file's held-out section would plan it now."""
    from analysis.errors import DataError
    from analysis.runs.planned import held_out_cells, restrict_to_manifest, restrict_to_plan
    from analysis.runs.table import runs_from_arrays
    from pipeline.planned_view import sweep_file_manifest
    from pipeline.planner import planned_run_ids

    def restrict_to_sweep_file(table, path):  # what --sweep-file does (analysis.cli.file_plan)
        manifest = sweep_file_manifest(path, held_out_cells(table), "0" * 64)
        return restrict_to_manifest(table, manifest, path)

    doc = _iso(replicates=None)
    doc["isoflop"] = {k: v for k, v in doc["isoflop"].items() if v is not None}
    doc["isoflop"]["holdout"] = {"budgets": [2e10], "count": 1, "seeds": [1]}
    cfg = load_sweep(_write(tmp_path, doc))
    n_opt = float(flops.params_total(size_ladder(cfg, shape_rule(cfg), 256)[1]))
    old = expand(cfg, tmp_path).specs
    old_held = plan_holdout(cfg, {2e10: n_opt}, tmp_path).specs
    doc["train"] = {**doc["train"], "lr": 1e-3}
    path = _write(tmp_path, doc)
    cfg = load_sweep(path)
    new = expand(cfg, tmp_path).specs
    new_held = plan_holdout(cfg, {2e10: n_opt}, tmp_path).specs
    assert len(old_held) == len(new_held) == 2  # seeds 0 and 1 of one size
    specs = old + new + old_held + new_held
    table = runs_from_arrays(
        [float(flops.params_total(s.model)) for s in specs], [float(s.tokens) for s in specs],
        [2.0] * len(specs), budget=[s.budget for s in specs], run_ids=[s.run_id for s in specs],
        extra={"role": [s.role for s in specs]})
    kept = restrict_to_sweep_file(table, path)
    assert list(kept.frame["run_id"]) == [s.run_id for s in new + new_held]
    assert [(r.run_id, r.role, r.budget) for r in kept.plan.runs] == [
        (s.run_id, s.role, s.budget) for s in new + new_held]
    ids = planned_run_ids(cfg, held_out_cells(table), path, 256)
    assert ids == {s.run_id for s in new + new_held}
    assert list(restrict_to_plan(table, ids, path).frame["run_id"]) == list(kept.frame["run_id"])
    assert len(kept.excluded) == len(old) + len(old_held)
    assert all("earlier version of the file" in e.reason for e in kept.excluded)
    with pytest.raises(DataError, match="none of its"):
        restrict_to_sweep_file(
            table.subset([True] * len(old) + [False] * (len(specs) - len(old))), path)


@pytest.mark.parametrize(("holdout", "message"), [
    ({"seeds": [1, 1]}, "isoflop.holdout.seeds[1]: duplicate"),
    ({"seeds": [0]}, "isoflop.holdout.seeds[0]: is already one of train.seeds [0]"),
])
def test_bad_holdout_seeds_are_refused(tmp_path: Path, holdout: dict, message: str) -> None:
    doc = _iso(holdout={"budgets": [2e10], **holdout})
    with pytest.raises(SweepError) as err:
        load_sweep(_write(tmp_path, doc))
    assert message in str(err.value)


# --- batch rule ----------------------------------------------------------------------------


def _batch_rule_doc(**train: object) -> dict:
    doc = _iso(replicates=None, holdout=None, budgets=[3e9, 2e10, 1e11])
    doc["isoflop"] = {k: v for k, v in doc["isoflop"].items() if v is not None}
    doc["isoflop"]["sizes"] = {"widths": [1, 2, 3]}
    doc["train"] = {**doc["train"], "eval_batches": 4, **train}
    return doc


def test_batch_rule_grows_the_batch_with_tokens(tmp_path: Path) -> None:
    doc = _batch_rule_doc()
    plain = {s.run_id: s for s in expand(load_sweep(_write(tmp_path, doc)), tmp_path).specs}
    doc["train"].update(batch_rule_steps=2000, batch_min=2, batch_max=16, lr_batch_exponent=0.5)
    ruled = expand(load_sweep(_write(tmp_path, doc)), tmp_path).specs
    assert len(ruled) == len(plain) == 9
    batches = set()
    for s in ruled:
        ideal = flops.tokens_for_budget(s.model, s.budget, "exact") / (32 * 2000)
        want = min(max(2 ** round(math.log2(ideal)), 2), 16)
        assert s.train.batch_size == want
        batches.add(want)
        assert s.steps == round(flops.tokens_for_budget(s.model, s.budget, "exact") / (want * 32))
        # Adam's square-root rule around the reference batch (4), and the same 4 x 4 = 16
        # evaluation sequences at every batch.
        assert s.train.lr == pytest.approx(3e-3 * (want / 4) ** 0.5, rel=1e-12)
        assert s.train.eval_batches * s.train.batch_size == 16
        # A run the rule gives the reference batch is the fixed-batch run (same run_id).
        assert (s.run_id in plain) == (want == 4)
    assert {2, 4, 16} <= batches  # the plan spans the range, clipped at both ends


@pytest.mark.parametrize(("train", "message"), [
    ({"batch_min": 2}, "train.batch_min: is ignored without batch_rule_steps; remove it"),
    ({"batch_rule_steps": 100, "batch_max": 12}, "train.batch_max: must be a power of two"),
    ({"batch_rule_steps": 100, "batch_min": 8, "batch_max": 4},
     "train.batch_min: exceeds batch_max (4)"),
    ({"batch_rule_steps": 100, "batch_max": 32},
     "train.batch_max: must divide the evaluation's eval_batches * batch_size = 16 sequences"),
    ({"batch_rule_steps": 100, "schedule": "wsd", "wsd_reuse": True},
     "train.wsd_reuse: cannot share trunks between runs whose batch differs"),
])
def test_bad_batch_rules_are_refused(tmp_path: Path, train: dict, message: str) -> None:
    with pytest.raises(SweepError) as err:
        load_sweep(_write(tmp_path, _batch_rule_doc(**train)))
    assert message in str(err.value)
    assert str(tmp_path / "sweep.yaml") in str(err.value)
