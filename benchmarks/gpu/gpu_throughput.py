"""GPU training throughput and MFU of the real trainer (bf16), unattended, in under 5 minutes.

    python benchmarks/gpu/gpu_throughput.py                    # needs CUDA; exits 2 without it
    python benchmarks/gpu/gpu_throughput.py --json out.json    # also write the figures as JSON

What it measures, on the first CUDA device:
  1. the bf16 matmul peak (8192^3, measured) next to the nominal dense bf16 peak if known;
  2. a GPT-2-small-sized model (12 layers, d_model 768, 12 heads, seq 1024, vocab 50257)
     trained by pipeline.train.train() in bf16 (precision "auto" = bf16 autocast on CUDA),
     as the trainer is, then with fused AdamW, then with torch.compile of the model (each
     variant a patch for that measurement only); tokens/s and MFU (6N and exact FLOPs)
     against the measured and the nominal peak. Goal: >= 45% MFU on a Hopper-class GPU;
  3. a ladder of small models (the CPU ladder and two larger ones), one at a time;
  4. fractional packing: 4 tiny-model runs at once as Ray tasks with num_gpus 0.25 on one
     GPU, against one such run alone (aggregate throughput ratio).
Token data are synthetic (uniform random ids): throughput does not depend on the text, and
the GPT-2 vocabulary needs no tokenizer. Each measurement drops a warm-up window and
reports the median of the timed windows (the trainer syncs the device once per window).
Self-checks: every run's losses are finite, the device is really used, and a time budget
skips the remaining parts (saying so) rather than overrun.

--allow-cpu runs the same code paths on the CPU with tiny sizes (a smoke test, no figures).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from pipeline.data import TokenData
from pipeline.vocab import flops, keys
from pipeline.vocab.families import make_config
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

# benchmarks/, where the shared helpers (benchlib, variants) are: imported lazily, here and
# in the Ray tasks of packing(), which put it on their own path
HELPERS = str(Path(__file__).resolve().parents[1])
sys.path.insert(0, HELPERS)

# Nominal dense bf16 peaks (TFLOP/s, no sparsity), from the vendors' data sheets.
NOMINAL_BF16_TFLOPS = {
    "H100 SXM": 989.0, "H100 80GB HBM3": 989.0, "H100 NVL": 835.0, "H100 PCIe": 756.0, "H200": 989.0, "GH200": 989.0,
    "H800": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0,
}
GOAL_MFU = 0.45


def nominal_peak(name: str) -> float | None:
    upper = name.upper()
    for key in sorted(NOMINAL_BF16_TFLOPS, key=len, reverse=True):
        parts = key.upper().split()
        if all(p in upper for p in parts):
            return NOMINAL_BF16_TFLOPS[key] * 1e12
    return None


def synthetic_data(vocab: int, tokens: int = 2_000_000, seed: int = 0) -> TokenData:
    rng = np.random.default_rng(seed)
    dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
    arr = rng.integers(0, vocab, size=tokens + tokens // 10, dtype=np.int64).astype(dtype)
    train, val = arr[:tokens], arr[tokens:]
    return TokenData(train=train, val=val, vocab_size=vocab, fingerprint="synthetic",
                     corpus_fingerprint="synthetic", train_bytes=len(train),
                     val_bytes=len(val))


def matmul_peak(device: torch.device, n: int, reps: int) -> float:
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    rates = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(10):
            a @ b
        sync(device)
        rates.append(10 * 2.0 * n**3 / (time.perf_counter() - t))
    return statistics.median(rates)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def spec_for(cfg, batch: int, log: int, windows: int, device: str) -> RunSpec:
    steps = log * (windows + 1)
    return RunSpec(
        sweep="gpu-bench", model=cfg, data=DataSpec(),
        train=TrainSpec(batch_size=batch, precision="auto", lr=6e-4, warmup_steps=0,
                        eval_batches=1, eval_interval=steps + 1),
        steps=steps, exec=ExecSpec(threads=1, device=device, log_interval=log),
    )


def time_train(spec: RunSpec, data: TokenData, patches: tuple = ()) -> dict:
    """tokens/s (median of the windows after the first) of pipeline.train.train()."""
    from benchlib import patched

    from pipeline.train import NullTracker, train

    log = spec.exec.log_interval
    stamps: dict[int, float] = {}
    tracker = NullTracker()
    t0 = time.perf_counter()
    with patched(*patches):
        result = train(spec, tracker, data=data,
                       on_step=lambda done: stamps.__setitem__(done, time.time()))
    wall = time.perf_counter() - t0
    # At the end of each log window the trainer copies the losses to the host (a device
    # sync) before on_step: window-boundary stamps are synchronised.
    n_tok = log * spec.train.batch_size * spec.model.seq_len
    ends = sorted(s for s in stamps if s % log == 0)
    rates = [n_tok / (stamps[b] - stamps[a]) for a, b in zip(ends, ends[1:], strict=False)]
    losses = [m[keys.TRAIN_LOSS] for _, m in tracker.metrics if keys.TRAIN_LOSS in m]
    ok = all(math.isfinite(x) for x in losses) and result.status == keys.STATUS_FINISHED
    # Timed span: from the end of the warm-up window (step `log`) to the last step.
    return {"tokens_per_s": statistics.median(rates) if rates else float("nan"),
            "timed_tokens": n_tok * len(rates),
            "timed_from": stamps[ends[0]] if ends else 0.0,
            "timed_to": stamps[ends[-1]] if ends else 0.0,
            "windows": rates, "wall_s": wall, "losses_finite": ok,
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None}


def mfu_row(label: str, cfg, tps: float, peak: float, nominal: float | None) -> dict:
    row = {"model": label, "N": flops.params_total(cfg), "tokens_per_s": round(tps)}
    for conv in ("6nd", "exact"):
        achieved = flops.flops_per_token(cfg, conv) * tps
        row[f"tflops_{conv}"] = round(achieved / 1e12, 1)
        row[f"mfu_{conv}_measured_peak"] = round(achieved / peak, 3)
        if nominal:
            row[f"mfu_{conv}_nominal_peak"] = round(achieved / nominal, 3)
    return row


def _compile_patch():
    import pipeline.train as train_module

    original = train_module.Transformer

    def compiled(cfg):
        return torch.compile(original(cfg))

    return ((train_module, "Transformer", compiled),)


def _fused_patch():
    import variants

    return variants.ADAMW_FUSED


def packing(device: str, smoke: bool, steps_log: int) -> dict:
    """Aggregate tokens/s of 4 concurrent Ray tasks with num_gpus 0.25 vs 1 task alone."""
    import ray

    cfg = make_config("gpt", 8, 144, vocab_size=256, seq_len=128, head_dim=16)

    def one(seed: int, start_at: float) -> dict:
        import sys as _sys

        _sys.path.insert(0, HELPERS)
        torch.zeros(1, device=device)  # CUDA context first: not inside the timed windows
        data = synthetic_data(256, seed=seed)
        time.sleep(max(0.0, start_at - time.time()))  # all packed tasks start together
        r = time_train(spec_for(cfg, 32, steps_log, 3, device), data)
        if not r["losses_finite"]:
            raise RuntimeError("non-finite loss in a packed run")
        return r

    res = {"num_gpus": 0.0 if smoke else 0.25, "num_cpus": 1}
    ray.init(num_cpus=4 if not smoke else 2, num_gpus=0 if smoke else 1,
             include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(one).options(**res)
        t = time.perf_counter()
        alone = ray.get(task.remote(0, time.time()))
        t_alone = time.perf_counter() - t
        t = time.perf_counter()
        start_at = time.time() + 15.0  # time for 4 workers to start and set up
        packed = ray.get([task.remote(s, start_at) for s in range(4)])
        t_packed = time.perf_counter() - t
    finally:
        ray.shutdown()
    # Aggregate = timed tokens of all tasks / the span from the first timed window's start to
    # the last one's end (tasks that do not overlap in time are not counted as parallel).
    span = max(r["timed_to"] for r in packed) - min(r["timed_from"] for r in packed)
    aggregate = sum(r["timed_tokens"] for r in packed) / span
    overlap = min(r["timed_to"] for r in packed) - max(r["timed_from"] for r in packed)
    return {"model": f"gpt L8 d144 ({flops.params_total(cfg):,} params), batch 32 x 128",
            "alone_tokens_per_s": round(alone["tokens_per_s"]),
            "packed_tokens_per_s_each": [round(r["tokens_per_s"]) for r in packed],
            "packed_aggregate_tokens_per_s": round(aggregate),
            "aggregate_ratio": round(aggregate / alone["tokens_per_s"], 2),
            "timed_windows_overlap_s": round(overlap, 1), "timed_span_s": round(span, 1),
            "wall_alone_s": round(t_alone, 1), "wall_packed_s": round(t_packed, 1)}


def run_ladder(skipped: list[str], smoke: bool, device: torch.device, peak: float,
               nominal: float | None, left) -> list[dict]:
    """MFU of a ladder of small GPT models (20k to 85M parameters), while time is left."""
    ladder = [("20k", 1, 32, 128), ("100k", 3, 48, 128), ("500k", 4, 96, 128),
              ("2M", 8, 144, 128), ("14M", 8, 384, 256), ("85M", 12, 768, 256)]
    if smoke:
        ladder = ladder[:2]
    data_small = synthetic_data(256, tokens=200_000 if smoke else 5_000_000)
    rows: list[dict] = []
    for label, n_layer, d_model, seq in ladder:
        if left() < 45:
            skipped.append(f"ladder {label}: time budget")
            continue
        cfg = make_config("gpt", n_layer, d_model, vocab_size=256, seq_len=seq,
                          head_dim=16 if d_model < 384 else 64)
        r = time_train(spec_for(cfg, 4 if smoke else 64, 2 if smoke else 10, 3, device.type),
                       data_small)
        row = mfu_row(f"gpt {label} (L{n_layer} d{d_model}, seq {seq}, batch "
                      f"{4 if smoke else 64})", cfg,
                      r["tokens_per_s"], peak, nominal)
        row["losses_finite"] = r["losses_finite"]
        rows.append(row)
        print(json.dumps(row))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the results to this JSON file too")
    p.add_argument("--budget-s", type=float, default=270.0,
                   help="skip remaining parts once this much time has passed")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    p.add_argument("--allow-cpu", action="store_true", help="smoke test on the CPU, tiny sizes")
    args = p.parse_args(argv)
    start = time.perf_counter()
    smoke = args.allow_cpu
    if not torch.cuda.is_available() and not smoke:
        print("gpu_throughput: no CUDA device is available (torch "
              f"{torch.__version__}, cuda {torch.version.cuda}); this benchmark needs a GPU. "
              "Nothing was measured.", file=sys.stderr)
        return 2
    device = torch.device("cpu" if smoke else "cuda")
    torch.backends.cuda.matmul.allow_tf32 = True  # fp32 parts (norms' matmuls, if any)
    name = "cpu (smoke test)" if smoke else torch.cuda.get_device_name(device)
    out: dict = {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda,
                 "date": time.strftime("%Y-%m-%d %H:%M:%S"), "skipped": []}
    if not smoke:
        cap = torch.cuda.get_device_capability(device)
        out["capability"] = f"{cap[0]}.{cap[1]}"
    print(f"# GPU throughput ({name}; torch {torch.__version__}, CUDA {torch.version.cuda})")

    def left() -> float:
        return args.budget_s - (time.perf_counter() - start)

    peak = matmul_peak(device, 512 if smoke else 8192, 3 if smoke else 10)
    nominal = None if smoke else nominal_peak(name)
    out["peak_bf16_tflops_measured"] = round(peak / 1e12, 1)
    out["peak_bf16_tflops_nominal"] = nominal and nominal / 1e12
    print(f"bf16 matmul peak: measured {peak / 1e12:.1f} TFLOP/s"
          + (f", nominal {nominal / 1e12:.0f}" if nominal else ", nominal unknown"))

    # 2. GPT-2 small
    if smoke:
        big = make_config("gpt", 2, 64, vocab_size=50257, seq_len=64, head_dim=32)
        batch, log = 2, 2
    else:
        big = make_config("gpt", 12, 768, vocab_size=50257, seq_len=1024, head_dim=64)
        batch, log = 16, 20
    data = synthetic_data(50257, tokens=200_000 if smoke else 20_000_000)
    variants_big = [("trainer as is (bf16 autocast, eager)", ()),
                    ("+ fused AdamW", _fused_patch())]
    if not args.no_compile:
        variants_big.append(("+ torch.compile (model)", _compile_patch()))
    out["gpt2_small"] = []
    for label, patches in variants_big:
        if left() < 60:
            out["skipped"].append(f"GPT-2 small {label}: time budget")
            continue
        r = time_train(spec_for(big, batch, log, 3, device.type), data, patches)
        row = mfu_row(f"GPT-2 small, {label}", big, r["tokens_per_s"], peak, nominal)
        row.update(losses_finite=r["losses_finite"], wall_s=round(r["wall_s"], 1))
        out["gpt2_small"].append(row)
        print(json.dumps(row))
    best = max((r.get("mfu_6nd_nominal_peak", r["mfu_6nd_measured_peak"])
                for r in out["gpt2_small"]), default=float("nan"))
    out["goal_mfu_met"] = bool(best >= GOAL_MFU)
    print(f"GPT-2 small best MFU (6N, nominal peak if known): {best:.1%}; goal {GOAL_MFU:.0%}: "
          + ("met" if out["goal_mfu_met"] else "NOT met"))

    # 3. ladder of small models
    out["ladder"] = run_ladder(out["skipped"], smoke, device, peak, nominal, left)

    # 4. fractional packing with Ray
    if left() < 40:
        out["skipped"].append("Ray packing: time budget")
    else:
        try:
            out["packing"] = packing(device.type, smoke, 2 if smoke else 100)
            print(json.dumps(out["packing"]))
        except Exception as e:  # noqa: BLE001 - reported, the rest of the results stand
            out["packing"] = {"error": f"{type(e).__name__}: {e}"}
            print(f"Ray packing failed: {e}", file=sys.stderr)

    out["elapsed_s"] = round(time.perf_counter() - start, 1)
    checks = [r.get("losses_finite", False) for r in out["gpt2_small"] + out["ladder"]]
    out["self_check_passed"] = bool(checks) and all(checks) and "error" not in out.get(
        "packing", {})
    print(f"elapsed {out['elapsed_s']}s; skipped: {out['skipped'] or 'nothing'}; "
          f"self-check {'passed' if out['self_check_passed'] else 'FAILED'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if out["self_check_passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
