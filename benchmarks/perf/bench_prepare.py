"""Data preparation at scale: peak memory and throughput of `python -m pipeline.data prepare`
on a large JSONL corpus with a 32k BPE (issue 17: under 1.5 GB for a 2 GB corpus).

    python benchmarks/tools/make_corpus.py /tmp/corpus2g.jsonl --gigabytes 2     # ~1 minute
    python benchmarks/perf/bench_prepare.py /tmp/corpus2g.jsonl                  # ~5-10 minutes
    python benchmarks/perf/bench_prepare.py /tmp/corpus2g.jsonl --kill-after 60  # + a killed build

Runs the real CLI in a subprocess on a sweep file whose data section is the corpus (bpe,
vocabulary 32000) and a fresh cache folder, and samples its process tree from /proc every
0.25 s (benchmarks/procmon.py): the peak of the tree's summed resident memory (VmRSS; the
tokenizer's threads are in the one process), its high-water mark (VmHWM, kept by the kernel,
so no peak between samples is missed), and CPU seconds beside wall seconds. The phases' times
come from the CLI's own progress lines. --kill-after S first SIGKILLs a build S seconds in
and checks that it left no entry (only temporary files), then times the full build after it.
A second call on the finished cache is timed too: what the sweep pays to find the entry.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers

from procmon import TreeMonitor  # noqa: E402

SWEEP = """\
name: prepare-bench
kind: isoflop
family: llama
data: {{corpus: {corpus}, tokenizer: bpe, bpe_vocab_size: {vocab}, seq_len: 512}}
isoflop:
  budgets: [1.0e+15]
  sizes: {{shapes: [{{n_layer: 2, d_model: 128}}]}}
"""


def run(cmd: list[str], kill_after: float | None = None) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    with TreeMonitor(proc.pid) as mon:
        try:
            out, err = proc.communicate(timeout=kill_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            out, err = proc.communicate()
    wall = time.perf_counter() - t0
    main = mon.procs.get(proc.pid)
    return {"rc": proc.returncode, "wall_s": wall, "stdout": out, "stderr": err,
            "cpu_s": sum(p.cpu_s for p in mon.procs.values()),
            "peak_tree_rss_mb": mon.peak_rss_kb / 1024,
            "peak_hwm_mb": max(p.hwm_kb for p in mon.procs.values()) / 1024,
            "main_hwm_mb": main.hwm_kb / 1024 if main else 0.0}


def phases(stderr: str) -> dict[str, str]:
    """The last progress line of each phase, as the CLI printed it."""
    last = {}
    for line in stderr.splitlines():
        if m := re.match(r"data: (reading corpus|tokenizer|encoding)\b.*", line):
            last[m.group(1)] = line.removeprefix("data: ")
    return last


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("corpus", type=Path)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--kill-after", type=float, default=None, metavar="S")
    p.add_argument("--keep", type=Path, default=None, help="cache folder to use and keep")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-prepare-"))
    cache = args.keep or work / "cache"
    sweep = work / "sweep.yaml"
    sweep.write_text(SWEEP.format(corpus=json.dumps(str(args.corpus.resolve())),
                                  vocab=args.vocab))
    cmd = [sys.executable, "-m", "pipeline.data", "prepare", str(sweep), "--cache-dir",
           str(cache), "--json"]
    size = args.corpus.stat().st_size
    print(f"corpus {args.corpus.name}: {size:,} bytes; BPE {args.vocab}; command: "
          f"python -m pipeline.data prepare SWEEP --cache-dir CACHE --json")
    try:
        if args.kill_after:
            killed = run(cmd, kill_after=args.kill_after)
            tokens = cache / "tokens"
            entries = [q.name for q in tokens.glob("*.bin")] if tokens.exists() else []
            temps = [q.name for q in tokens.glob("*tmp*")] if tokens.exists() else []
            print(f"killed after {killed['wall_s']:.0f}s (rc {killed['rc']}): entries "
                  f"{entries or 'none'}, temporary files left {len(temps)}")
        built = run(cmd)
        if built["rc"] != 0:
            print(built["stderr"][-3000:], file=sys.stderr)
            return 1
        meta = json.loads(built["stdout"])
        again = run(cmd)
        print(f"build: wall {built['wall_s']:.0f}s, CPU {built['cpu_s']:.0f}s; peak resident "
              f"memory of the tree {built['peak_tree_rss_mb']:.0f} MB (sampled), high-water "
              f"mark {built['peak_hwm_mb']:.0f} MB")
        for line in phases(built["stderr"]).values():
            print(f"  {line}")
        print(f"  {meta['train_tokens'] + meta['val_tokens']:,} tokens "
              f"({meta['train_bytes'] + meta['val_bytes']:,} bytes of text, "
              f"{(meta['train_bytes'] + meta['val_bytes']) / (meta['train_tokens'] + meta['val_tokens']):.2f} "
              f"bytes/token), .bin {meta['bin_size']:,} bytes; tokenizer sample "
              f"{meta['tokenizer_sample_bytes'] or meta['train_bytes']:,} bytes; whole "
              f"build {size / 1e6 / built['wall_s']:.1f} MB/s of corpus file")
        print(f"again (entry found): wall {again['wall_s']:.1f}s, CPU {again['cpu_s']:.1f}s, "
              f"peak {again['peak_hwm_mb']:.0f} MB, built={json.loads(again['stdout'])['built']}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
