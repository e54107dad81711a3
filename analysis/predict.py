"""`python -m analysis.predict`: the compute-optimal model for a FLOP budget, with intervals.

    python -m analysis.predict --sweep quickstart --flops 1e13
    python -m analysis.predict --csv tests/data/chinchilla_epoch_fig4.csv --n-col "Model Size" \\
        --c-col "Training FLOP" --loss-col loss --drop-highest-loss 5 --flops 5.76e23 --json

Prints N_opt, D_opt, tokens per parameter and (Approach 3) the predicted loss, each with its
95% bootstrap interval, then the nearest buildable shape of the sweep's family as a sweep file
to run (a CSV names no family: a stand-in gpt shape where one is near N_opt, else the
allocation alone and why), or with --write FILE the next sweep file with the source sweep's whole recipe
(pipeline/next_sweep.py). C is in the fits' convention: --flops-convention, else the sweep
file's (or the export's), else the one the sweep planned in (recorded in its ledger), else
the one its runs recorded, else 6·N·D.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from analysis.analyze import Skipped, analyze
from analysis.cli import (
    Parser,
    add_bootstrap_by,
    add_input_arguments,
    flops_convention,
    load_input,
    run_main,
)
from analysis.errors import DataError, FitError
from analysis.fits.table import predictable
from analysis.inputs import BOOTSTRAP, SEED, check_new_file, finite_positive
from analysis.runs.shapes import DEFAULT_FAMILY, DEFAULT_SEQ_LEN, ShapeChoice, nearest_shape
from analysis.schema import clean
from analysis.text import fmt, fmt_interval
from pipeline.planned_view import SWEEP_FILE_VIEW

QUANTITIES = ("n_opt", "d_opt", "tokens_per_param", "loss_opt")
STAND_IN = (f"a stand-in: published data names no model family, so the shape is "
            f"{DEFAULT_FAMILY}'s with a byte vocabulary")
"""shape_note beside a CSV's shape: it is not the family the published runs trained."""
CHINCHILLA_TOKENS_PER_PARAM = 20.0
"""D/N at the optimum (Hoffmann et al. 2022): the stand-in prediction with which --write's
file is checked before the fit."""


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m analysis.predict", description=__doc__.split("\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_arguments(p, SWEEP_FILE_VIEW)
    p.add_argument("--flops", type=finite_positive, required=True, metavar="C",
                   help="compute budget")
    p.add_argument("--approach", choices=predictable(),
                   default="3",
                   help="which allocation to use (default 3; 3 and the laws with an "
                        "interaction also predict the loss; fit.json's summary.headline says "
                        "which law describes the runs)")
    p.add_argument("--bootstrap", type=BOOTSTRAP, default=1000, metavar="N",
                   help="bootstrap resamples for the intervals (default 1000; 0: none)")
    p.add_argument("--seed", type=SEED, default=0)
    add_bootstrap_by(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--write", metavar="FILE",
                   help="write the next sweep: --sweep-file's recipe, one IsoFLOP budget at "
                        "--flops, sizes around the predicted N_opt (needs --sweep-file)")
    return p


def predict(args: argparse.Namespace) -> dict:
    """The prediction as a JSON-ready dict (the --json output)."""
    if args.write and not args.sweep_file:
        raise DataError("--write needs --sweep-file: the sweep whose recipe the next one keeps")
    if args.write:  # checked whole before the fit: a refusal costs no fit and writes nothing
        check_new_file(Path(args.write), "--write")
        n_guess = math.sqrt(args.flops / (6.0 * CHINCHILLA_TOKENS_PER_PARAM))
        _next_sweep(args, n_guess, CHINCHILLA_TOKENS_PER_PARAM * n_guess, write=False)
    runs, curves = load_input(args)
    # No convention refits: a prediction needs one allocation, not its sensitivity.
    result = analyze(runs, curves, bootstrap=args.bootstrap, seed=args.seed,
                     approaches=(args.approach,), reference_flops=args.flops,
                     conventions=False, max_epochs=args.max_epochs,
                     holdout_above=args.holdout_above, backtests=False,
                     bootstrap_by=args.bootstrap_by)
    est = result.approaches()[args.approach]
    if isinstance(est, Skipped):
        raise FitError(f"approach {args.approach} cannot be fitted: {est.reason}")
    shape = nearest_shape(est.point["n_opt"], args.flops, runs)
    stand_in = runs.family() is None  # published data: the shape is a stand-in's, if any
    if stand_in and not isinstance(shape, ShapeChoice):
        shape = published_shape_note(est.point["n_opt"])
    name = f"{args.sweep or 'published'}-optimal"
    out = {
        "source": result.source, "approach": args.approach, "flops": args.flops,
        **{q: est.point[q] for q in QUANTITIES if q in est.point},
        "ci95": {q: est.ci95(q).as_list() for q in QUANTITIES if est.ci95(q) is not None},
        "shape": shape.__dict__ if isinstance(shape, ShapeChoice) else None,
        "shape_note": (STAND_IN if stand_in else "") if isinstance(shape, ShapeChoice)
        else shape,
        "snippet": shape.sweep_snippet(name, args.flops) if isinstance(shape, ShapeChoice)
        else "",
    }
    if args.write:
        _next_sweep(args, est.point["n_opt"], est.point["d_opt"], write=True)
        out["written"] = args.write
    return clean(out)


def published_shape_note(n_opt: float) -> str:
    """Why a CSV's prediction has no shape. Why not the shape rule's own reason ("raise
    max_depth"): published runs name no family, so the rule is a stand-in's (gpt, bytes)
    that no option of this command changes; the allocation is the answer."""
    return (f"the runs name no model family (published data), and the stand-in "
            f"{DEFAULT_FAMILY} shapes (byte vocabulary, sequence {DEFAULT_SEQ_LEN}) have none "
            f"near N_opt = {n_opt:.3g}; the allocation above is the prediction, and a "
            "buildable shape needs a sweep's family (--sweep or --export)")


def _next_sweep(args: argparse.Namespace, n_opt: float, d_opt: float, *, write: bool) -> None:
    """The --write file for this N_opt and D_opt, validated at its place; written if asked.
    The planner writes it (pipeline.next_sweep: an entry point may import both sides); its
    SweepError is this command's DataError, one error line and exit 2."""
    from pipeline.config import SweepError
    from pipeline.next_sweep import next_sweep_text, validate_next_sweep, write_next_sweep

    out = Path(args.write)
    try:
        text = next_sweep_text(Path(args.sweep_file), out, flops=args.flops, n_opt=n_opt,
                               d_opt=d_opt, approach=args.approach,
                               convention=flops_convention(args))
        if write:
            write_next_sweep(out, text, "--write")
        else:
            validate_next_sweep(out, text, "--write")
    except SweepError as e:
        raise DataError(str(e)) from e


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = predict(args)
    if args.json:
        print(json.dumps(out, indent=2, allow_nan=False))
        return 0
    console = Console(markup=False)  # the source and the family are names, never markup
    table = Table(title=f"Compute-optimal allocation at C = {args.flops:.3g} FLOPs "
                        f"(approach {args.approach}; {out['source']})", title_justify="left")
    for col in ("quantity", "estimate", "95% interval"):
        table.add_column(col)
    for q in QUANTITIES:
        if q in out:
            ci = out["ci95"].get(q)
            table.add_row(q, fmt(out[q]), fmt_interval(None) if ci is None else
                          f"[{ci[0]:.4g}, {ci[1]:.4g}]")
    console.print(table)
    if out["shape"] is None:
        console.print(f"No buildable shape: {out['shape_note']}")
    else:
        s = out["shape"]
        stand_in = f" ({out['shape_note']})" if out["shape_note"] else ""
        console.print(f"Nearest {s['family']} shape{stand_in}: n_layer={s['n_layer']}, "
                      f"d_model={s['d_model']}, n_heads={s['n_heads']}: "
                      f"N = {s['params_total']:,} parameters, D = {s['tokens']:.4g} "
                      f"{'images' if s.get('image') else 'tokens'}")
        if not args.write:
            print(out["snippet"], end="")  # plain: a terminal-width wrap would break the YAML
    if args.write:
        console.print(f"wrote {args.write}: the next sweep with {args.sweep_file}'s recipe; "
                      f"`python -m pipeline.sweep {args.write} --dry-run` shows its plan")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
