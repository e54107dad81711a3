"""`python -m analysis.compare A B`: is recipe B worth it at scale against baseline A?

    python -m analysis.compare chinchilla llama_chinchilla --sweep-file-a sweeps/chinchilla.yaml \
        --sweep-file-b sweeps/llama_chinchilla.yaml --flops 3.8e13 --out reports/llama_vs_gpt
    python -m analysis.compare reports/a/runs_export.json reports/b/runs_export.json --json

A and B are sweep names (MLflow experiments, --tracking-uri), report exports
(runs_export.json) or CSVs of runs. A CSV side is read as `analysis.fit --csv` reads one, with
the same column options: --n-col COL applies to every CSV side, --n-col-a / --n-col-b to one
(and wins over the shared one); likewise --d-col, --c-col, --loss-col, --budget-col,
--unique-col, --where and --drop-highest-loss. Two recipes of one published file:

    python -m analysis.compare runs.csv runs.csv --c-col flops \
        --where-a "dataset == 'rw'" --where-b "dataset == 'owt2'"

Prints the compute multiplier of B over A at every budget and at each --flops (marked when it
extrapolates; where there is none, why, in the verdict's words), both sides' a, tokens per
parameter and frontier exponent with their difference, each with a 95% bootstrap interval, and
a one-sentence verdict: who saves how much compute at the budgets trained, e.g. "B saves 6.1x
compute at the budgets trained (5.5x-7.6x)" (analysis.comparison). With --out: compare.json,
compare.md and figures/compare.png (each multiplier a point with its interval).
Input errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

from analysis.cli import Parser, run_main
from analysis.comparison import Comparison, check_comparable, compare
from analysis.errors import DataError
from analysis.inputs import BOOTSTRAP, SEED, finite_positive
from analysis.runs.table import RunsTable
from analysis.text import markdown_inline
from pipeline.planned_view import SWEEP_FILE_VIEW


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m analysis.compare", description=__doc__.split("\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog="two recipes of one published CSV:\n  python -m analysis.compare "
                      "runs.csv runs.csv --c-col flops \\\n    --where-a \"dataset == 'rw'\" "
                      "--where-b \"dataset == 'owt2'\"")
    p.add_argument("a", help="the baseline: sweep name, runs_export.json or CSV")
    p.add_argument("b", help="the recipe compared with it (same kinds of input)")
    p.add_argument("--flops", type=finite_positive, action="append", default=[], metavar="C",
                   help="also read the multiplier at this larger budget (repeatable)")
    p.add_argument("--tracking-uri", metavar="URI", help="MLflow store of sweep names")
    p.add_argument("--flops-convention", default=None,
                   help="C of sweeps read by name (default: the sweep file's, else the one "
                        "the sweep planned in, recorded in its ledger, else the one its runs "
                        "recorded, else 6nd; an export keeps its own)")
    p.add_argument("--sweep-file-a", metavar="FILE",
                   help="A's sweep file: only the runs it plans now (as --sweep-file elsewhere)")
    p.add_argument("--sweep-file-b", metavar="FILE", help="the same for B")
    p.set_defaults(sweep_file_view=SWEEP_FILE_VIEW)  # how the planner reads those files
    _add_csv_options(p)
    p.add_argument("--holdout-above", type=finite_positive, metavar="C",
                   help="leave every run whose budget (or C) is above C out of both frontiers "
                        "(a backtest: --flops C' then compares them where neither was fitted)")
    p.add_argument("--bootstrap", type=BOOTSTRAP, default=200, metavar="N",
                   help="resamples per side (default 200; 0: no intervals)")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--out", metavar="DIR", help="write compare.json, compare.md, figures/")
    return p


CSV_OPTIONS: tuple[tuple[str, str, dict], ...] = (
    ("n-col", "column of N (parameters)", {}),
    ("d-col", "column of D (tokens); without one, D = C/(6N)", {}),
    ("c-col", "column of C (FLOPs); without one, C = 6ND", {}),
    ("loss-col", "column of the final loss", {}),
    ("budget-col", "column of the IsoFLOP budget (default: runs whose C agree within 1%%)", {}),
    ("unique-col", "column of U, the unique tokens each run trained on (default: a column "
                   "named U, unique_tokens or unique)", {}),
    ("where", "keep the rows that meet EXPR: COL OP VALUE joined by 'and' (e.g. \"N >= 1e8 "
              "and model_type == 'dense'\")", {"metavar": "EXPR"}),
    ("drop-highest-loss", "drop the K highest-loss rows", {"type": int, "metavar": "K"}),
)
"""analysis.cli.add_input_arguments' CSV options, each for both sides and for one side.
Why both: one published file often holds both recipes (one --c-col, a --where-a and a
--where-b), and two files of different sources name their columns differently."""


def _add_csv_options(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group(
        "CSV sides", "as analysis.fit's --csv options: --OPTION applies to every CSV side,\n"
                     "--OPTION-a / --OPTION-b to A's or B's alone (and wins over --OPTION)")
    for name, what, extra in CSV_OPTIONS:
        kw = {"metavar": "COL", **extra}
        group.add_argument(f"--{name}", help=what, **kw)
        group.add_argument(f"--{name}-a", help="A's only", **kw)
        group.add_argument(f"--{name}-b", help="B's only", **kw)


def _side_option(args: argparse.Namespace, name: str, side: str) -> tuple[object, str]:
    """A CSV option's value for ``side`` ("A" or "B") and how errors name it: the option
    given, else both spellings."""
    own, shared = f"--{name}-{side.lower()}", f"--{name}"
    value = getattr(args, own[2:].replace("-", "_"), None)
    if value is not None:
        return value, own
    value = getattr(args, shared[2:].replace("-", "_"), None)
    return value, shared if value is not None else f"{own} (or {shared})"


def _csv_side(spec: str, args: argparse.Namespace, side: str,
              log: Callable[[str], None]) -> RunsTable:
    """A CSV side, read with the CSV options that apply to it (``_side_option``)."""
    from analysis.runs.load import load_csv

    got = {name: _side_option(args, name, side) for name, _, _ in CSV_OPTIONS}
    flags = {f"--{name}": flag for name, (_, flag) in got.items()}
    value = {name: v for name, (v, _) in got.items()}
    return load_csv(spec, option=side, flags=flags, n_col=value["n-col"],
                    d_col=value["d-col"], c_col=value["c-col"], loss_col=value["loss-col"],
                    budget_col=value["budget-col"], unique_col=value["unique-col"],
                    where=value["where"],
                    drop_highest_loss=value["drop-highest-loss"] or 0, log=log)


def check_csv_options(args: argparse.Namespace) -> None:
    """DataError for a CSV option given for a side that is not a CSV: it would be ignored."""
    csv_sides = {side for side, spec in (("A", args.a), ("B", args.b)) if spec.endswith(".csv")}
    for name, _, _ in CSV_OPTIONS:
        for side in ("A", "B"):
            if side not in csv_sides and getattr(args, f"{name}_{side.lower()}".replace("-", "_"),
                                                 None) is not None:
                raise DataError(f"--{name}-{side.lower()}: side {side} ({_spec(args, side)}) "
                                "is not a CSV; the CSV options apply to a .csv side only")
        if not csv_sides and getattr(args, name.replace("-", "_"), None) is not None:
            raise DataError(f"--{name}: neither A nor B is a CSV; the CSV options apply to a "
                            ".csv side only")


def _spec(args: argparse.Namespace, side: str) -> str:
    return str(args.a if side == "A" else args.b)


def load_side(spec: str, sweep_file: str | None, args: argparse.Namespace,
              side: str = "A", log: Callable[[str], None] | None = None) -> RunsTable:
    """A sweep name, a runs export (.json) or a CSV (.csv) as a runs table; a sweep's runs
    are those of the plan its ledger records, or with a sweep file those the file plans now
    (as the other commands' --sweep-file). ``side`` names the argument in errors; ``log``
    takes what reading it says (default: stderr at once)."""
    from analysis.cli import file_plan, flops_convention

    asked = argparse.Namespace(sweep=spec, sweep_file=sweep_file, export=None,
                               flops_convention=args.flops_convention,
                               sweep_file_view=getattr(args, "sweep_file_view", None))
    if spec.endswith(".csv"):
        runs = _csv_side(spec, args, side, log or _stderr)
    elif spec.endswith(".json"):
        from analysis.runs.export import read_export

        runs = read_export(spec, option=side)[0]
    else:
        from analysis.runs.load import load_sweep

        data = load_sweep(spec, tracking_uri=args.tracking_uri,
                          flops_convention=flops_convention(asked), with_curves=False,
                          use_plan=not sweep_file, log=log or _stderr)
        return file_plan(asked, data.runs, data.plan) if sweep_file else data.runs
    return file_plan(asked, runs, runs.plan) if sweep_file else runs


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def to_json(c: Comparison, unchecked: list[str]) -> dict:
    """The comparison as JSON: per compute its multiplier (null with a ``note`` from
    analysis.comparison.NOTES where there is none), whether it is a budget trained, the
    verdict and its numbers (``summary``); an infinite interval limit is null."""
    ci = {k: [_num(v.low), _num(v.high)] for k, v in c.intervals.items()}
    summary = c.summary()
    summary["budgets"] = [{**r, "ci95": ci.get(f"multiplier@{r['flops']:.6g}")}
                          for r in summary["budgets"]]
    summary["missing"] = [{"note": k, "flops": v} for k, v in summary["missing"].items()]
    return {
        "a": c.source_a, "b": c.source_b, "reference_flops": c.reference,
        "multiplier": [{"flops": f, "value": _num(c.multiplier(f)[0]) if n is None else None,
                        "ci95": ci.get(f"multiplier@{f:.6g}"), "extrapolated": x,
                        "trained": t, "note": n}
                       for f, x, t, n in zip(c.flops, c.extrapolated, c.trained, c.notes,
                                             strict=True)],
        "point": {k: _num(v) for k, v in c.point.items() if not k.startswith("multiplier@")},
        "ci95": {k: v for k, v in ci.items() if not k.startswith("multiplier@")},
        "n_resamples": c.n_resamples, "n_failed": c.n_failed, "seed": c.seed,
        "unchecked": unchecked, "verdict": c.verdict(), "summary": summary,
    }


def to_markdown(out: dict) -> str:
    # The sources are names or a file's "source" field, in the verdict too: escaped as text.
    a, b = markdown_inline(out["a"]), markdown_inline(out["b"])
    lines = [f"# {b} against {a}".replace("\n", " "), "", markdown_inline(out["verdict"]), "",
             "| C (FLOPs) | multiplier of B over A | 95% interval | |", "|---|---|---|---|"]
    for m in out["multiplier"]:
        ci = m["ci95"]
        # An infinite upper limit (draws where A never reaches B's loss) is null in JSON.
        ci_text = (f"[{ci[0]:.3g}, {'∞' if ci[1] is None else f'{ci[1]:.3g}'}]"
                   if ci and ci[0] is not None else "—")
        # No number: the note is the verdict's word for the same case (NOTES).
        value = m["note"] if m["note"] is not None else f"{m['value']:.3g}"
        flags = [w for w, on in (("trained", m["trained"]),
                                 ("extrapolated", m["extrapolated"])) if on]
        lines.append(f"| {m['flops']:.3g} | {value} | {ci_text} | {', '.join(flags)} |")
    lines += ["", "| quantity | estimate | 95% interval |", "|---|---|---|"]
    for k, v in out["point"].items():
        ci = out["ci95"].get(k)
        ci_text = f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci and None not in ci else "—"
        lines.append(f"| {k} | {'—' if v is None else f'{v:.4g}'} | {ci_text} |")
    lines += ["", f"{out['n_resamples']} resamples of each side's cells ({out['n_failed']} "
                  f"failed), seed {out['seed']}."]
    if out["unchecked"]:
        lines.append(f"Not checked (a side does not record it): {', '.join(out['unchecked'])}.")
    return "\n".join(lines) + "\n"


def _figure(c: Comparison, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = figure(c)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(c: Comparison):
    """Both frontiers (left) and the multiplier of B over A at every C read (right): a point
    with its 95% interval where there is a number; a matplotlib Figure, not yet saved."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    fa, fb = c.frontiers
    grid = np.geomspace(min(c.flops) / 2, max(c.flops) * 2, 40)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for f, label in ((fa, "A: " + c.source_a), (fb, "B: " + c.source_b)):
        left.plot(grid, [f.loss(x) for x in grid], label=label[:60])
    left.set(xscale="log", xlabel="C (FLOPs)", ylabel="L_opt(C) (nats/token)",
             title="compute-optimal frontiers")
    left.legend(fontsize=7)
    # Each read multiplier as a point with its 95% interval (open where it extrapolates), on
    # a log axis: 2x and 0.5x are the same size of gap. No point where there is no number.
    m = [c.multiplier(f) for f in c.flops]
    shown = [(f, v, ci, x) for f, (v, ci), x in zip(c.flops, m, c.extrapolated, strict=True)
             if np.isfinite(v) and v > 0]
    if shown:
        right.plot([f for f, *_ in shown], [v for _, v, *_ in shown], "-", color="C0", lw=1)
        finite = [v for _, v, ci, _ in shown] + [h for _, _, ci, _ in shown if ci is not None
                                                 for h in ci.as_list() if np.isfinite(h)]
        top = max(finite) * 2  # an infinite upper limit is drawn to here
        for extrapolated in (False, True):
            pts = [(f, v, ci) for f, v, ci, x in shown if x == extrapolated]
            if not pts:
                continue
            # A percentile interval need not hold its point estimate: bars clipped at 0.
            err = np.array([[max(0.0, v - ci.low), max(0.0, (ci.high if np.isfinite(ci.high)
                                                            else top) - v)]
                            if ci is not None else [0.0, 0.0] for _, v, ci in pts]).T
            right.errorbar([f for f, *_ in pts], [v for _, v, _ in pts], yerr=err, fmt="o",
                           color="C0", capsize=3, mfc="white" if extrapolated else "C0",
                           label=("extrapolated" if extrapolated else "multiplier of B over A")
                           + (" (95% interval)" if c.intervals else ""))
        right.set_yscale("log")
    else:
        right.text(0.5, 0.5, "no multiplier: " + "; ".join(sorted({n for n in c.notes if n})),
                   transform=right.transAxes, ha="center", va="center", fontsize=8, wrap=True)
    right.axhline(1.0, color="grey", lw=1)
    right.set(xscale="log", xlabel="C (FLOPs)", ylabel="C_A(L_B(C)) / C", title="multiplier")
    if shown:
        right.legend(fontsize=7)
    from matplotlib.ticker import NullFormatter

    for ax in (left, right):  # decade labels only: minor labels overlap on a log axis
        ax.xaxis.set_minor_formatter(NullFormatter())
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.out is not None:  # checked before the sides are read: a refusal costs nothing
        from analysis.report import check_target

        check_target(Path(args.out), "compare.json", "comparison")
    check_csv_options(args)
    notes: list[str] = []  # printed once both sides are read: a refusal is one line alone
    a = load_side(args.a, args.sweep_file_a, args, "A", notes.append)
    b = load_side(args.b, args.sweep_file_b, args, "B", notes.append)
    for note in notes:
        _stderr(note)
    unchecked = check_comparable(a, b)
    result = compare(a, b, larger=args.flops, bootstrap=args.bootstrap, seed=args.seed,
                     holdout_above=args.holdout_above)
    out = to_json(result, unchecked)
    if args.out is not None:
        from analysis.report import check_target, staged_folder

        folder = Path(args.out)
        check_target(folder, "compare.json", "comparison")  # again: it may have changed
        with staged_folder(folder) as tmp:  # swapped in whole, or not at all
            (tmp / "compare.json").write_text(json.dumps(out, indent=2) + "\n")
            (tmp / "compare.md").write_text(to_markdown(out))
            _figure(result, tmp / "figures" / "compare.png")
    print(json.dumps(out, indent=2) if args.json else to_markdown(out), end="")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
