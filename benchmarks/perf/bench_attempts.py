"""Optimisation attempts on the trainer's step, each measured side by side with the baseline.

    python benchmarks/perf/bench_attempts.py              # ~7 minutes on 2 cores
    python benchmarks/perf/bench_attempts.py --quick      # one round, ~3 minutes

Every variant runs the real pipeline.train.train() (one thread), with one thing changed by a
patch of pipeline.model / pipeline.train for that measurement only (see variants.py), in
interleaved rounds (A B C A B C ...). Reported: median tokens per CPU-second and the median
over rounds of the per-round ratio to the baseline of that round. Then: host syncs (log
interval), get_batch cost against the step, evaluation and checkpoint cost, and a profile of
the 500k step (which ops dominate). bf16's effect on the loss is bench_bf16_loss.py's job.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from pipeline import checkpoint
from pipeline.data import eval_batches, get_batch
from pipeline.model import Transformer
from pipeline.train import evaluate, make_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import benchlib as bl  # noqa: E402
import variants  # noqa: E402

# (name, precision, patches, families it applies to)
STEP_VARIANTS = [
    ("fp32 (trainer as is)", "fp32", (), ("gpt", "llama")),
    ("fp32 again (A/A control: the noise)", "fp32", (), ("gpt", "llama")),
    ("fp32 + exact GELU", "fp32", variants.EXACT_GELU, ("gpt",)),
    ("fp32 + fused AdamW", "fp32", variants.ADAMW_FUSED, ("gpt", "llama")),
    ("fp32 + for-loop AdamW", "fp32", variants.ADAMW_FORLOOP, ("gpt", "llama")),
    ("fp32 + fused AdamW + foreach clip", "fp32", variants.FUSED_AND_CLIP, ("gpt", "llama")),
    ("fp32, matmuls via oneDNN", "fp32", variants.FP32_MATMUL_ONEDNN, ("gpt",)),
    ("bf16 autocast (trainer as is)", "bf16", (), ("gpt", "llama")),
    ("bf16 + fp32 attention", "bf16", variants.FP32_ATTENTION, ("gpt", "llama")),
    ("bf16 + fp32 attention + exact GELU", "bf16", variants.BOTH, ("gpt",)),
]


def step_variants(family: str, label: str, names: list[str] | None, reps: int,
                  window_s: float, windows: int, data) -> list[dict]:
    n_layer, d_model = next((L, d) for s, L, d in bl.LADDER if s == label)
    cfg = bl.ladder_config(family, n_layer, d_model)
    log = bl.log_interval_for(bl.seconds_per_step(bl.make_spec(cfg, 3), data=data), window_s)
    chosen = [v for v in STEP_VARIANTS if family in v[3] and (names is None or v[0] in names)]
    fns = {}
    for name, precision, patches, _ in chosen:
        def fn(precision=precision, patches=patches):
            spec = bl.make_spec(cfg, 1, precision=precision, log_interval=log)
            return bl.time_train(spec, windows=windows, data=data, patches=patches).tokens_per_s
        fns[name] = fn
    res = bl.interleave(fns, reps)
    base = res[chosen[0][0]]
    rows = []
    for name, values in res.items():
        ratios = [v / b for v, b in zip(values, base, strict=True)]
        rows.append({"model": f"{family} {label}", "variant": name,
                     "tok/s (median, range)": f"{bl.median(values):,.0f} ({bl.spread(values)})",
                     "x baseline (per round)": f"{bl.median(ratios):.3f} ("
                     + ", ".join(f"{r:.2f}" for r in ratios) + ")"})
        print("  " + " | ".join(rows[-1].values()), flush=True)
    return rows


def syncs(label: str, reps: int, data) -> list[dict]:
    """Log interval 1 (a host sync and tracker call every step) vs 10 (default) vs 100."""
    n_layer, d_model = next((L, d) for s, L, d in bl.LADDER if s == label)
    cfg = bl.ladder_config("gpt", n_layer, d_model)
    fns = {}
    for log in (1, 10, 100):
        def fn(log=log):
            spec = bl.make_spec(cfg, 1, log_interval=log)
            return bl.time_train(spec, windows=2, window_steps=100, data=data).tokens_per_s
        fns[f"log_interval {log}"] = fn
    res = bl.interleave(fns, reps)
    base = res["log_interval 10"]
    rows = []
    for name, values in res.items():
        ratios = [v / b for v, b in zip(values, base, strict=True)]
        rows.append({"model": f"gpt {label}", "variant": name,
                     "tok/s (median, range)": f"{bl.median(values):,.0f} ({bl.spread(values)})",
                     "x log_interval 10": f"{bl.median(ratios):.3f}"})
        print("  " + " | ".join(rows[-1].values()), flush=True)
    return rows


def cpu_seconds(fn, reps: int) -> float:
    """Median CPU seconds of fn() over reps calls (after one warm-up call)."""
    fn()
    out = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
    return bl.median(out)


def batch_eval_checkpoint(data, reps: int) -> list[dict]:
    """get_batch, evaluate() and checkpoint.save against one training step, per ladder size."""
    torch.set_num_threads(1)
    B, T = bl.BATCH, bl.SEQ_LEN
    t_batch = cpu_seconds(lambda: [get_batch(data.train, B, T, 0, s) for s in range(100)],
                          reps) / 100
    rows = []
    for label, n_layer, d_model in bl.LADDER:
        cfg = bl.ladder_config("gpt", n_layer, d_model)
        spec = bl.make_spec(cfg, 10, eval_batches=8)
        t_step = 1.0 / bl.time_train(bl.make_spec(cfg, 1, log_interval=3), windows=2,
                                     data=data).tokens_per_s * B * T
        model = Transformer(cfg)
        opt = make_optimizer(model, spec, torch.device("cpu"))
        x, y = get_batch(data.train, B, T, 0, 0)
        model(x, y)[1].backward()
        opt.step()
        evals = eval_batches(data.val, B, T, 8)
        t_eval = cpu_seconds(lambda m=model, e=evals, s=spec: evaluate(m, e, s,
                                                                       torch.device("cpu")),
                             reps) / len(evals)
        big = [(torch.cat([x for x, _ in evals]), torch.cat([y for _, y in evals]))]
        t_eval_one = cpu_seconds(lambda m=model, s=spec, b=big: evaluate(
            m, b, s, torch.device("cpu")), reps) / len(evals)
        with tempfile.TemporaryDirectory() as tmp:
            payload = lambda m=model, o=opt: {  # noqa: E731 - as train() builds it
                "model": m.state_dict(), "optimizer": o.state_dict(),
                "rng": torch.get_rng_state(), "step": 1, "curve": {}, "wall_s": 0.0,
                "train_loss": 0.0, "run_id": "bench"}
            walls = []
            for i in range(reps + 1):
                t = time.perf_counter()
                checkpoint.save(tmp, i + 1, payload())
                walls.append(time.perf_counter() - t)
            t_ckpt = bl.median(walls[1:])
        # Default sweep recipe: 8 evals + the final one, eval_batches (8) batches each.
        rows.append({
            "size": label, "step ms": f"{t_step * 1e3:.1f}",
            "get_batch ms (% of step)": f"{t_batch * 1e3:.3f} ({t_batch / t_step:.1%})",
            "eval batch ms (/ step)": f"{t_eval * 1e3:.1f} ({t_eval / t_step:.2f})",
            "eval as 1 big batch, per batch ms": f"{t_eval_one * 1e3:.1f} "
                                                f"({t_eval_one / t_eval:.2f}x)",
            "checkpoint save ms, wall (/ step)": f"{t_ckpt * 1e3:.1f} ({t_ckpt / t_step:.2f})",
            "eval+ckpt share, 200-step run": f"{eval_share(200, t_step, t_eval, t_ckpt):.1%}",
            "eval+ckpt share, 1000-step run": f"{eval_share(1000, t_step, t_eval, t_ckpt):.1%}",
        })
        print("  " + " | ".join(rows[-1].values()), flush=True)
    return rows


def eval_share(steps: int, t_step: float, t_eval: float, t_ckpt: float,
               evals_per_run: int = 8, batches: int = 8) -> float:
    """Share of a run's time spent in evaluation and checkpoints with the sweep defaults
    (evals_per_run evaluations plus the final one, a checkpoint at each)."""
    n = evals_per_run + 1
    extra = n * (batches * t_eval + t_ckpt)
    return extra / (steps * t_step + extra)


def profile_step(family: str, label: str, precision: str, patches: tuple, data,
                 top: int = 8) -> str:
    n_layer, d_model = next((L, d) for s, L, d in bl.LADDER if s == label)
    cfg = bl.ladder_config(family, n_layer, d_model)
    prof = profile(activities=[ProfilerActivity.CPU])

    def on_step(done: int) -> None:
        if done == 2:
            prof.start()
        elif done == 7:
            prof.stop()

    spec = bl.make_spec(cfg, 8, precision=precision)
    with bl.patched(*patches):
        from pipeline.train import train
        train(spec, None, data=data, on_step=on_step)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    lines = [f"{family} {label} {precision}{' + fp32 attention' if patches else ''}: "
             f"{total / 5 / 1e3:.0f} ms of op self-time per step"]
    for e in events[:top]:
        lines.append(f"    {e.self_cpu_time_total / total:6.1%}  {e.key}")
    return "\n".join(lines)


def compile_check(data) -> str:
    """torch.compile of the 500k gpt step, quickly: compile time and throughput vs eager."""
    cfg = bl.ladder_config("gpt", 4, 96)
    torch.set_num_threads(1)
    B, T = bl.BATCH, bl.SEQ_LEN
    out = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = Transformer(cfg)
        opt = make_optimizer(model, bl.make_spec(cfg, 10), torch.device("cpu"))
        fwd = torch.compile(model) if compiled else model
        t0 = time.perf_counter()
        stamps = []
        for s in range(13):
            x, y = get_batch(data.train, B, T, 0, s)
            fwd(x, y)[1].backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            stamps.append(time.process_time())
            if s == 0:
                first = time.perf_counter() - t0
        rate = 10 * B * T / (stamps[-1] - stamps[2])
        out.append(f"{'compiled' if compiled else 'eager'}: first step {first:.1f}s wall, "
                   f"then {rate:,.0f} tok/s")
    return "torch.compile, gpt 500k fp32: " + "; ".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="one round, fewer variants")
    p.add_argument("--window-s", type=float, default=1.0)
    p.add_argument("--compile", action="store_true", help="also re-check torch.compile")
    args = p.parse_args(argv)
    reps = 1 if args.quick else args.reps
    print(bl.machine_header("Optimisation attempts (1 thread, batch 16 x 128)"))
    data = bl.bench_data()

    print("\n## Step variants (tokens per CPU-second; ratio to the baseline of the same round)")
    rows = []
    rows += step_variants("gpt", "500k", None, reps, args.window_s, 2, data)
    rows += step_variants("llama", "500k", None if not args.quick else [
        "fp32 (trainer as is)", "fp32 again (A/A control: the noise)",
        "bf16 autocast (trainer as is)", "bf16 + fp32 attention"],
        reps, args.window_s, 2, data)
    rows += step_variants("gpt", "20k", [
        "fp32 (trainer as is)", "fp32 again (A/A control: the noise)", "fp32 + exact GELU",
        "fp32 + fused AdamW",
        "fp32 + for-loop AdamW", "fp32 + fused AdamW + foreach clip",
        "bf16 + fp32 attention"], reps, args.window_s, 2, data)
    print()
    print(bl.table(rows, list(rows[0])))

    print("\n## Host syncs: log interval (one .cpu() sync and tracker call per interval)")
    srows = syncs("20k", reps, data)
    print(bl.table(srows, list(srows[0])))

    print("\n## Data, evaluation, checkpoints against one training step (gpt, fp32, CPU time;"
          " checkpoint: wall time incl. fsync)")
    crows = batch_eval_checkpoint(data, 3)
    print(bl.table(crows, list(crows[0])))

    print("\n## Profile of the trainer's step (self time by op, 5 steps)")
    print(profile_step("gpt", "500k", "fp32", (), data))
    print(profile_step("gpt", "500k", "bf16", (), data))
    print(profile_step("gpt", "500k", "bf16", variants.FP32_ATTENTION, data))
    print(profile_step("llama", "500k", "fp32", (), data))
    if args.compile:
        print("\n" + compile_check(data))
    print(f"\nload average at the end: {bl.loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
