"""The report's text: every section as document blocks, from one Analysis.

Only presentation. Numbers are formatted with ``analysis.text.fmt`` (4 significant
digits), the same as ``python -m analysis.fit``, and come from the Analysis object that
``fit.json`` serialises, so the report, the JSON and the CLI agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.analyze import Analysis, Estimate, Skipped
from analysis.checks.extrapolation import ExtrapolationCheck
from analysis.checks.identification import flags_of
from analysis.checks.verdict import MAX_FAILED_FRACTION, interval_problem
from analysis.fits.approach2 import BudgetMinimum, budget_minimum
from analysis.reporting.answer import answer_blocks
from analysis.reporting.backtest import backtest_section, backtest_summary
from analysis.reporting.checks import (
    agreement_blocks,
    agreement_word,
    conventions_section,
    holdout_section,
    holdout_summary,
    noise_section,
    noise_summary,
    schedules_section,
)
from analysis.reporting.document import Block, Bullets, Code, Figure, Heading, Paragraph, Table
from analysis.reporting.figures import Drawn
from analysis.reporting.laws import headline_line, judged_position, laws_section
from analysis.reporting.other_fits import other_fits_section
from analysis.reporting.provenance import portable
from analysis.reporting.repetition import repetition_section
from analysis.reporting.samples import Sample
from analysis.runs.table import RunsTable
from analysis.text import fmt, fmt_interval
from pipeline.vocab import keys

CHINCHILLA_TOKENS = 20.0
KIND = {"3": "parametric fit", "2": "IsoFLOP parabolas", "1": "envelope of curves"}
MAX_RUN_ROWS = 100


@dataclass(frozen=True)
class ReportInput:
    """Everything a report shows besides the Analysis itself."""

    name: str
    command: str
    runs: RunsTable
    figures: dict[str, Drawn]
    samples: Sequence[Sample] | None
    """None for published data (no checkpoints)."""
    sample_prompt: str
    provenance: Sequence[str]
    sweep_text: str | None = None
    has_curves: bool = False
    export_command: str | None = None
    """The command that regenerates the report from its runs_export.json (sweeps only)."""
    no_samples_reason: str = "Not available: published data has no checkpoints."

    @property
    def has_budgets(self) -> bool:
        return bool(np.isfinite(self.runs.column("budget")).any())


def _ci(est: Estimate, key: str) -> str:
    iv = est.ci95(key)
    return fmt_interval(iv) if iv is not None else "(no interval)"


def value_ci(est: Estimate, key: str) -> str:
    """``0.2355 [0.1394, 0.5655]``: the form the summary and the tests read."""
    return f"{fmt(est.point[key])} {_ci(est, key)}"


def fitted(result: Analysis) -> list[tuple[str, Estimate]]:
    """The fitted Chinchilla approaches, most informative first (3, 2, 1)."""
    return [(name, est) for name, est in (("3", result.approach3), ("2", result.approach2),
                                          ("1", result.approach1))
            if isinstance(est, Estimate)]


# --------------------------------------------------------------------------- summary


def _few_resamples(est: Estimate) -> str:
    """A warning when most bootstrap resamples could not be fitted."""
    b = est.bootstrap
    if b is None or b.n_failed <= MAX_FAILED_FRACTION * b.n_resamples:
        return ""
    return f"; only {b.n_resamples - b.n_failed} of {b.n_resamples} resamples could be fitted"


def summary_lines(result: Analysis) -> list[str]:
    """Exponents, tokens per parameter at the largest budget, verdict; then the approaches'
    agreement on a, the held-out runs and (when measured) the run-to-run noise."""
    checks = [holdout_summary(result)]
    if not isinstance(result.agreement, Skipped):
        pairs = "; ".join(
            f"{r.first} − {r.second}: {fmt(r.difference)} {fmt_interval(r.difference_ci)}, "
            + agreement_word(r) for r in result.agreement)
        checks.insert(0, f"**Do the approaches agree on a?** Paired bootstrap difference "
                         f"(agree: 0 inside its 95% interval): {pairs}.")
    noise = noise_summary(result)
    if noise is not None:
        checks.append(noise)
    headline = headline_line(result)
    tested = backtest_summary(result)
    return ([] if headline is None else [headline]) + ([] if tested is None else [tested]) \
        + _fit_lines(result) + checks


def _fit_lines(result: Analysis) -> list[str]:
    fits = fitted(result)
    unit = result.fitted_runs.data_unit
    if not fits:
        reasons = "; ".join(f"Approach {k}: {v.reason}" for k, v in
                            (("3", result.approach3), ("2", result.approach2),
                             ("1", result.approach1)) if isinstance(v, Skipped))
        return [f"**Compute-optimal exponents**: none: every approach was skipped ({reasons}).",
                f"**{unit.capitalize()} per parameter**: not available.",
                "**Verdict**: no compute-optimal fit, so no comparison with Chinchilla or "
                "Kaplan."]
    exps = "; ".join(f"Approach {name} ({KIND[name]}{_few_resamples(est)}): "
                     f"a = {value_ci(est, 'a')}, b = {value_ci(est, 'b')}"
                     for name, est in fits)
    tokens = "; ".join(f"{value_ci(est, 'tokens_per_param')} (Approach {name})"
                       for name, est in fits)
    name, est = fits[0]
    verdict = "; ".join(f"Approach {n}: {judged_position(result, n, e)}" for n, e in fits)
    tpp_iv = est.ci95("tokens_per_param")
    tpp = est.point["tokens_per_param"]
    if tpp_iv is None:
        tok = f"{fmt(tpp)} {unit} per parameter (no interval)"
    elif unit != "tokens":
        tok = (f"Chinchilla's ≈ 20 tokens per parameter is not compared with "
               f"{unit} per parameter")
    elif (problem := interval_problem(est, "tokens_per_param")) is not None:
        tok = f"Chinchilla's ≈ 20 tokens per parameter is not compared: {problem}"
    else:
        where = "inside" if tpp_iv.contains(CHINCHILLA_TOKENS) else "outside"
        tok = f"Chinchilla's ≈ 20 tokens per parameter is {where} our {fmt_interval(tpp_iv)}"
    intervals = (f"95% bootstrap intervals, {result.n_resamples} resamples"
                 if result.n_resamples else "no bootstrap, so no intervals")
    return [
        f"**Compute-optimal exponents** (N_opt ∝ C^a, D_opt ∝ C^b; {intervals}): {exps}.",
        f"**{unit.capitalize()} per parameter** at the largest compute of the runs "
        f"(C = {fmt(result.reference_flops)} FLOPs): {tokens}.",
        f"**Verdict** against Chinchilla (a ≈ 0.5, ≈ 20 tokens per parameter) and Kaplan "
        f"(N_opt ∝ C^0.73): {verdict}. {tok} (Approach {name}; Chinchilla's ≈ 20 holds near "
        "its own budget, 5.76e23 FLOPs).",
    ]


# --------------------------------------------------------------------------- helpers


def _figure_or_note(drawn: Drawn | None, caption: str) -> Block:
    if drawn is None or drawn.path is None:
        why = "not drawn" if drawn is None else drawn.missing
        return Paragraph(f"Not available: {why}.")
    return Figure(f"figures/{drawn.path.name}", caption)


def _int(x: float) -> str:
    return f"{int(round(x)):,}" if np.isfinite(x) else "—"


def _bootstrap_note(est: Estimate) -> str:
    if est.bootstrap is not None:
        b = est.bootstrap
        text = f"{b.n_resamples} resamples, {b.n_failed} failed"
        if b.failures and b.n_failed:
            reason = b.failures[0]
            text += f" (first reason: {reason[:160]}{'…' if len(reason) > 160 else ''})"
        return text
    if est.bootstrap_error:
        return f"bootstrap failed: {est.bootstrap_error}"
    return "no bootstrap"


# --------------------------------------------------------------------------- sections


def isoflop_section(result: Analysis, ri: ReportInput) -> list[Block]:
    blocks: list[Block] = [Heading("IsoFLOP curves (Approach 2)"), _figure_or_note(
        ri.figures.get("isoflop"),
        "Final loss against model size at each compute budget, with the parabola in ln N "
        "fitted to each budget and its minimum (star). Dashed: a budget whose minimum is not "
        "inside the sizes it trained, left out of the fit.")]
    runs = result.fitted_runs  # the points Approach 2 was (or would have been) fitted to
    budget = runs.column("budget")
    labels = np.unique(budget[np.isfinite(budget)])
    if labels.size == 0:
        return blocks
    est = result.approach2
    if isinstance(est, Estimate):
        minima: list[BudgetMinimum] = list(est.fit.budgets)
    else:
        blocks.append(Paragraph(f"Approach 2 was not fitted: {est.reason}."))
        cols = [runs.column(k) for k in ("N", "D", "C", "loss")]
        minima = [budget_minimum(b, *(col[budget == b] for col in cols)) for b in labels]
    rows = tuple((fmt(m.budget), fmt(m.flops), str(m.n_runs), str(m.n_sizes),
                  fmt(m.n_opt) if m.ok else "—", fmt(m.d_opt) if m.ok else "—",
                  fmt(m.loss_opt) if m.ok else "—", "yes" if m.ok else f"no: {m.reason}")
                 for m in minima)
    blocks.append(Table(("budget", "C of the fit (FLOPs)", "runs", "sizes", "N_opt", "D_opt",
                         "loss at N_opt", "used"), rows,
                        (True, True, True, True, True, True, True, False)))
    return blocks


def frontier_section(result: Analysis, ri: ReportInput) -> list[Block]:
    curves = ("training curves underneath in the same colours, the lowest loss reached "
              "with at most that compute (black), " if ri.has_curves
              else "(these runs have no training curves), ")
    blocks: list[Block] = [Heading("Compute frontier"), _figure_or_note(
        ri.figures.get("frontier"),
        "Final loss of every run against its training compute (points, coloured by N), "
        f"{curves}and the loss of the compute-optimal model by Approach 3 (dashed).")]
    a3 = result.approach3
    if isinstance(a3, Estimate):
        blocks.append(Paragraph(
            f"Approach 3 predicts a loss of {value_ci(a3, 'loss_opt')} for the "
            f"compute-optimal model at C = {fmt(result.reference_flops)} FLOPs."))
    return blocks


def allocation_section(result: Analysis, ri: ReportInput) -> list[Block]:
    blocks: list[Block] = [Heading("Compute-optimal allocation: N_opt(C) and D_opt(C)"),
                           _figure_or_note(
        ri.figures.get("allocation"),
        "Compute-optimal parameters and tokens of each fitted approach, shaded: 95% "
        "bootstrap band. Grey: the slopes of Chinchilla (N ∝ C^0.5) and Kaplan "
        "(N ∝ C^0.73, hence D ∝ C^0.27), anchored at our first fit at "
        + ("the middle budget" if ri.has_budgets else "the middle of the compute range")
        + " (dashed vertical line).")]
    rows = []
    for name, est in (("1", result.approach1), ("2", result.approach2),
                      ("3", result.approach3)):
        if isinstance(est, Skipped):
            rows.append((f"{name} ({KIND[name]})", "—", "—", "—", "—", "—",
                         f"skipped: {est.reason}"))
            continue
        rows.append((f"{name} ({KIND[name]})", value_ci(est, "a"), value_ci(est, "b"),
                     value_ci(est, "n_opt"), value_ci(est, "d_opt"),
                     value_ci(est, "tokens_per_param"), _bootstrap_note(est)))
    blocks.append(Table(("approach", "a", "b", f"N_opt at C = {fmt(result.reference_flops)}",
                         "D_opt", f"{result.fitted_runs.data_unit} per parameter", "bootstrap"),
                        tuple(rows)))
    blocks += agreement_blocks(result)
    heavy = [name for name, est in fitted(result) if est.bootstrap is not None
             and est.bootstrap.n_failed > 0.1 * est.bootstrap.n_resamples]
    if heavy:
        blocks.append(Paragraph(
            "Many resamples of Approach " + ", ".join(heavy) + " could not be fitted (a "
            "resampled budget lost its interior minimum); its intervals come from the "
            "successful resamples only, are conditional on a fit being possible, and can "
            "even exclude the point estimate."))
    return blocks


KAPLAN_ROWS = (("alpha_N", "α_N of L(N)", 0.076), ("alpha_D", "α_D of L(D)", 0.095),
               ("alpha_C", "α_C of L(C_min)", 0.050),
               ("n_opt_exponent", "N_opt ∝ C^x (envelope)", 0.73),
               ("joint_alpha_N", "α_N of joint L(N, D)", None),
               ("joint_alpha_D", "α_D of joint L(N, D)", None))


def kaplan_section(result: Analysis, ri: ReportInput) -> list[Block]:
    blocks: list[Block] = [Heading("Kaplan laws: L(N), L(D), L(C)"), _figure_or_note(
        ri.figures.get("kaplan"),
        "Kaplan et al. (2020) power laws, fitted to the lower frontier of the final losses "
        "(the best run at each N, resp. D); L(C_min) to the interior envelope of the "
        "training curves. With an IsoFLOP grid the frontier approximates 'the other "
        "variable is not the bottleneck'.")]
    est = result.kaplan
    if isinstance(est, Skipped):
        return blocks
    rows = []
    for key, label, documented in KAPLAN_ROWS:
        if key in est.point:
            rows.append((label, value_ci(est, key), "—" if documented is None
                         else fmt(documented)))
    blocks.append(Paragraph(f"Conventions: {result.conventions['kaplan']}."))
    blocks.append(Table(("quantity", "ours [95% interval]", "Kaplan 2020"), tuple(rows)))
    skipped = getattr(est.fit, "skipped", {})
    if skipped:
        blocks.append(Bullets(tuple(f"{part}: not fitted: {why}"
                                    for part, why in skipped.items())))
    return blocks


def approach3_section(result: Analysis, ri: ReportInput) -> list[Block]:
    blocks: list[Block] = [Heading("Approach 3: L(N, D) = E + A/N^α + B/D^β"),
                           _figure_or_note(
        ri.figures.get("approach3"),
        "Left: iso-loss contours of the fitted law in the (N, D) plane, the compute-optimal "
        "frontier (N_opt(C), D_opt(C)) and the runs (points)"
        + (" with their IsoFLOP lines (dotted)" if ri.has_budgets else "")
        + ". Right: the law's prediction against each run's observed loss.")]
    est = result.approach3
    if isinstance(est, Skipped):
        return blocks
    rows = tuple((key, value_ci(est, key)) for key in
                 ("E", "A", "B", "alpha", "beta", "a", "b", "G", "loss_opt"))
    blocks.append(Table(("parameter", "estimate [95% interval]"), rows))
    if flags := flags_of(est.fit):  # analysis.checks.identification
        blocks.append(Bullets(tuple(flag.words for flag in flags)))
    fit = est.fit
    blocks.append(Paragraph(
        f"Huber δ = {fit.delta:g} on ln L, summed over {fit.n_points} runs; objective "
        f"{fmt(fit.objective)}; L-BFGS-B from {fit.n_optimized} of {fit.n_starts} grid starts; "
        f"converged: {fmt(fit.converged)}; bootstrap: {_bootstrap_note(est)}."))
    return blocks


def extrapolation_section(result: Analysis, ri: ReportInput) -> list[Block]:
    blocks: list[Block] = [Heading("Extrapolation check"), _figure_or_note(
        ri.figures.get("extrapolation"),
        "The largest compute is held out and the fits are redone on the rest. Left: the "
        "refit's predicted loss against the observed loss (held-out runs highlighted). "
        "Right: the refits' N_opt(C) extended to the held-out compute (crosses) against "
        "the reference (star).")]
    rows = []
    for name, chk in result.extrapolation.items():
        if not isinstance(chk, ExtrapolationCheck):
            rows.append((name, f"skipped: {chk.reason}", "—", "—", "—", "—"))
            continue
        loss = ("—" if chk.loss_mean_abs_rel_error is None else
                f"{chk.loss_mean_abs_rel_error:.2%} / {chk.loss_max_abs_rel_error:.2%}")
        rows.append((name, chk.held_out, fmt(chk.n_opt_predicted),
                     f"{fmt(chk.n_opt_reference)} ({chk.n_opt_reference_kind})",
                     f"{chk.n_opt_rel_error:+.1%}", loss))
    if rows:
        blocks.append(Table(("approach", "held out", "N_opt predicted", "N_opt reference",
                             "N_opt error", "loss error (mean / max)"), tuple(rows)))
    return blocks


def comparison_section(result: Analysis) -> list[Block]:
    rows = []
    words = {True: "yes", False: "no", None: "—"}
    for row in result.comparison:
        rows.append((row.source, row.quantity, row.approach, fmt(row.documented),
                     fmt(row.estimate), fmt_interval(row.ci95), words[row.inside],
                     words[row.consistent], row.note))
    return [Heading("Every exponent against the documented values"),
            Paragraph("Is the documented value inside our 95% bootstrap interval? It is "
                      "called consistent only when, besides, the approach's law describes "
                      "the runs (section on the laws above). Constants "
                      "(E, A, B, N_c, D_c) depend on tokenizer and data and are not compared."),
            Table(("source", "quantity", "approach", "documented", "ours", "95% interval",
                   "inside", "consistent", "note"), tuple(rows),
                  (False, False, False, True, True, False, False, False, False))]


def _status(row: pd.Series, fitted_schedule: str, seeds: bool) -> str:
    """"finished", and how the run enters the analysis when that is not as a plain point."""
    notes = ["finished"]
    if seeds:
        notes.append(f"seed {int(row['seed'])}")
    if row.get("role") == "holdout":
        notes.append("held out")
    schedule = str(row.get("schedule", ""))
    if schedule != fitted_schedule:
        notes.append(f"{schedule}, not fitted")
    return ", ".join(notes)


def runs_section(ri: ReportInput, fitted_schedule: str = "") -> list[Block]:
    frame = ri.runs.frame.sort_values(["budget", "N", "D"], kind="stable", na_position="last")
    has_shape = "n_layer" in frame.columns
    seeds = "seed" in frame.columns and frame["seed"].nunique() > 1
    if "schedule" not in frame.columns:
        fitted_schedule = ""
    rows = []
    for _, r in frame.head(MAX_RUN_ROWS).iterrows():
        shape = (f"L{_int(r['n_layer'])} d{_int(r['d_model'])} H{_int(r['n_heads'])}"
                 if has_shape and np.isfinite(r["n_layer"]) else "—")
        name = str(r.get("run_name") or r["run_id"])
        rows.append((name, shape, _int(r["N"]), _int(r["D"]), fmt(float(r["C"])),
                     fmt(float(r["budget"])) if np.isfinite(r["budget"]) else "—",
                     f"{r['loss']:.4f}", _status(r, fitted_schedule, seeds)))
    for e in ri.runs.excluded:
        rows.append((e.run, "—", "—", "—", "—", "—", "—", e.reason))
    blocks: list[Block] = [
        Heading("Runs"),
        Paragraph(f"{len(ri.runs)} runs used, {len(ri.runs.excluded)} excluded "
                  "(all columns in `runs.csv`)."),
        Table(("run", "shape (layers, width, heads)", "N", f"D ({ri.runs.data_unit})", "C (FLOPs)",
               "budget", "final loss", "status"), tuple(rows),
              (False, False, True, True, True, True, True, False)),
    ]
    if len(ri.runs) > MAX_RUN_ROWS:
        blocks.append(Paragraph(f"The first {MAX_RUN_ROWS} of {len(ri.runs)} runs are shown."))
    return blocks


def samples_section(ri: ReportInput) -> list[Block]:
    blocks: list[Block] = [Heading("Text samples")]
    if ri.samples is None:
        blocks.append(Paragraph(ri.no_samples_reason))
        return blocks
    blocks.append(Paragraph(
        f"Prompt `{ri.sample_prompt}`, {keys.SAMPLE_NEW_TOKENS} new tokens, temperature "
        f"{keys.SAMPLE_TEMPERATURE:g}, top-k {keys.SAMPLE_TOP_K}, seed {keys.SAMPLE_SEED} "
        "(`python -m pipeline.sample`)."))
    for s in ri.samples:
        head = f"**{s.label}**: {s.name} (run_id `{s.run_id}`, N = {_int(s.n)})"
        if s.text is None:
            # The reason may name the checkpoint folder: shown as a committed report may.
            blocks.append(Paragraph(f"{head}: the sample could not be produced: "
                                    f"{portable(s.error or '')}"))
        else:
            blocks += [Paragraph(f"{head}:"), Code(s.text)]
    return blocks


def provenance_section(ri: ReportInput) -> list[Block]:
    blocks: list[Block] = [Heading("Provenance"), Bullets(tuple(ri.provenance))]
    if ri.sweep_text is not None:
        blocks += [Paragraph("The sweep file:"), Code(ri.sweep_text.rstrip())]
    return blocks


def build(result: Analysis, ri: ReportInput) -> list[Block]:
    """The whole report, in order."""
    excluded = len(result.excluded)
    found = result.answer()
    header: list[Block] = [
        Heading(f"Scaling report: {ri.name}", 1),
        # The answer first, in the first screen (issue 55); the details follow.
        *answer_blocks(None if found is None else found.to_json(),
                       result.fitted_runs.data_unit),
        Paragraph(f"Regenerate with: `{ri.command}`"),
        *([Paragraph(f"Or without the MLflow store, from the runs and curves exported beside "
                     f"this report: `{ri.export_command}`")] if ri.export_command else []),
        Paragraph(f"Runs: {result.source}, {result.n_runs} used, {excluded} excluded"
                  f"{_fitted_words(result)}. "
                  f"N = {result.conventions['N']}, C = {result.conventions['C']}; Kaplan laws: "
                  f"{result.conventions['kaplan']}. Intervals: 95% percentile bootstrap over "
                  f"{_unit(result)}"
                  f"{' drawn within each budget' if result.bootstrap_by == 'budget' else ''}, "
                  f"{result.n_resamples} resamples, seed {result.seed}."),
        Heading("Summary"),
        Bullets(tuple(summary_lines(result))),
    ]
    return (header + backtest_section(result)
            + isoflop_section(result, ri) + frontier_section(result, ri)
            + allocation_section(result, ri) + laws_section(result)
            + repetition_section(result)
            + kaplan_section(result, ri)
            + approach3_section(result, ri) + other_fits_section(result.fits)
            + noise_section(result)
            + extrapolation_section(result, ri) + holdout_section(result)
            + conventions_section(result) + schedules_section(result)
            + comparison_section(result) + runs_section(ri, result.selection.schedule)
            + samples_section(ri) + provenance_section(ri))


def _fitted_words(result: Analysis) -> str:
    """How the used runs became the fitted points, when that is not one run, one point."""
    sel = result.selection
    parts = []
    if sel.n_averaged:
        parts.append(f"{sel.n_averaged} seed replicate(s) averaged into their cells")
    if sel.holdout is not None:
        parts.append(f"{len(sel.holdout)} held out")
    reasons = [e.reason for e in sel.left_out]
    if schedules := sum(r.startswith("schedule ") for r in reasons):
        parts.append(f"{schedules} of another schedule left out")
    if repeats := sum(r.startswith("repeats its data") for r in reasons):
        parts.append(f"{repeats} that repeated their data left out (--max-epochs)")
    if sel.repeats is not None:
        parts.append(f"{len(sel.repeats)} cell(s) at the N and D of a fitted one on fewer "
                     f"unique {result.fitted_runs.data_unit} (repeat variants) fitted by the "
                     "data-constrained laws only")
    if sel.repeated:
        parts.append(f"{len(sel.repeated)} fitted run(s) repeat their data, up to "
                     f"{max(e for _, e in sel.repeated):.2f} epochs: repeated data is worth "
                     f"less than fresh (Muennighoff et al. 2023), so their held-out losses are "
                     f"higher than fresh {result.fitted_runs.data_unit} would give "
                     f"(--max-epochs 1 leaves them out)")
    if not parts:
        return ""
    return f"; the fits use {len(sel.fitted)} points ({'; '.join(parts)})"


def _unit(result: Analysis) -> str:
    return "cells (seeds averaged)" if result.selection.n_averaged else "runs"
