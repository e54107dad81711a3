"""Is a seed better or worse in every cell? Paired seed differences of committed studies.

    python benchmarks/studies/seed_effects.py                     # the studies with seed replicates
    python benchmarks/studies/seed_effects.py reports/chinchilla/runs.csv

A run's seed sets its initialisation and its batch sequence; with `sampling: shuffled` the
batch sequence is a permutation of the training windows that every run of that seed reads
from its start, so runs of one seed train on nested prefixes of the same order, whatever their
size. The analysis measures run-to-run noise from the seeds of a cell (analysis.checks.noise)
as if each run's deviation were its own. If instead a seed shifts every run's loss the same
way (its share of the corpus suits the validation text better, say), that part is shared
across cells: the pairs' mean difference is not zero, and only the spread around it is noise
of single runs. For each later seed against the first, over the cells (budget, N) of main runs
that have both: the mean difference, its t test against 0, and the spread (sd / sqrt 2: one
run's noise without the shared part).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = sorted(ROOT.glob("reports/*/runs.csv"))


def seed_effects(path: Path) -> list[str]:
    runs = pd.read_csv(path)
    if "seed" not in runs or "budget" not in runs:
        return []
    if "role" in runs:
        runs = runs[runs["role"] == "main"]
    wide = runs.pivot_table(index=["budget", "N"], columns="seed", values="loss")
    if wide.shape[1] < 2:
        return []
    first = wide.columns[0]
    out = []
    for seed in wide.columns[1:]:
        d = (wide[seed] - wide[first]).dropna()
        if len(d) < 3:
            continue
        t = stats.ttest_1samp(d, 0.0)
        out.append(f"| {path.parent.name} | {seed} - {first} | {len(d)} | {d.mean():+.4f} | "
                   f"{t.statistic:+.2f} | {t.pvalue:.3f} | {int((d > 0).sum())}/{len(d)} | "
                   f"{d.std(ddof=1) / math.sqrt(2):.4f} | "
                   f"{math.sqrt((d ** 2).mean() / 2):.4f} |")
    return out


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or DEFAULT
    print("| study | seeds | cells | mean difference | t | p | positive | noise without the "
          "shared part (sd/√2) | with it (rms/√2) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        for line in seed_effects(path):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
