"""`python -m analysis.fit`: fit the scaling laws of a sweep (or published CSV) and print them.

    python -m analysis.fit --sweep quickstart
    python -m analysis.fit --csv tests/data/chinchilla_epoch_fig4.csv --n-col "Model Size" \\
        --c-col "Training FLOP" --loss-col loss --drop-highest-loss 5 --approach 3 --json

--json prints one JSON object (schema in docs/analysis.md, the same as analysis.schema.analysis_to_json);
otherwise readable tables. Input errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json

from analysis.analyze import analyze
from analysis.cli import Parser, add_bootstrap_by, add_input_arguments, load_input, run_main
from analysis.fits.table import FITS
from analysis.inputs import BOOTSTRAP, SEED, finite_positive, jobs
from analysis.numerics.bootstrap import DEFAULT_RESAMPLES
from analysis.numerics.workers import default_jobs
from analysis.schema import analysis_to_json
from pipeline.planned_view import SWEEP_FILE_VIEW


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m analysis.fit", description=__doc__.split("\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_arguments(p, SWEEP_FILE_VIEW)
    p.add_argument("--approach", choices=[*FITS, "all"], default="all",
                   help="which fit(s) to run, from the table of fits (default: all)")
    p.add_argument("--bootstrap", type=BOOTSTRAP, default=DEFAULT_RESAMPLES, metavar="N",
                   help=f"bootstrap resamples of runs (default {DEFAULT_RESAMPLES}; 0: none)")
    p.add_argument("--seed", type=SEED, default=0, help="bootstrap seed (default 0)")
    add_bootstrap_by(p)
    p.add_argument("--reference-flops", type=finite_positive, metavar="C",
                   help="compute at which to report the allocation (default: largest C)")
    p.add_argument("--jobs", type=jobs, default=default_jobs(), metavar="J",
                   help="processes for the bootstraps of the parametric laws (default: the "
                        f"cores this process may use, {default_jobs()} here; the intervals "
                        "are the same with any number)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    runs, curves = load_input(args)
    approaches = tuple(FITS) if args.approach == "all" else (args.approach,)
    result = analyze(runs, curves, bootstrap=args.bootstrap, seed=args.seed,
                     approaches=approaches, reference_flops=args.reference_flops,
                     n_jobs=args.jobs, max_epochs=args.max_epochs,
                     holdout_above=args.holdout_above,
                     bootstrap_by=args.bootstrap_by)
    if args.json:
        print(json.dumps(analysis_to_json(result), indent=2, allow_nan=False))
    else:
        from analysis.render import render

        render(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
