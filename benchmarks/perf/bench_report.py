"""A report from an export, this checkout against another commit, alternated in one run.

    python benchmarks/perf/bench_report.py --baseline eba3d83 \\
        --export reports/quickstart/runs_export.json --sweep-file sweeps/quickstart.yaml

Each round runs `python -m analysis.report --export E --sweep-file F --out TMP --force` once
from a git worktree of the baseline commit and once from this checkout (the order alternates
between rounds), each a whole process timed from start to exit. CPU is the machine's (user +
system from /proc/stat over the run): the report's workers are children of a fork server that
the report does not wait for, so its own rusage misses them; on a shared machine the load
average printed beside it says what else ran. Then the two fit.json files are compared: every
interval end and point estimate of a, b and tokens per parameter (what the report's
conclusions rest on), with the largest difference printed.

Issue 21's target for the quickstart's report: under 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
from benchlib import machine_header, median, table  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QUANTITIES = ("a", "b", "tokens_per_param")
PHASES = {  # progress lines of analysis.report -> column
    "interaction": r"interaction with \d+ resamples in ([\d.]+) s",
    "approach 3": r"Approach 3 with \d+ resamples in ([\d.]+) s",
    "conventions": r"conventions in ([\d.]+) s",
    "fits": r"fits with \d+ bootstrap resamples in ([\d.]+) s",
    "figures": r"figures in ([\d.]+) s",
}


def machine_cpu() -> float:
    """User + system seconds of every CPU since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    ticks = sum(int(fields[i]) for i in (0, 1, 2, 5, 6))  # user nice system irq softirq
    return ticks / os.sysconf("SC_CLK_TCK")


def run_report(checkout: Path, args: argparse.Namespace, out: Path) -> dict:
    cmd = [sys.executable, "-m", "analysis.report", "--export", str(args.export),
           "--sweep-file", str(args.sweep_file), "--out", str(out), "--force",
           "--bootstrap", str(args.bootstrap)]
    if args.jobs:
        cmd += ["--jobs", str(args.jobs)]
    env = {**os.environ, "PYTHONPATH": str(checkout)}  # its own analysis/ and pipeline/
    cpu0, t0 = machine_cpu(), time.monotonic()
    done = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
    wall, cpu = time.monotonic() - t0, machine_cpu() - cpu0
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: the report failed:\n{done.stderr[-2000:]}")
    row = {"wall s": wall, "machine CPU s": cpu}
    for name, pattern in PHASES.items():
        m = re.search(pattern, done.stderr)
        row[name] = float(m.group(1)) if m else float("nan")
    return row


def conclusions(fit_json: Path) -> dict[str, float]:
    """Point and interval ends of a, b and tokens per parameter of every approach."""
    out: dict[str, float] = {}
    for name, est in json.loads(fit_json.read_text())["approaches"].items():
        if est.get("status") != "ok":
            continue
        for q in QUANTITIES:
            if isinstance(est.get(q), (int, float)):
                out[f"{name}.{q}"] = float(est[q])
            for end, value in zip(("low", "high"), est.get("ci95", {}).get(q, []), strict=False):
                out[f"{name}.{q}.{end}"] = float(value)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", required=True, help="commit to compare with (e.g. HEAD~3)")
    p.add_argument("--export", type=Path, required=True)
    p.add_argument("--sweep-file", type=Path, required=True)
    p.add_argument("--bootstrap", type=int, default=400)
    p.add_argument("--jobs", type=int, default=0, help="--jobs of the report (0: its default)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    args.export, args.sweep_file = args.export.resolve(), args.sweep_file.resolve()
    rev = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    here = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = " (with uncommitted changes)" if subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
        capture_output=True, text=True).stdout.strip() else ""
    print(machine_header(f"the report of {args.export.parent.name}/{args.export.name}: "
                         f"{rev} against {here}{dirty}"))
    print(f"command: python -m analysis.report --export {args.export.name} --sweep-file "
          f"{args.sweep_file.name} --out TMP --force --bootstrap {args.bootstrap}"
          + (f" --jobs {args.jobs}" if args.jobs else ""))
    with tempfile.TemporaryDirectory(prefix="bench_report.") as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), rev], cwd=ROOT,
                       check=True, capture_output=True)
        try:
            variants = {rev: base, f"{here}{'+' if dirty else ''}": ROOT}
            rows: dict[str, list[dict]] = {name: [] for name in variants}
            for r in range(args.rounds):
                order = list(variants) if r % 2 == 0 else list(variants)[::-1]
                for name in order:
                    row = run_report(variants[name], args, Path(tmp) / name)
                    rows[name].append(row)
                    print(f"round {r + 1} {name}: wall {row['wall s']:.1f} s, machine CPU "
                          f"{row['machine CPU s']:.1f} s", flush=True)
            summary = []
            for name, runs in rows.items():
                line = {"commit": name}
                for col in runs[0]:
                    values = [run[col] for run in runs]
                    line[col] = (f"{median(values):.1f} ("
                                 + ", ".join(f"{v:.1f}" for v in values) + ")")
                summary.append(line)
            print("\nmedian (rounds):")
            print(table(summary, ["commit", *rows[rev][0]]))
            old, new = (conclusions(Path(tmp) / name / "fit.json") for name in variants)
            diffs = sorted(((abs(old[k] - new[k]) / max(abs(old[k]), 1e-12), k)
                            for k in old.keys() & new.keys()), reverse=True)
            print(f"\nfit.json, a, b and tokens per parameter of every approach (points and "
                  f"95% ends, {len(diffs)} numbers): {sum(d > 0 for d, _ in diffs)} differ;")
            for d, k in diffs[:8]:
                if d > 0:
                    print(f"  {k}: {old[k]:.6g} -> {new[k]:.6g} (relative {d:.2g})")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT,
                           capture_output=True)


if __name__ == "__main__":
    main()
