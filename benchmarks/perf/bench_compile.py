"""torch.compile (inductor) against eager for the single-run CLI's shape, one CPU thread.

    python benchmarks/perf/bench_compile.py          # ~1.5 minutes

Issue 21 asks for a trainer 1.3x faster than a plain loop in fp32; this measures whether
compiling the model would get there. The shape of issue 21's CLI example (gpt, 4 layers,
d 128, heads of 32, batch 64 x seq 128, vocab 256) with fused AdamW as the trainer has it,
on random tokens: the first 3 steps (compiling included) and the mean of the next 20, each
mode in a process of its own, inductor's cache in a fresh folder (cold: as a first run).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import benchlib as bl  # noqa: E402


def one(mode: str) -> None:
    import torch

    from pipeline.model import build_model
    from pipeline.vocab.families import make_config

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(make_config("gpt", 4, 128, vocab_size=256, seq_len=128, head_dim=32))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x = torch.randint(0, 256, (64, 128))
    run = torch.compile(model) if mode == "compile" else model

    def step() -> None:
        _, loss = run(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    for _ in range(3):
        step()
    first = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(20):
        step()
    wall, cpu = (time.perf_counter() - t0) / 20, (time.process_time() - c0) / 20
    print(f"| {mode} | {first:.1f} | {1e3 * wall:.0f} | {1e3 * cpu:.0f} |", flush=True)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        one(sys.argv[2])
        return 0
    print(bl.machine_header("torch.compile against eager, the CLI's shape, 1 thread"))
    print("| mode | first 3 steps, s (compiling included) | ms per step after | CPU ms per step |")
    print("|---|---|---|---|")
    for mode in ("eager", "compile"):
        with tempfile.TemporaryDirectory() as cache:
            subprocess.run([sys.executable, __file__, "--one", mode], check=True,
                           env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})
    print(f"\nload average at the end {bl.loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
