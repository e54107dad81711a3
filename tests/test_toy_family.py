"""A family is one object: a toy family registered with pipeline.vocab.families.register (and
nothing else) is planned by the sweep schema and planner, trained and recorded by the run
side, and read and fitted by the analysis, in this process.

The toy composes the generic layers as no built-in does (RMSNorm with learned positions, a
GELU MLP of width 2d, an untied head, no biases), so anything that keyed on a built-in
family's name instead of reading the shape or the Family would fail here. The sweep runs the
same steps as `python -m pipeline.sweep` minus Ray (whose workers are other processes, which
import the registry as the code has it): plan, the plan manifest on the sweep's parent run,
one trial per run (pipeline.trial.execute_trial, what a Ray task calls), load and fit.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from pipeline.config import SweepError, parse_sweep
from pipeline.vocab import flops, keys
from pipeline.vocab.families import (
    CAUSAL,
    FAMILY_REGISTRY,
    Family,
    ModelConfig,
    data_unit,
    family_names,
    make_config,
    register,
    unregister,
)


def _toy(*, n_layer: int, d_model: int, n_heads: int, n_kv_heads: int | None, d_ff: int | None,
         vocab_size: int, seq_len: int, gqa_ratio: int, ffn_multiple: int, dropout: float,
         causal: bool) -> ModelConfig:
    return ModelConfig(
        family="toy", vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer, d_model=d_model,
        n_heads=n_heads, n_kv_heads=n_heads if n_kv_heads is None else n_kv_heads,
        d_ff=2 * d_model if d_ff is None else d_ff, norm="rmsnorm", pos="learned", mlp="gelu",
        tied_embeddings=False, bias=False, dropout=dropout, causal=causal)


TOY = Family("toy", _toy, CAUSAL, "a test family: RMSNorm, learned positions, GELU 2x")


@pytest.fixture
def toy():
    register(TOY)
    try:
        yield TOY
    finally:
        unregister("toy")


def _sweep(name: str) -> dict:
    return {"name": name, "kind": "runs", "family": "toy",
            "data": {"seq_len": 32, "max_bytes": 300_000},
            "train": {"batch_size": 4, "evals_per_run": 4, "eval_batches": 2, "min_steps": 10},
            "runs": [{"n_layer": 1, "d_model": 16, "tokens": 4000},
                     {"n_layer": 1, "d_model": 32, "tokens": 4000},
                     {"n_layer": 2, "d_model": 32, "tokens": 4000},
                     {"n_layer": 1, "d_model": 16, "tokens": 8000},
                     {"n_layer": 2, "d_model": 32, "tokens": 8000}]}


def test_registration_is_checked_and_undone(toy) -> None:
    assert family_names()[-1] == "toy" and data_unit("toy") == "tokens"
    with pytest.raises(ValueError, match="already registered"):
        register(TOY)
    with pytest.raises(ValueError, match="not a plain name"):
        register(Family("to y", _toy, CAUSAL, "bad"))
    unregister("toy")
    with pytest.raises(SweepError, match="family: Input should be 'gpt', 'llama', 'bert' or "
                                         "'vit' \\(got 'toy'\\)"):
        parse_sweep(yaml.safe_dump(_sweep("t")))
    register(TOY)  # the fixture unregisters it


def test_a_registered_family_is_planned_trained_recorded_and_fitted(
        toy, tmp_path: Path, module_cache: Path) -> None:
    import torch

    from analysis.analyze import analyze
    from analysis.fits.results import Estimate
    from analysis.runs.load import load_sweep
    from pipeline.model import build_model
    from pipeline.planner import expand
    from pipeline.tracking import Ledger
    from pipeline.trial import execute_trial
    from pipeline.vocab.manifest import plan_manifest

    # The model: the generic layers build it, and the FLOP module counts what they build.
    cfg = make_config("toy", 2, 32, vocab_size=256, seq_len=32)
    model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == flops.params_total(cfg)
    assert model(torch.zeros(1, 32, dtype=torch.long))[0].shape == (1, 32, 256)

    # Plan: the schema accepts the name, the planner makes its shapes.
    sweep = parse_sweep(yaml.safe_dump(_sweep("toyfam")), str(tmp_path / "toy.yaml"))
    specs = expand(sweep, tmp_path, 256).specs
    assert [(s.model.family, s.model.n_layer, s.model.d_model, s.model.d_ff, s.tokens)
            for s in specs] == [("toy", 1, 16, 32, 3968), ("toy", 1, 32, 64, 3968),
                                ("toy", 2, 32, 64, 3968), ("toy", 1, 16, 32, 7936),
                                ("toy", 2, 32, 64, 7936)]

    # Train and record, as a sweep's driver and its Ray tasks do.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ledger = Ledger(uri, sweep.name)
    parent = ledger.parent_run({"family": sweep.family})
    ledger.write_plan(parent, plan_manifest(sweep.name, "0" * 64, sweep.flops_convention, specs))
    for spec in specs:
        rec = ledger.create_trial(spec, parent_run_id=parent)
        out = execute_trial(spec, uri, rec.mlflow_run_id, str(tmp_path / "ckpt" / spec.run_id))
        assert out["status"] == keys.STATUS_FINISHED, out
        assert math.isfinite(out["final_val_loss"]) and out["final_val_loss"] < math.log(256)

    # Read and fit: the analysis knows the family from the ledger and the registry.
    data = load_sweep(sweep.name, tracking_uri=uri, log=lambda _line: None)
    runs = data.runs
    assert data.plan is not None and {r.family for r in data.plan.runs} == {"toy"}
    assert runs.family() == "toy" and runs.data_unit == "tokens"
    assert runs.loss_unit == "nats/token" and runs.generates
    assert sorted(runs.frame["N"]) == sorted(flops.params_total(s.model) for s in specs)
    assert sorted(runs.frame["C"]) == pytest.approx(sorted(
        flops.training_flops(s.model, s.tokens, sweep.flops_convention) for s in specs))
    # Kaplan's joint law L(N, D): 4 parameters, 5 runs (the fewest it takes).
    result = analyze(runs, data.curves, bootstrap=0, approaches=("kaplan_joint",),
                     conventions=False)
    assert result.n_runs == 5
    law = result.fits["kaplan_joint"]
    assert isinstance(law, Estimate), law
    assert all(math.isfinite(v) for v in law.point.values()) and law.point, law.point
    assert "toy" in FAMILY_REGISTRY  # still registered: the fixture removes it
