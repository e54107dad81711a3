"""Does bf16 change the result? The same short run in fp32 and bf16, over several seeds.

    python benchmarks/studies/bench_bf16_loss.py             # ~3 minutes on 2 cores

pipeline.train.train() (one thread) trains the same spec (model, batches, init, schedule) in
fp32, in bf16 as the trainer does it (autocast), and in bf16 with the attention kernel in
fp32 (variants.FP32_ATTENTION), for each seed. The final validation loss (8 fixed eval
batches) is compared: the noise is the spread of the fp32 losses over seeds; bf16 passes when
its mean is within that spread of the fp32 mean. Paired differences (same seed) are shown
too: they isolate the precision from the seed. Tokens per CPU-second of each whole run
(setup and evals included) are printed alongside.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from pipeline.train import train
from pipeline.vocab import flops

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import benchlib as bl  # noqa: E402
import variants  # noqa: E402

PRECISIONS = {
    "fp32": ("fp32", ()),
    "bf16": ("bf16", ()),
    "bf16+fp32attn": ("bf16", variants.FP32_ATTENTION),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--families", default="gpt,llama")
    p.add_argument("--size", default="100k", choices=[s for s, _, _ in bl.LADDER])
    args = p.parse_args(argv)

    print(bl.machine_header("bf16 vs fp32: final validation loss"))
    data = bl.bench_data()
    n_layer, d_model = next((L, d) for s, L, d in bl.LADDER if s == args.size)
    verdicts = []
    for family in args.families.split(","):
        cfg = bl.ladder_config(family, n_layer, d_model)
        print(f"\n{family} {args.size} (L{n_layer} d{d_model}, N={flops.params_total(cfg):,}), "
              f"{args.steps} steps of {bl.BATCH}x{bl.SEQ_LEN} tokens, lr 3e-3 cosine, "
              f"warmup {args.steps // 20}, 8 eval batches")
        losses: dict[str, list[float]] = {k: [] for k in PRECISIONS}
        speed: dict[str, list[float]] = {k: [] for k in PRECISIONS}
        for seed in range(args.seeds):
            for name, (precision, patches) in PRECISIONS.items():  # interleaved
                spec = bl.make_spec(cfg, args.steps, precision=precision, seed=seed,
                                    eval_interval=args.steps, eval_batches=8,
                                    warmup_steps=args.steps // 20)
                c0 = time.process_time()
                with bl.patched(*patches):
                    result = train(spec, None, data=data)
                speed[name].append(result.tokens / (time.process_time() - c0))
                losses[name].append(result.final_val_loss)
                print(f"  seed {seed} {name:14s} val loss {result.final_val_loss:.4f}  "
                      f"({speed[name][-1]:,.0f} tok/CPU-s)", flush=True)
        ref = losses["fp32"]
        noise = max(ref) - min(ref)
        rows = []
        for name, values in losses.items():
            diffs = [v - r for v, r in zip(values, ref, strict=True)]
            gap = statistics.mean(values) - statistics.mean(ref)
            ok = abs(gap) <= noise
            if name != "fp32":
                verdicts.append((family, name, ok))
            rows.append({
                "precision": name,
                "val loss per seed": ", ".join(f"{v:.4f}" for v in values),
                "mean": f"{statistics.mean(values):.4f}",
                "mean - fp32 mean": f"{gap:+.4f}",
                "paired diff (same seed)": ", ".join(f"{d:+.4f}" for d in diffs),
                "within fp32 seed spread": "-" if name == "fp32" else ("yes" if ok else "NO"),
                "tok/CPU-s (whole run)": f"{bl.median(speed[name]):,.0f}",
            })
        print(f"fp32 seed spread (noise): {noise:.4f} nats; std {statistics.pstdev(ref):.4f}")
        print(bl.table(rows, list(rows[0])))
    print("\nverdict: " + "; ".join(f"{f} {n}: {'passes' if ok else 'FAILS'}"
                                     for f, n, ok in verdicts))
    print(f"load average at the end: {bl.loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
