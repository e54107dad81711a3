"""Behaviour pinned before a refactor: the run ids every shipped sweep plans, and the fit.json
of a fixed synthetic ledger (as marin's config snapshot test pins the planned runs).

A change that moves code must leave both unchanged. A change that means to alter them (a new
recipe field, a new JSON field) regenerates them on purpose and says why in its commit:

    python tests/test_snapshots.py --update
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.analyze import analyze
from analysis.runs.synthetic import ChinchillaLaw, replicated_runs
from analysis.schema import analysis_to_json
from pipeline.config import load_sweep
from pipeline.planner import expand, plan_holdout, vocab_size_for
from pipeline.vocab import flops

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = Path(__file__).with_name("data") / "snapshots"
RUN_IDS = SNAPSHOTS / "run_ids.json"
FIT_JSON = SNAPSHOTS / "fit_synthetic.json"
SWEEPS = sorted((ROOT / "sweeps").glob("*.yaml"))


def planned_ids(path: Path, cpu_bf16: bool = False) -> dict[str, list[str]]:
    """The file's main plan and, where it has held-out budgets, the held-out plan for an
    optimum at the geometric middle of the planned sizes (any fixed n_opt will do: the
    snapshot pins the planner, not the fit)."""
    cfg = load_sweep(path)
    vocab = vocab_size_for(cfg)
    assert vocab is not None, f"{path.name}: a shipped sweep whose plan needs the corpus"
    plan = expand(cfg, path, vocab, cpu_bf16=cpu_bf16)
    out = {"main": [s.run_id for s in plan.specs]}
    if cfg.isoflop is not None and cfg.isoflop.holdout is not None:
        sizes = [flops.params_total(s.model) for s in plan.specs]
        n_mid = math.sqrt(min(sizes) * max(sizes))
        n_opt = dict.fromkeys(cfg.isoflop.holdout.budgets, n_mid)
        out["holdout"] = [s.run_id for s in plan_holdout(cfg, n_opt, path, vocab,
                                                              cpu_bf16=cpu_bf16).specs]
    return out


def all_run_ids() -> dict[str, dict[str, list[str]]]:
    return {p.name: planned_ids(p) for p in SWEEPS}


def synthetic_fit_json() -> dict:
    """fit.json of a fixed ledger: 6 budgets x 6 sizes x 2 seeds, one held-out budget."""
    budgets = np.logspace(18, 20.5, 6)
    runs = replicated_runs(ChinchillaLaw(), budgets, seeds=2, sizes_per_budget=6, noise=0.004,
                           holdout_budgets=(1e21,), seed=3)
    result = analyze(runs, bootstrap=24, seed=0)
    return json.loads(json.dumps(analysis_to_json(result), allow_nan=False))


def _differences(got: object, want: object, where: str = "fit.json") -> list[str]:
    """Every place where `got` differs from `want`: equal structure, floats to 1e-5 relative
    or 1e-7 absolute.

    The fits are iterative (L-BFGS, Huber loss) and summation order differs across BLAS builds
    and CPUs: the CI machine's agreement difference of two fitted a's (~0.5 each) came out
    9e-10 away from this machine's, 1.8e-7 of the difference itself. Differences and relative
    errors of O(1) quantities carry their terms' absolute noise, hence the absolute floor; a
    behaviour change moves these numbers by far more than 1e-5."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or sorted(got) != sorted(want):
            return [f"{where}: keys {sorted(got) if isinstance(got, dict) else got} != {sorted(want)}"]
        return [d for k in want for d in _differences(got[k], want[k], f"{where}.{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: {got} != {want}"]
        return [d for i, (g, w) in enumerate(zip(got, want, strict=True))
                for d in _differences(g, w, f"{where}[{i}]")]
    if isinstance(want, float):
        same = isinstance(got, int | float) and got == pytest.approx(want, rel=1e-5, abs=1e-7)
    else:
        same = got == want
    return [] if same else [f"{where}: {got!r} != {want!r}"]


def test_differences_finds_a_moved_float_and_tolerates_float_noise() -> None:
    want = {"a": [0.5, 0.0051088], "n": 3}
    assert _differences({"a": [0.5 + 1e-9, 0.0051088 + 9e-10], "n": 3}, want) == []
    assert _differences({"a": [0.50001, 0.0051088], "n": 3}, want) == [
        "fit.json.a[0]: 0.50001 != 0.5"]
    assert _differences({"a": [0.5], "n": 3}, want)[0].startswith("fit.json.a:")


@pytest.mark.parametrize("native_bf16", [True, False], ids=["bf16-cpu", "plain-cpu"])
@pytest.mark.parametrize("path", SWEEPS, ids=[p.name for p in SWEEPS])
def test_shipped_sweeps_plan_the_pinned_run_ids(path: Path, native_bf16: bool) -> None:
    """On any CPU: `precision: auto` resolves by the CPU's bf16 (pipeline.vocab.recipe.resolve_auto),
    and no shipped CPU sweep trains where that rule binds, so none of their ids depends on it."""
    pinned = json.loads(RUN_IDS.read_text())
    assert path.name in pinned, f"{path.name} is not pinned: run --update and commit it"
    assert planned_ids(path, native_bf16) == pinned[path.name]


def test_every_pinned_sweep_is_still_shipped() -> None:
    assert sorted(json.loads(RUN_IDS.read_text())) == [p.name for p in SWEEPS]


def test_fit_json_of_the_fixed_synthetic_ledger_is_pinned() -> None:
    differences = _differences(synthetic_fit_json(), json.loads(FIT_JSON.read_text()))
    assert not differences, f"{len(differences)} differ, first 10:\n" + "\n".join(differences[:10])


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit(__doc__)
    SNAPSHOTS.mkdir(parents=True, exist_ok=True)
    RUN_IDS.write_text(json.dumps(all_run_ids(), indent=1) + "\n")
    FIT_JSON.write_text(json.dumps(synthetic_fit_json(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {RUN_IDS.relative_to(ROOT)} and {FIT_JSON.relative_to(ROOT)}")
