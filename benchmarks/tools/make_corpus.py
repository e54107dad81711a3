"""A synthetic JSONL corpus of any size, for the data-preparation benchmark (bench_prepare.py).

    python benchmarks/tools/make_corpus.py OUT.jsonl --gigabytes 2      # ~1-2 minutes, one core

Documents are windows of 1-16 KiB of real text (this interpreter's standard library plus
Shakespeare from ../shared/data when it is there), one {"text": ...} record per line, with
2% of the words replaced by random lowercase strings. The windows give BPE real structure; the
random words give it the long tail of rare words a web corpus has (a corpus of repeated
windows alone would let the tokenizer's word counts stay tiny and flatter its memory).
Deterministic for a given --seed. Written to OUT.tmp and renamed when complete.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
_WORD = re.compile(r"\S+")


def base_text() -> str:
    from pipeline.data import load_corpus

    parts = [d.text for d in load_corpus("stdlib")]
    if SHAKESPEARE.exists():
        parts.append(SHAKESPEARE.read_text(encoding="utf-8"))
    return "\n".join(parts)


def documents(text: str, total_bytes: int, seed: int):
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    written = 0
    while written < total_bytes:
        size = int(rng.integers(1 << 10, 16 << 10))
        start = int(rng.integers(0, len(text) - size))
        words = _WORD.findall(text[start:start + size])
        n_new = max(1, len(words) // 50)  # 2% of the words
        at = rng.integers(0, max(1, len(words)), n_new)
        lengths = rng.integers(3, 11, n_new)
        pool = letters[rng.integers(0, 26, int(lengths.sum()))].tobytes().decode()
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        for i, pos in enumerate(at):
            if words:
                words[pos] = pool[offsets[i]:offsets[i + 1]]
        doc = " ".join(words)
        line = json.dumps({"text": doc}) + "\n"
        written += len(line.encode("utf-8"))
        yield line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--gigabytes", type=float, default=2.0, help="size of the file (1e9 bytes)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    tmp = args.out.with_name(args.out.name + ".tmp")
    text = base_text()
    with open(tmp, "w", encoding="utf-8") as f:
        for line in documents(text, int(args.gigabytes * 1e9), args.seed):
            f.write(line)
    os.replace(tmp, args.out)
    print(f"{args.out}: {args.out.stat().st_size:,} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
