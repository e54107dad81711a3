"""Plans that tell the truth before anything runs: each run's peak memory (measured against
real training steps), gradient accumulation that fits it (same update), and dry runs that
answer for a GPU sweep on this CPU machine in seconds, with the assumption they used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipeline.config import SweepError, load_sweep
from pipeline.estimate.memory import GIB, micro_batch_to_fit, training_memory
from pipeline.planner import expand
from pipeline.train import train
from pipeline.vocab.families import make_config
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

ROOT = Path(__file__).resolve().parent.parent
GPU_SWEEP = ROOT / "sweeps" / "chinchilla_gpu.yaml"

# One training step in a fresh process: the growth of its peak resident memory over what
# the model and the batch held before the step, against the estimate less the weights
# (already resident). Printed as JSON.
MEASURE = textwrap.dedent("""
    import json, sys, torch
    torch.set_num_threads(1)
    from pipeline.vocab.families import make_config
    from pipeline.model import Transformer
    from pipeline.vocab.spec import RunSpec, DataSpec, TrainSpec
    from pipeline.train import make_optimizer
    family, L, d, V, T, B, hd = sys.argv[1:]
    cfg = make_config(family, int(L), int(d), vocab_size=int(V), seq_len=int(T), head_dim=int(hd))
    spec = RunSpec(sweep="m", model=cfg, data=DataSpec(), train=TrainSpec(batch_size=int(B)),
                   steps=1)
    model = Transformer(cfg)
    opt = make_optimizer(model, spec, torch.device("cpu"))
    x = torch.randint(0, int(V), (int(B), int(T)))
    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    # The high-water mark starts at the current RSS (Linux >= 4.0): ru_maxrss would also
    # hold the parent's RSS, which a forked child carries until it execs (pytest's, grown
    # by earlier tests, once read as 1.5x the step).
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS")
    _, loss = model(x, x)
    loss.backward()
    opt.step()
    print(json.dumps({"grown": status("VmHWM") - before}))
""")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("shape", [
    ("gpt", 1, 64, 256, 512, 64, 16),    # activations of a long context: 99k parameters
    ("llama", 1, 64, 1024, 256, 64, 16),  # logits of a larger vocabulary, SwiGLU, RoPE, GQA
], ids=["gpt", "llama"])
def test_memory_estimate_brackets_a_measured_training_step(shape: tuple) -> None:
    family, L, d, V, T, B, hd = shape
    done = subprocess.run([sys.executable, "-c", MEASURE, *map(str, shape)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    grown = json.loads(done.stdout)["grown"]
    est = training_memory(make_config(family, L, d, vocab_size=V, seq_len=T, head_dim=hd), B,
                          bf16=False)
    ratio = grown / (est.total - est.weights)
    # Measured here 0.76 (gpt) and 0.91 (llama); 0.76-1.10 on eight shapes from 80 MiB to
    # 1.9 GiB (benchmarks/perf/bench_memory.py, BENCHMARKS.md). The band leaves room for the
    # allocator and for RSS's variation between runs (up to 15% seen on one shape).
    assert 0.6 < ratio < 1.2, (grown, est)


def test_micro_batches_train_the_same_run() -> None:
    cfg = make_config("gpt", 1, 16, vocab_size=256, seq_len=32, head_dim=8)
    losses = {}
    for micro in (0, 2):
        spec = RunSpec(sweep="micro", model=cfg, data=DataSpec(max_bytes=300_000),
                       train=TrainSpec(batch_size=8), steps=60,
                       exec=ExecSpec(micro_batch_size=micro))
        losses[micro] = (spec.run_id, train(spec).final_val_loss)
    assert losses[0][0] == losses[2][0]  # an execution detail: the same run
    # 4 passes of 2 sequences: the same update up to float rounding (measured 7e-8).
    assert losses[2][1] == pytest.approx(losses[0][1], rel=1e-5)


def test_micro_batch_auto_halves_until_the_step_fits() -> None:
    cfg = make_config("llama", 2, 128, vocab_size=32000, seq_len=2048, head_dim=64)
    whole = training_memory(cfg, 64, bf16=True).total
    memory = whole / 5  # room for about a fifth of the batch
    micro = micro_batch_to_fit(cfg, 64, True, memory)
    assert training_memory(cfg, micro, True).total <= 0.9 * memory
    assert training_memory(cfg, 2 * micro, True).total > 0.9 * memory
    assert micro_batch_to_fit(cfg, 64, True, 10 * whole) == 64  # fits: one pass
    assert micro_batch_to_fit(cfg, 24, True, 1.0) == 3  # odd: cannot halve further


def test_the_gpu_sweep_plans_in_seconds_here_with_its_assumptions(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI",)}
    env["CUDA_VISIBLE_DEVICES"] = ""  # as on this machine: no GPU, whatever the runner has
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pipeline.sweep", str(GPU_SWEEP), "--dry-run",
                           "--json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    wall = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-3000:]
    assert wall < 15, wall  # it builds no model (it once asked for a 67 GB logits tensor)
    assert "989 TFLOP/s peak (H100 SXM dense bf16, assumed) x MFU 0.3" in done.stderr
    assert "checked against 80.0 GiB (declared" in done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert len(runs) == 42
    for r in runs:
        assert r["est_seconds"] > 0
        assert 0 < r["peak_memory_bytes"] <= 0.9 * 80 * GIB
        assert 256 % r["micro_batch_size"] == 0
    # The micro-batches are what make it fit: 256 sequences of 2048 tokens in one pass would
    # not (the largest run alone would hold ~1 TiB).
    spec = expand(load_sweep(GPU_SWEEP), GPU_SWEEP).specs[-1]
    assert training_memory(spec.model, 256, True).total > 80 * GIB
    # A stated device instead of the assumption.
    given = subprocess.run([sys.executable, "-m", "pipeline.sweep", str(GPU_SWEEP), "--dry-run",
                            "--device-peak", "312", "--mfu", "0.4"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    assert given.returncode == 0, given.stderr[-3000:]
    assert "312 TFLOP/s peak (given) x MFU 0.4" in given.stdout


def _tiny(tmp_path: Path, resources: str) -> Path:
    src = (ROOT / "tests" / "data" / "sweeps" / "tiny.yaml").read_text()
    path = tmp_path / "tiny.yaml"
    path.write_text(src.replace("resources:\n  num_cpus: 1\n",
                                f"resources:\n  num_cpus: 1\n{resources}"))
    return path


def test_runs_that_cannot_fit_are_refused_before_anything_starts(tmp_path: Path) -> None:
    sweep = _tiny(tmp_path, "  device_memory_gb: 0.0001\n")  # 105 KiB: nothing fits
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    plan = expand(load_sweep(sweep), sweep)
    for extra in (["--dry-run", "--no-estimate"], []):
        done = subprocess.run([sys.executable, "-m", "pipeline.sweep", str(sweep), *extra],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        for spec in plan.specs:
            assert f"run {spec.run_id} (L1 d" in done.stderr
        assert "more than 90% of the 104.9 KiB of its device (declared)" in done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "mlflow.db").exists()  # refused before the ledger was touched


@pytest.mark.parametrize("resources, message", [
    ("  micro_batch_size: auto\n", "micro_batch_size: auto needs device_memory_gb"),
    ("  micro_batch_size: 3\n", "does not divide train.batch_size=4"),
    ("  workers_per_run: 3\n", r"workers_per_run: does not divide train.batch_size=4 \(each "
                               "worker trains an equal share"),
    ("  workers_per_run: 2\n  micro_batch_size: 4\n", "micro_batch_size: does not divide "
                                                      "the sequences each of its workers takes"),
    ("  sharding: fsdp\n", "sharding: fsdp needs workers_per_run > 1"),
], ids=["auto-without-memory", "not-a-divisor", "workers-not-a-divisor",
        "micro-not-a-divisor-of-a-share", "fsdp-with-one-worker"])
def test_micro_batch_settings_are_checked(tmp_path: Path, resources: str, message: str) -> None:
    with pytest.raises(SweepError, match=message):
        load_sweep(_tiny(tmp_path, resources))


def test_a_fixed_micro_batch_reaches_every_run(tmp_path: Path) -> None:
    sweep = _tiny(tmp_path, "  micro_batch_size: 2\n")
    (tmp_path / "plain").mkdir()
    plain = _tiny(tmp_path / "plain", "")
    specs = expand(load_sweep(sweep), sweep).specs
    assert {s.exec.micro_batch_size for s in specs} == {2}
    assert [s.run_id for s in specs] == [s.run_id for s in expand(load_sweep(plain), plain).specs]


def test_a_plan_in_two_precisions_is_timed_with_a_curve_for_each() -> None:
    """bf16 and fp32 runs of one plan (as sweeps/bf16_parity.yaml) are timed from their own
    precision's measured steps, not from whichever precision a shape was measured in first;
    evaluations are counted as the trainer makes them."""
    from dataclasses import replace

    from pipeline.estimate.calibration import Calibration, Curve, calibrate

    cfg = make_config("gpt", 1, 16, vocab_size=64, seq_len=16, head_dim=8)
    fp32 = RunSpec(sweep="p", model=cfg, data=DataSpec(),
                   train=TrainSpec(batch_size=4, precision="fp32"), steps=10)
    bf16 = replace(fp32, train=replace(fp32.train, precision="bf16"))
    cal = calibrate([fp32, bf16], steps=1)
    assert set(cal.curves) == {"fp32", "bf16"}
    # Each run reads its own curve: with made-up curves 1 s and 3 s per step at this shape.
    flops_per_step = cal.curves["fp32"].flops_per_step
    made_up = Calibration({"fp32": Curve(flops_per_step, [1.0]),
                           "bf16": Curve(flops_per_step, [3.0])})
    # 10 steps, evaluation every 10 // 8 = 1 step: 9 along the run and the final one, each
    # eval_batches forward passes of 1/3 of a step.
    evals = 10 * fp32.train.eval_batches / 3
    assert made_up.seconds(fp32) == pytest.approx(10 + evals)
    assert made_up.seconds(bf16) == pytest.approx(3 * (10 + evals))


def test_time_is_extrapolated_with_a_bounded_slope() -> None:
    """Two timings of near-equal shapes give no slope (time ∝ FLOPs from the nearer one);
    further apart, the end slope is used within SLOPE_RANGE. Once, the bf16_parity plan's
    shapes, 8% apart, gave a slope of -10 and a 6-minute run was timed at 6 s."""
    from pipeline.estimate.calibration import SLOPE_RANGE, _interp

    assert _interp(2e9, [1e9, 1.05e9], [0.10, 0.06]) == pytest.approx(0.06 * 2e9 / 1.05e9)
    assert _interp(1e9, [1e9, 4e9], [0.1, 0.2]) == pytest.approx(0.1)  # measured: as is
    assert _interp(2e9, [1e9, 4e9], [0.1, 0.2]) == pytest.approx(0.1 * 2 ** 0.5)  # inside
    flat = _interp(16e9, [1e9, 4e9], [0.1, 0.1])  # slope 0 -> the lower bound
    assert flat == pytest.approx(0.1 * 4 ** SLOPE_RANGE[0])
    steep = _interp(0.25e9, [1e9, 4e9], [0.1, 10.0])  # slope 3.3 -> the upper bound
    assert steep == pytest.approx(0.1 * 0.25 ** SLOPE_RANGE[1])
