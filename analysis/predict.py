"""`python -m analysis.predict`: the compute-optimal model for a FLOP budget, with intervals.

    python -m analysis.predict --sweep quickstart --flops 1e13
    python -m analysis.predict --csv tests/data/chinchilla_epoch_fig4.csv --n-col "Model Size" \\
        --c-col "Training FLOP" --loss-col loss --drop-highest-loss 5 --flops 5.76e23 --json

Prints N_opt, D_opt, tokens per parameter and the predicted loss from the headline law (the
one the report's answer uses: analysis.checks.verdict.headline_rule; --approach picks another),
each with its 95% bootstrap interval, then the nearest buildable shape of the sweep's family as a sweep file
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
from analysis.fits.table import headline_candidates, predictable
from analysis.inputs import BOOTSTRAP, SEED, check_new_file, finite_positive
from analysis.runs.shapes import (
    DEFAULT_FAMILY,
    DEFAULT_SEQ_LEN,
    ShapeChoice,
    nearest_shape,
    train_units,
)
from analysis.runs.table import RunsTable
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
                   help="which allocation to use (default: the headline law, the one the "
                        "report's answer and fit.json's summary.answer use; "
                        "data_constrained with --unique-tokens; the laws also predict the "
                        "loss)")
    p.add_argument("--unique-tokens", metavar="U",
                   help="the unique tokens of the corpus to train on (a number, or 'corpus': "
                        "the train split the sweep's runs recorded): also the optimum when "
                        "only U unique tokens exist, the loss lost to repeating them, and the "
                        "budget beyond which more epochs stop paying, from a data-constrained "
                        "law (--approach data_constrained, the default then, or "
                        "data_constrained_interaction)")
    p.add_argument("--bootstrap", type=BOOTSTRAP, default=1000, metavar="N",
                   help="bootstrap resamples for the intervals (default 1000; 0: none)")
    p.add_argument("--seed", type=SEED, default=0)
    add_bootstrap_by(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--write", metavar="FILE",
                   help="write the next sweep: --sweep-file's recipe, one IsoFLOP budget at "
                        "--flops, sizes around the predicted N_opt (needs --sweep-file)")
    return p


DATA_CONSTRAINED = ("data_constrained", "data_constrained_interaction")


def corpus_tokens(runs: RunsTable) -> float | None:
    """The train split a sweep's runs recorded, None for published data (whose epochs, if a
    CSV gives them, are of another corpus than a sweep would train on)."""
    return None if runs.family() is None else train_units(runs)


def _unique_tokens(args: argparse.Namespace, runs: RunsTable) -> float | None:
    """--unique-tokens as a number of tokens, checked against the runs' corpus."""
    if args.unique_tokens is None:
        return None
    corpus = corpus_tokens(runs)
    if args.unique_tokens == "corpus":
        if corpus is None:
            raise DataError("--unique-tokens corpus: the runs record no train split (published "
                            "data, or runs without final/epochs); give a number of tokens")
        return corpus
    try:
        u = finite_positive(args.unique_tokens)
    except argparse.ArgumentTypeError as err:
        raise DataError(f"--unique-tokens {args.unique_tokens!r}: {err} (or 'corpus')") from err
    if corpus is not None and u > corpus * (1 + 1e-6):
        raise DataError(f"--unique-tokens {u:.4g}: larger than the corpus the runs trained on "
                        f"({corpus:.4g} train tokens); a corpus cannot hold more unique tokens "
                        "than it has (for a larger corpus, fit runs on it)")
    return u


def _check_approach(args: argparse.Namespace) -> None:
    if (args.approach is not None and args.unique_tokens is not None
            and args.approach not in DATA_CONSTRAINED):
        raise DataError(f"--unique-tokens needs a data-constrained law (--approach "
                        f"{' or '.join(DATA_CONSTRAINED)}), not --approach {args.approach}")


def headline(runs: RunsTable, curves: object, args: argparse.Namespace) -> tuple[str, str]:
    """The law to predict with when --approach is not given, and why (a few words).

    The headline law by the report's rule (analysis.checks.verdict.headline_rule), chosen on
    the same runs with the same options, so that `predict --flops C` at the sweep's largest
    budget gives the report's answer (issue 55: predict used Approach 3 while the report
    answered with the interaction law). The choice needs every candidate's point fit and its
    rolling-origin backtest, not their bootstraps: the intervals are then drawn for the chosen
    law alone, with the same seed, so they are the report's too."""
    chosen = analyze(runs, curves, bootstrap=0, seed=args.seed,
                     approaches=headline_candidates(), reference_flops=args.flops,
                     conventions=False, max_epochs=args.max_epochs,
                     holdout_above=args.holdout_above, backtests=True,
                     bootstrap_by=args.bootstrap_by)
    name = chosen.verdict.headline if chosen.verdict is not None else None
    if name is None:
        return "3", "no parametric law could be fitted, so Approach 3 (which says why)"
    return name, "the headline law, as in the report's answer"


def _corpus_block(est: object, law: object, unique_tokens: float) -> dict:
    """The optimum with only ``unique_tokens``, with intervals, and where returns vanish."""
    from analysis.fits.data_constrained import returns_vanish_flops

    keys = ("n_opt_corpus", "d_opt_corpus", "epochs_corpus", "loss_corpus", "repetition_cost",
            "epochs_vanish")
    return {"unique_tokens": unique_tokens,
            **{k: est.point[k] for k in keys},
            "loss_fresh": est.point["loss_opt"],
            "ci95": {k: est.ci95(k).as_list() for k in keys if est.ci95(k) is not None},
            "returns_vanish_flops": returns_vanish_flops(law, unique_tokens)}


def predict(args: argparse.Namespace) -> dict:
    """The prediction as a JSON-ready dict (the --json output)."""
    _check_approach(args)
    if args.write and not args.sweep_file:
        raise DataError("--write needs --sweep-file: the sweep whose recipe the next one keeps")
    if args.write:  # checked whole before the fit: a refusal costs no fit and writes nothing
        check_new_file(Path(args.write), "--write")
        n_guess = math.sqrt(args.flops / (6.0 * CHINCHILLA_TOKENS_PER_PARAM))
        _next_sweep(args, n_guess, CHINCHILLA_TOKENS_PER_PARAM * n_guess, write=False)
    runs, curves = load_input(args)
    unique_tokens = _unique_tokens(args, runs)
    corpus = corpus_tokens(runs)
    if args.write and unique_tokens is not None and unique_tokens < (corpus or 0) * (1 - 1e-6):
        raise DataError(f"--write with --unique-tokens {unique_tokens:.4g}: the next sweep "
                        f"trains on its whole corpus ({corpus:.4g} train units), not on part "
                        "of it; give --unique-tokens corpus, or write it for a corpus of that "
                        "size (data.max_bytes in --sweep-file)")
    why = "--approach"
    if args.approach is None and unique_tokens is not None:
        # The report answers for fresh data; a corpus needs a law that knows U: the simpler
        # one (choosing between the two would backtest both, ~10x one fit of them).
        args.approach, why = "data_constrained", "the data-constrained law, as U is given"
    elif args.approach is None:
        args.approach, why = headline(runs, curves, args)
    # No convention refits: a prediction needs one allocation, not its sensitivity.
    result = analyze(runs, curves, bootstrap=args.bootstrap, seed=args.seed,
                     approaches=(args.approach,), reference_flops=args.flops,
                     conventions=False, max_epochs=args.max_epochs,
                     holdout_above=args.holdout_above, backtests=False,
                     bootstrap_by=args.bootstrap_by, unique_tokens=unique_tokens)
    est = result.approaches()[args.approach]
    if isinstance(est, Skipped):
        raise FitError(f"approach {args.approach} cannot be fitted: {est.reason}")
    # With a fixed corpus the run to train is the optimum with only that corpus.
    n_run = est.point["n_opt" if unique_tokens is None else "n_opt_corpus"]
    shape = nearest_shape(n_run, args.flops, runs)
    stand_in = runs.family() is None  # published data: the shape is a stand-in's, if any
    if stand_in and not isinstance(shape, ShapeChoice):
        shape = published_shape_note(n_run)
    name = f"{args.sweep or 'published'}-optimal"
    out = {
        "source": result.source, "approach": args.approach, "approach_why": why,
        "flops": args.flops,
        **{q: est.point[q] for q in QUANTITIES if q in est.point},
        "ci95": {q: est.ci95(q).as_list() for q in QUANTITIES if est.ci95(q) is not None},
        "shape": shape.__dict__ if isinstance(shape, ShapeChoice) else None,
        "shape_note": (STAND_IN if stand_in else "") if isinstance(shape, ShapeChoice)
        else shape,
        "snippet": shape.sweep_snippet(name, args.flops) if isinstance(shape, ShapeChoice)
        else "",
    }
    if unique_tokens is not None:
        out["corpus"] = _corpus_block(est, est.fit.law, unique_tokens)
    if args.write and unique_tokens is None:
        _next_sweep(args, est.point["n_opt"], est.point["d_opt"], write=True)
        out["written"] = args.write
    elif args.write:  # the optimum with only the corpus: sizes around it, epochs allowed
        _next_sweep(args, est.point["n_opt_corpus"], est.point["d_opt_corpus"], write=True,
                    corpus_units=unique_tokens)
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


def _next_sweep(args: argparse.Namespace, n_opt: float, d_opt: float, *, write: bool,
                corpus_units: float | None = None) -> None:
    """The --write file for this N_opt and D_opt, validated at its place; written if asked.
    The planner writes it (pipeline.next_sweep: an entry point may import both sides); its
    SweepError is this command's DataError, one error line and exit 2."""
    from pipeline.config import SweepError
    from pipeline.next_sweep import next_sweep_text, validate_next_sweep, write_next_sweep

    out = Path(args.write)
    try:
        text = next_sweep_text(Path(args.sweep_file), out, flops=args.flops, n_opt=n_opt,
                               d_opt=d_opt, approach=args.approach or "headline",
                               convention=flops_convention(args), corpus_units=corpus_units)
        if write:
            write_next_sweep(out, text, "--write")
        else:
            validate_next_sweep(out, text, "--write")
    except SweepError as e:
        raise DataError(str(e)) from e


def _print_corpus(console: Console, c: dict, flops: float) -> None:
    table = Table(title=f"With only U = {c['unique_tokens']:.4g} unique tokens at C = "
                        f"{flops:.3g} FLOPs", title_justify="left")
    for col in ("quantity", "estimate", "95% interval"):
        table.add_column(col)
    for key in ("n_opt_corpus", "d_opt_corpus", "epochs_corpus", "loss_corpus",
                "repetition_cost", "epochs_vanish"):
        ci = c["ci95"].get(key)
        table.add_row(key, fmt(c[key]), fmt_interval(None) if ci is None else
                      f"[{ci[0]:.4g}, {ci[1]:.4g}]")
    console.print(table)
    vanish = c.get("returns_vanish_flops")
    console.print(f"Repetition costs {c['repetition_cost']:.3g} nats against unlimited data "
                  f"(loss {fmt(c['loss_fresh'])}). "
                  + ("More epochs stop paying beyond about "
                     f"{vanish:.3g} FLOPs (C = 6ND): the optimal run then trains "
                     f"{c['epochs_vanish']:.3g} epochs, and a further repeated token is worth "
                     "under 10% of a fresh one." if vanish is not None else
                     "More epochs keep paying up to 1e45 FLOPs."))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = predict(args)
    if args.json:
        print(json.dumps(out, indent=2, allow_nan=False))
        return 0
    console = Console(markup=False)  # the source and the family are names, never markup
    why = "" if out["approach_why"] == "--approach" else f": {out['approach_why']}"
    table = Table(title=f"Compute-optimal allocation at C = {args.flops:.3g} FLOPs "
                        f"(approach {args.approach}{why}; {out['source']})",
                  title_justify="left")
    for col in ("quantity", "estimate", "95% interval"):
        table.add_column(col)
    for q in QUANTITIES:
        if q in out:
            ci = out["ci95"].get(q)
            table.add_row(q, fmt(out[q]), fmt_interval(None) if ci is None else
                          f"[{ci[0]:.4g}, {ci[1]:.4g}]")
    console.print(table)
    if "corpus" in out:
        _print_corpus(console, out["corpus"], args.flops)
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
