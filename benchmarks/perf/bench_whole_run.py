"""The single-run CLI as a whole process against a plain training loop as a whole process.

    python benchmarks/perf/bench_whole_run.py              # ~8 minutes on 2 idle cores

Issue 21's measurement. One process per run, one after another (never two at once), rounds
interleaved, each timed from its start to its exit (imports, data, store, evaluations and
all) in wall and CPU seconds (the child's getrusage):

- "cli": what a new user types, `python -m pipeline.train --family gpt --n-layer 4
  --d-model 128 --head-dim 32 --seq-len 128 --batch-size 64 --tokens 1e6` (one thread, its
  defaults: MLflow in a fresh sqlite store, checkpoints, the evaluations eval_budget allows,
  precision auto), plus variants of it given with --cli-variants;
- "plain": a plain nanoGPT-style loop (bench_reference.RefGPT: explicit attention with a
  torch.tril mask, GELU MLP, AdamW, gradient clipping, loss.item() every step; fp32, one
  thread) that trains the same shape on the same tokens (the same token cache) in a process
  of its own (`python benchmarks/perf/bench_whole_run.py --plain`), without evaluations, logging
  or checkpoints.

Ratio = plain wall time / cli wall time (above 1: the CLI is faster), per round.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import benchlib as bl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHAPE = ["--family", "gpt", "--n-layer", "4", "--d-model", "128", "--head-dim", "32",
         "--seq-len", "128", "--batch-size", "64", "--tokens", "1e6"]
N_LAYER, D_MODEL, HEAD_DIM, SEQ_LEN, BATCH, TOKENS = 4, 128, 32, 128, 64, 1e6


def plain_loop() -> None:
    """The reference as a process of its own: load the tokens, build, train, exit."""
    import numpy as np
    import torch
    from bench_reference import RefGPT

    from pipeline.data import load_data
    from pipeline.vocab.families import make_config
    from pipeline.vocab.spec import DataSpec

    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = load_data(DataSpec())
    cfg = make_config("gpt", N_LAYER, D_MODEL, vocab_size=data.vocab_size, seq_len=SEQ_LEN,
                      head_dim=HEAD_DIM)
    model = RefGPT(cfg.vocab_size, cfg.seq_len, cfg.n_layer, cfg.d_model, cfg.n_heads)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    tokens = torch.from_numpy(np.asarray(data.train, dtype=np.int64))
    offsets = torch.arange(SEQ_LEN + 1)
    gen = torch.Generator().manual_seed(0)
    steps = max(1, round(TOKENS / (BATCH * SEQ_LEN)))  # as the CLI rounds D into steps
    for _ in range(steps):
        starts = torch.randint(0, len(tokens) - SEQ_LEN - 1, (BATCH,), generator=gen)
        chunk = tokens[starts[:, None] + offsets]
        loss = model(chunk[:, :-1], chunk[:, 1:])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
    print(f"plain loop: {steps} steps, final training loss {loss.item():.4f}")


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """(wall s, CPU s of the child and its children, last output line)."""
    before = os.times()
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = os.times()
    if out.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} exited {out.returncode}:\n{out.stderr[-3000:]}")
    cpu = (after.children_user - before.children_user
           + after.children_system - before.children_system)
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    return wall, cpu, lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plain", action="store_true", help="be the plain loop (one process)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cli-variants", default="",
                   help="extra CLI variants, ';'-separated flag lists, e.g. "
                        "'--precision fp32;--precision fp32 --eval-budget 1'")
    args = p.parse_args(argv)
    if args.plain:
        plain_loop()
        return 0

    print(bl.machine_header("Single-run CLI vs plain loop, whole processes (gpt 4/128, 1M "
                            "tokens, 1 thread)"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    variants: dict[str, list[str]] = {
        "cli": [sys.executable, "-m", "pipeline.train", *SHAPE]}
    for extra in filter(None, (v.strip() for v in args.cli_variants.split(";"))):
        variants[f"cli {extra}"] = variants["cli"] + shlex.split(extra)
    variants["plain"] = [sys.executable, str(Path(__file__).resolve()), "--plain"]
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, cmd in variants.items():
                cwd = Path(tmp) / f"{r}-{len(results[name])}-{abs(hash(name))}"
                cwd.mkdir()  # a fresh store and checkpoint folder: nothing is found done
                run_env = {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{cwd}/mlflow.db"}
                wall, cpu, last = timed(cmd, run_env, cwd)
                results[name].append((wall, cpu))
                print(f"  round {r + 1} {name}: {wall:.1f} s wall, {cpu:.1f} s CPU "
                      f"(load {bl.loadavg()})", flush=True)
    plain = results["plain"]
    rows = []
    for name, res in results.items():
        walls, cpus = [w for w, _ in res], [c for _, c in res]
        ratios = [pw / w for (pw, _), (w, _) in zip(plain, res, strict=True)]
        rows.append({"process": name, "wall s (rounds)": f"{bl.median(walls):.1f} ("
                     + ", ".join(f"{w:.1f}" for w in walls) + ")",
                     "CPU s": f"{bl.median(cpus):.1f}",
                     "plain / this, wall (per round)": f"{bl.median(ratios):.2f}x ("
                     + ", ".join(f"{x:.2f}" for x in ratios) + ")"})
    print()
    print(bl.table(rows, list(rows[0])))
    print(f"\nload average at the end {bl.loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
