"""Precision: the rule that resolves `precision: auto` (pipeline.vocab.recipe.resolve_auto), the CPU
flags it reads, the fp32 output head under bf16 autocast, and the planner and the single-run
CLI applying the rule (every earlier run keeps its id)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

import pipeline.planner as planner
import pipeline.train.cli as train_cli
from pipeline.config import parse_sweep
from pipeline.estimate.device import cpu_has_native_bf16
from pipeline.model import build_model
from pipeline.vocab.families import make_config
from pipeline.vocab.recipe import AUTO_BF16_MIN_D_MODEL, precision_label, resolve_auto
from pipeline.vocab.spec import DataSpec, RunSpec, TrainSpec

W = AUTO_BF16_MIN_D_MODEL


@pytest.mark.parametrize("given, device, family, d_model, cpu_bf16, resolved", [
    (("auto", "autocast"), "cpu", "gpt", W, True, ("bf16", "fp32")),
    (("auto", "autocast"), "cpu", "gpt", 2 * W, True, ("bf16", "fp32")),
    (("auto", "autocast"), "cpu", "gpt", W - 1, True, ("auto", "autocast")),  # 1.00-1.08x there
    (("auto", "autocast"), "cpu", "gpt", W, False, ("auto", "autocast")),  # emulated bf16
    (("auto", "autocast"), "cpu", "llama", W, True, ("auto", "autocast")),  # not measured
    (("auto", "autocast"), "cuda", "gpt", W, True, ("auto", "autocast")),  # bf16 as before
    (("fp32", "autocast"), "cpu", "gpt", W, True, ("fp32", "autocast")),  # asked for
    (("fp32", "fp32"), "cuda", "gpt", W, True, ("fp32", "autocast")),  # no head to keep
    (("auto", "fp32"), "cpu", "gpt", 64, True, ("auto", "autocast")),  # fp32 there
    (("auto", "fp32"), "cuda", "gpt", 64, False, ("auto", "fp32")),  # bf16 there
    (("bf16", "fp32"), "cpu", "gpt", 32, False, ("bf16", "fp32")),
    (("bf16", "autocast"), "cpu", "gpt", W, True, ("bf16", "autocast")),
])
def test_auto_resolves_to_bf16_with_an_fp32_head_only_where_measured(
        given: tuple[str, str], device: str, family: str, d_model: int, cpu_bf16: bool,
        resolved: tuple[str, str]) -> None:
    assert resolve_auto(*given, device, family, d_model, cpu_bf16) == resolved


@pytest.mark.parametrize("precision, head, device, label", [
    ("auto", "autocast", "cpu", "fp32"), ("auto", "autocast", "cuda", "bf16"),
    ("bf16", "fp32", "cpu", "bf16, head fp32"), ("fp32", "fp32", "cpu", "fp32"),
])
def test_precision_label(precision: str, head: str, device: str, label: str) -> None:
    assert precision_label(precision, head, device) == label


@pytest.mark.parametrize("flags, native", [
    ("fpu sse2 avx2 avx512f avx512_bf16 amx_tile", True), ("fpu amx_bf16", True),
    ("fpu sse2 avx2 avx512f", False), ("fpu avx512_bf16x", False),
])
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path: Path, flags: str,
                                                native: bool) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: x\nflags\t\t: {flags}\n\n")
    assert cpu_has_native_bf16(str(info)) is native
    assert cpu_has_native_bf16(str(tmp_path / "absent")) is False


def test_the_fp32_head_keeps_the_logits_in_fp32_under_bf16_autocast() -> None:
    cfg = make_config("gpt", 1, 32, vocab_size=256, seq_len=16, head_dim=8)
    torch.manual_seed(0)
    model = build_model(cfg, fp32_head=True)
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        head32, loss32 = model(x, x)
        model.fp32_head = False
        head16, loss16 = model(x, x)
    assert head32.dtype == torch.float32 and head16.dtype == torch.bfloat16
    assert loss32.dtype == loss16.dtype == torch.float32
    # the same model: the losses differ by the rounding of the logits only
    assert abs(loss32.item() - loss16.item()) < 0.02
    # without autocast the flag changes nothing, bit for bit
    plain = model(x, x)[1]
    model.fp32_head = True
    assert torch.equal(model(x, x)[1], plain)


def test_head_precision_enters_the_run_id_only_away_from_its_default() -> None:
    cfg = make_config("gpt", 1, 32, vocab_size=256, seq_len=16, head_dim=8)
    spec = RunSpec(sweep="s", model=cfg, data=DataSpec(), train=TrainSpec(precision="bf16"),
                   steps=10)
    assert "head_precision" not in spec.identity()["train"]
    fp32_head = replace(spec, train=replace(spec.train, head_precision="fp32"))
    assert fp32_head.identity()["train"]["head_precision"] == "fp32"
    assert fp32_head.run_id != spec.run_id


GRID = {
    "name": "precision", "kind": "grid", "family": "gpt", "shape": {"head_dim": 32},
    "data": {"corpus": "stdlib", "tokenizer": "bytes", "seq_len": 32},
    "train": {"batch_size": 8, "lr": 3e-3, "seeds": [0]},
    "resources": {"num_cpus": 1, "num_gpus": 0},
    "grid": {"sizes": {"shapes": [{"n_layer": 1, "d_model": 64},
                                  {"n_layer": 1, "d_model": W}]},
             "tokens": [2e5]},
}


@pytest.mark.parametrize("native", [True, False])
def test_the_planner_resolves_auto_by_the_cpu_and_the_width(native: bool) -> None:
    plan = planner.expand(parse_sweep(yaml.safe_dump(GRID), "precision.yaml"), cpu_bf16=native)
    by_width = {s.model.d_model: s.train for s in plan.specs}
    assert (by_width[64].precision, by_width[64].head_precision) == ("auto", "autocast")
    wide = (by_width[W].precision, by_width[W].head_precision)
    assert wide == (("bf16", "fp32") if native else ("auto", "autocast"))


def test_a_gpu_sweep_keeps_auto() -> None:
    doc = {**GRID, "resources": {"num_cpus": 1, "num_gpus": 1}}
    plan = planner.expand(parse_sweep(yaml.safe_dump(doc), "precision.yaml"), cpu_bf16=True)
    assert {(s.train.precision, s.train.head_precision) for s in plan.specs} == {
        ("auto", "autocast")}


def test_a_report_on_another_cpu_keeps_the_runs_planned_on_either() -> None:
    """planned_run_ids (what --sweep-file keeps) holds the ids of both kinds of CPU."""
    cfg = parse_sweep(yaml.safe_dump(GRID), "precision.yaml")
    by_cpu = {}
    for native in (True, False):
        by_cpu[native] = {s.run_id for s in planner.expand(cfg, cpu_bf16=native).specs}
    assert by_cpu[True] != by_cpu[False]
    assert planner.planned_run_ids(cfg) == by_cpu[True] | by_cpu[False]


@pytest.mark.parametrize("d_model, native, resolved", [
    (W, True, ("bf16", "fp32")), (W, False, ("auto", "autocast")), (64, True, ("auto", "autocast")),
])
def test_the_single_run_cli_resolves_auto(d_model: int, native: bool,
                                          resolved: tuple[str, str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    args = train_cli.build_parser().parse_args(
        ["--family", "gpt", "--n-layer", "1", "--d-model", str(d_model), "--head-dim", "32",
         "--tokens", "1e4", "--device", "cpu"])
    monkeypatch.setattr(train_cli, "cpu_has_native_bf16", lambda: native)  # the CPU it trains on
    spec = train_cli.spec_from_args(args)
    assert (spec.train.precision, spec.train.head_precision) == resolved
