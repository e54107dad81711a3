"""The family registry (pipeline.vocab.families.FAMILY_REGISTRY) is the one list of families: every
registered family builds a shape, a model whose parameter count flops predicts, is accepted by
the sweep schema, and is offered by the single-run CLI; a name outside it is refused by each."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from pipeline.config import SweepError, parse_sweep
from pipeline.train.cli import build_parser
from pipeline.vocab import flops
from pipeline.vocab.families import (
    FAMILY_REGISTRY,
    OBJECTIVES,
    ShapeError,
    family_names,
    make_config,
)


def _runs_sweep(family: str) -> str:
    image = ({"shape": {"patch_size": 2}, "data": {"corpus": "images:digits"}}
             if family in FAMILY_REGISTRY and FAMILY_REGISTRY[family].objective.images
             else {})
    return yaml.safe_dump({"name": "t", "kind": "runs", "family": family, **image,
                           "runs": [{"n_layer": 1, "d_model": 32, "tokens": 5e5}]})


def test_the_names_are_derived_from_the_registry() -> None:
    assert family_names() == tuple(FAMILY_REGISTRY) == ("gpt", "llama", "bert", "vit")
    family_option = next(a for a in build_parser()._actions if a.dest == "family")
    assert tuple(family_option.choices) == family_names()
    assert {f.objective.name for f in FAMILY_REGISTRY.values()} == set(OBJECTIVES)
    assert all(f.name == name for name, f in FAMILY_REGISTRY.items())


@pytest.mark.parametrize("family", sorted(FAMILY_REGISTRY))
def test_every_registered_family_builds_plans_and_trains(family: str) -> None:
    torch = pytest.importorskip("torch")
    from pipeline.model import build_model

    image = FAMILY_REGISTRY[family].objective.images
    cfg = make_config(family, 2, 32, vocab_size=10 if image else 256, seq_len=16, head_dim=8,
                      **({"image_size": 8, "patch_size": 2, "channels": 1} if image else {}))
    assert cfg.family == family
    model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == flops.params_total(cfg)
    if image:
        x, y = torch.zeros(1, 1, 8, 8), torch.zeros(1, dtype=torch.long)
    else:
        x = y = torch.zeros(1, 16, dtype=torch.long)
    out = model(x, y)  # (logits, loss) with targets
    assert torch.isfinite(out[1])
    assert parse_sweep(_runs_sweep(family)).family == family
    assert build_parser().parse_args(["--family", family]).family == family


def test_an_unregistered_family_is_refused_everywhere() -> None:
    with pytest.raises(ShapeError, match="unknown family"):
        make_config("mamba", 2, 32, vocab_size=256, seq_len=16)
    with pytest.raises(SweepError, match="family"):
        parse_sweep(_runs_sweep("mamba"))
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--family", "mamba"])


def test_gqa_is_one_group_size_across_a_sweep() -> None:
    """LLaMA sizes of one sweep share n_heads / n_kv_heads = shape.gqa_ratio; a shape whose
    head count the ratio does not divide is left out, with the reason (it would fall back to
    another group: 17 heads -> 1 KV head)."""
    from pathlib import Path

    from pipeline.config import load_sweep
    from pipeline.planner import expand

    gpu = Path(__file__).resolve().parent.parent / "sweeps" / "chinchilla_gpu.yaml"
    cfg = load_sweep(gpu)
    specs = expand(cfg, gpu).specs
    assert {s.model.n_heads // s.model.n_kv_heads for s in specs} == {cfg.shape.gqa_ratio}
    assert all(s.model.n_heads % s.model.n_kv_heads == 0 for s in specs)

    sweep = textwrap.dedent("""
        name: gqa
        kind: grid
        family: llama
        shape: {head_dim: 16, gqa_ratio: 2}
        data: {seq_len: 32}
        grid:
          sizes: {shapes: [{n_layer: 1, d_model: 32}, {n_layer: 1, d_model: 48}]}
          tokens: [20000]
    """)
    plan = expand(parse_sweep(sweep, "gqa.yaml"), ".", 256)
    assert [(s.model.n_heads, s.model.n_kv_heads) for s in plan.specs] == [(2, 1)]
    assert [(k.label, k.reason) for k in plan.skipped] == [
        ("shape n_layer=1 d_model=48", "n_heads=3 is not a multiple of shape.gqa_ratio=2 "
         "(GQA groups of 2 query heads per KV head at every size)")]
