"""Training throughput and MFU of the real trainer, for a ladder of sizes and both families.

    python benchmarks/perf/bench_throughput.py            # ~3 minutes on 2 cores

For each (family, size): tokens/s of pipeline.train.train() with one thread in fp32, in bf16
as the trainer does it today (precision="bf16": autocast), and in bf16 with the attention
kernel kept in fp32 (a prototype, see variants.FP32_ATTENTION), measured side by side
(interleaved). MFU = training FLOPs per second / the matmul peak measured in the same run
(a 2048^3 matmul, one thread; fp32 peak for fp32 runs, bf16 peak for bf16 runs), under the
6N and the exact (attention and logits included) FLOP conventions of pipeline.vocab.flops.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.vocab import flops

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import benchlib as bl  # noqa: E402
import variants  # noqa: E402

VARIANTS = {
    "fp32": ("fp32", ()),
    "bf16": ("bf16", ()),  # the trainer as it is: autocast, attention in bf16 too
    "bf16+fp32attn": ("bf16", variants.FP32_ATTENTION),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=1, help="interleaved rounds per model")
    p.add_argument("--window-s", type=float, default=1.5, help="seconds per timing window")
    p.add_argument("--windows", type=int, default=3, help="timed windows per measurement")
    p.add_argument("--families", default="gpt,llama")
    p.add_argument("--sizes", default=",".join(s for s, _, _ in bl.LADDER))
    args = p.parse_args(argv)

    print(bl.machine_header("Training throughput and MFU (1 thread)"))
    print(f"batch {bl.BATCH} x seq_len {bl.SEQ_LEN} tokens per step, bytes vocab 256, "
          f"head_dim 16; tokens/s = median of {args.windows} trainer log windows of "
          f"~{args.window_s}s after a warm-up window, per CPU-second (wall clock in brackets)")
    data = bl.bench_data()
    peak = bl.measure_peak()
    rows = []
    sizes = set(args.sizes.split(","))
    for family in args.families.split(","):
        for label, n_layer, d_model in bl.LADDER:
            if label not in sizes:
                continue
            cfg = bl.ladder_config(family, n_layer, d_model)
            step_s = bl.seconds_per_step(bl.make_spec(cfg, 3), data=data)
            log = bl.log_interval_for(step_s, args.window_s)

            def run(precision, patches, cfg=cfg, log=log):
                spec = bl.make_spec(cfg, 1, precision=precision, log_interval=log)
                return bl.time_train(spec, windows=args.windows, data=data, patches=patches)

            res = bl.interleave({k: (lambda v=v: run(*v)) for k, v in VARIANTS.items()},
                                args.reps)
            tps = {k: bl.median([t.tokens_per_s for t in v]) for k, v in res.items()}
            wall = {k: bl.median([t.wall_tokens_per_s for t in v]) for k, v in res.items()}
            row = {
                "family": family, "size": label, "L/d": f"{n_layer}/{d_model}",
                "N total": f"{flops.params_total(cfg):,}",
                "exact/6N": f"{flops.flops_per_token(cfg, 'exact') / flops.flops_per_token(cfg, '6nd'):.2f}",
                "fp32 tok/s (wall)": f"{tps['fp32']:,.0f} ({wall['fp32']:,.0f})",
            }
            for conv, name in (("6nd", "6N"), ("exact", "exact")):
                row[f"MFU fp32 {name}"] = f"{bl.mfu(cfg, tps['fp32'], peak.get('fp32'), conv):.0%}"
            row["bf16 tok/s (x fp32)"] = f"{tps['bf16']:,.0f} ({tps['bf16'] / tps['fp32']:.2f}x)"
            fa = tps["bf16+fp32attn"]
            row["bf16+fp32attn tok/s (x fp32)"] = f"{fa:,.0f} ({fa / tps['fp32']:.2f}x)"
            for conv, name in (("6nd", "6N"), ("exact", "exact")):
                row[f"MFU bf16+fp32attn {name}"] = f"{bl.mfu(cfg, fa, peak.get('bf16'), conv):.0%}"
            rows.append(row)
            print(f"  {family} {label}: " + ", ".join(f"{k} {v}" for k, v in row.items()
                                                      if "tok/s" in k or "MFU" in k), flush=True)
    peak.add(bl.measure_peak())  # the peak before and after: both enter the median
    print()
    print(peak.describe())
    onednn = bl.onednn_fp32_gflops()
    if onednn:
        print(f"for reference, the same fp32 matmul through oneDNN: median {bl.median(onednn):.1f} "
              f"GFLOP/s (torch.mm's fp32 goes through MKL, whose AVX-512 path is not taken on "
              f"AMD CPUs); fp32 MFU against it is {bl.median(peak.fp32) / bl.median(onednn):.2f}x "
              f"the figures below")
    print("MFU fp32 against the fp32 peak; MFU bf16 against the bf16 peak.")
    print()
    print(bl.table(rows, list(rows[0])))
    print(f"\nload average at the end: {bl.loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
