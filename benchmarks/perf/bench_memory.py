"""The plan's peak-memory estimate (pipeline/estimate/memory.py) against measured steps.

    python benchmarks/perf/bench_memory.py        # ~1 minute on one core

Each shape trains one optimizer step (fp32, one thread, AdamW) in a fresh process; measured
is the growth of the peak resident memory (ru_maxrss) over what the model and the batch held
before the step, compared with the estimate less the weights (already resident then). On the
CPU only: a GPU's torch.cuda.max_memory_allocated would be the exact counterpart.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from test_estimate import MEASURE  # noqa: E402 - the same measurement as the test

from pipeline.estimate.memory import training_memory  # noqa: E402
from pipeline.vocab.families import make_config  # noqa: E402

SHAPES = [  # family, layers, width, vocabulary, context, batch, head_dim
    ("gpt", 1, 64, 256, 128, 64, 16),
    ("gpt", 1, 64, 256, 512, 64, 16),
    ("gpt", 2, 256, 256, 256, 32, 32),
    ("gpt", 4, 128, 8192, 128, 64, 32),
    ("llama", 1, 64, 1024, 256, 64, 16),
    ("llama", 2, 256, 4096, 256, 32, 64),
    ("llama", 4, 512, 256, 512, 16, 64),
    ("llama", 2, 128, 32000, 256, 8, 64),
]


def main() -> None:
    print("| shape (family L d V T B) | estimate of the step | measured | measured / estimate |")
    print("|---|---|---|---|")
    for shape in SHAPES:
        family, L, d, V, T, B, hd = shape
        out = subprocess.run([sys.executable, "-c", MEASURE, *map(str, shape)], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        grown = json.loads(out)["grown"]
        est = training_memory(make_config(family, L, d, vocab_size=V, seq_len=T,
                                          head_dim=hd), B, bf16=False)
        step = est.total - est.weights
        print(f"| {family} {L} {d} {V} {T} {B} | {step / 2**20:.0f} MiB | "
              f"{grown / 2**20:.0f} MiB | {grown / step:.2f} |")


if __name__ == "__main__":
    main()
