"""The report's sections on whether the law can be trusted: noise, held-out runs, conventions,
and WSD against cosine runs. Only presentation, like ``analysis.reporting.sections`` (which
places these sections); every number comes from the Analysis that fit.json serialises.
"""

from __future__ import annotations

from analysis.analyze import Analysis
from analysis.checks.agreement import Agreement
from analysis.checks.conventions import ConventionTable
from analysis.checks.heldout import FrontierLaw, HoldoutCheck
from analysis.checks.noise import NoiseEstimate, NoiseGroup
from analysis.checks.schedules import ScheduleComparison
from analysis.fits.results import Estimate, Skipped
from analysis.numerics.bootstrap import Bootstrap, Interval
from analysis.reporting.document import Block, Heading, Paragraph, Table
from analysis.text import fmt, fmt_interval

MAX_GROUP_ROWS = 30


def _draws(group: NoiseGroup) -> str:
    """The seeds of a replicate group; "1 (data 0)" for a run on another seed's batches."""
    data = group.data_seeds or group.seeds
    return ", ".join(str(s) if d in (s, -1) else f"{s} (data {d})"
                     for s, d in zip(group.seeds, data, strict=True))


def _pct(x: float | None) -> str:
    """A signed relative error or difference, e.g. +1.23%."""
    return "—" if x is None else f"{x:+.2%}"


def _with_ci(value: float | None, iv: Interval | None) -> str:
    if value is None:
        return "—"
    return fmt(value) + ("" if iv is None else f" {fmt_interval(iv)}")


def _noise_words(noise: NoiseEstimate, unit: str) -> str:
    return (f"σ = {fmt(noise.sigma)} {fmt_interval(noise.sigma_ci)} {unit} "
            f"({noise.rel_sigma:.2%} of the loss, 95% interval "
            f"[{noise.rel_sigma_ci.low:.2%}, {noise.rel_sigma_ci.high:.2%}])"
            + _offset_words(noise))


def _offset_words(noise: NoiseEstimate) -> str:
    """How σ treats an offset shared by the runs of a seed (analysis.checks.noise)."""
    if noise.draw_effect_dof == 0 or noise.net_sigma is None:
        return ""
    test = f"F test of a per-seed offset: p = {noise.draw_effect_p:.2g}"
    if noise.balanced:
        return (f", net of an offset per seed ({test}; within cells, offsets included: "
                f"{fmt(noise.pooled_sigma)})")
    return (f", within cells, offsets included, as the fitted points average different seeds "
            f"({test}; net of them: {fmt(noise.net_sigma)})")


# --------------------------------------------------------------------------- summary


def noise_summary(result: Analysis) -> str | None:
    """One summary line on the noise and the residual ratios (None without replicates)."""
    noise = result.noise
    if not isinstance(noise, NoiseEstimate):
        return None
    ratios = [r for r in result.residuals if r.ratio is not None]
    worst = max(ratios, key=lambda r: r.ratio or 0.0) if ratios else None
    judged = ("" if worst is None else
              "; residual/noise ratio: Approach 3 "
              + next((fmt(r.ratio) for r in ratios if r.what == "Approach 3"), "—")
              + f", largest {fmt(worst.ratio)} ({worst.what})")
    prop = result.noise_propagation
    spread = ("" if not isinstance(prop, Bootstrap) or "a" not in prop.samples else
              f". Re-running every run with another seed would move Approach 2's a within "
              f"{fmt_interval(prop.interval('a'))} (noise propagation; the bootstrap over "
              "runs above also varies the grid)")
    return (f"**Run-to-run noise** from {noise.n_groups} seed-replicate groups: "
            f"{_noise_words(noise, result.fitted_runs.loss_unit)}{judged}{spread}.")


def holdout_summary(result: Analysis) -> str:
    """One summary line on the held-out runs."""
    check = result.holdout
    if not isinstance(check, HoldoutCheck):
        return f"**Held-out budget**: not tested: {check.reason}."
    parts = []
    for name, label in (("approach3", "Approach 3"), ("frontier", "compute frontier")):
        worst = check.max_abs_error(name)
        if worst is not None:
            verdict = "within" if worst < check.target else "outside"
            parts.append(f"{label} max |error| {worst:.2%} ({verdict} the "
                         f"{check.target:.0%} target)")
    text = "; ".join(parts) if parts else "no predictor could be fitted"
    runs = sum(r.n_seeds for r in check.rows)
    cells = "" if runs == len(check.rows) else f" in {len(check.rows)} cell(s), seeds averaged"
    return f"**Held-out budget** ({runs} run(s){cells}, never fitted): {text}."


# --------------------------------------------------------------------------- sections


def noise_section(result: Analysis) -> list[Block]:
    blocks: list[Block] = [Heading("Run-to-run noise")]
    noise = result.noise
    if isinstance(noise, NoiseEstimate):
        blocks.append(Paragraph(
            f"Runs identical except the seed give "
            f"{_noise_words(noise, result.fitted_runs.loss_unit)}: from "
            f"{noise.n_groups} replicate group(s) of {noise.n_runs} runs ({noise.dof} degrees "
            "of freedom; the interval is the χ² interval of a standard deviation). "
            + ("" if noise.draw_effect_dof == 0 else
               "Every run of a seed may share an offset (with shuffled windows a seed fixes "
               "the order in which all its runs read the corpus). Where every cell averages "
               "the same seeds, as here, it moves every fitted point alike, so σ is the "
               "residual of a model with a mean per cell and an offset per seed, not the "
               "spread within cells (analysis/checks/noise.py). " if noise.balanced else
               "Every run of a seed may share an offset (with shuffled windows a seed fixes "
               "the order in which all its runs read the corpus). Here the cells average "
               "different seeds, so the fitted points differ by the offsets too and σ keeps "
               "them: it is the spread within cells (analysis/checks/noise.py). ")
            + "Before any "
            "fit, the seeds of a cell are averaged into one point, so the fits and their "
            f"bootstrap count cells, not seeds ({result.selection.n_averaged} runs merged)."))
        split = result.noise_split
        ratios = split.n_over_n_opt if split is not None else (float("nan"),) * noise.n_groups
        blocks.append(Table(
            ("N", f"D ({result.fitted_runs.data_unit})", "budget", "N / N_opt", "seeds",
             "mean loss", "std over seeds"),
            tuple((fmt(g.N), fmt(g.D), fmt(g.budget), fmt(r), _draws(g),
                   f"{g.mean_loss:.4f}", fmt(g.std_loss))
                  for g, r in zip(noise.groups[:MAX_GROUP_ROWS], ratios, strict=False)),
            (True, True, True, True, False, True, True)))
        if split is not None and split.near is not None and split.far is not None:
            text = (f"Within {split.factor:g}x of their budget's N_opt (Approach 2) the groups "
                    f"spread by {fmt(split.near)} within cells ({split.near_dof} degrees of "
                    f"freedom), further out by {fmt(split.far)} ({split.far_dof}).")
            if split.far > 1.5 * split.near:
                text += (" The noise is not uniform: far from the optimum at a fixed budget a "
                         "run is either short (large N, few steps), where the seed decides "
                         "more of the outcome, or small and repeating its data; the pooled "
                         "spread, and so σ, which the ratios below use, is dominated by those.")
            blocks.append(Paragraph(text))
        if noise.n_groups > MAX_GROUP_ROWS:
            blocks.append(Paragraph(f"The first {MAX_GROUP_ROWS} of {noise.n_groups} groups "
                                    "are shown (all of them in `fit.json`)."))
    else:
        blocks.append(Paragraph(
            f"Not measured: {noise.reason}. Without it the residuals below have no scale; "
            "repeat a few cells with other seeds (`train.seed`) to measure it."))
    prop = result.noise_propagation
    if isinstance(prop, Bootstrap):
        a2 = result.approach2
        boot = ("" if isinstance(a2, Skipped) or a2.ci95("a") is None else
                f"; the bootstrap over runs gives {fmt_interval(a2.ci95('a'))}")
        blocks.append(Paragraph(
            f"Noise propagation: Approach 2 refitted on {prop.n_resamples} simulated re-runs "
            f"(every fitted point plus Gaussian noise of σ/sqrt(seeds averaged); "
            f"{prop.n_failed} could not be fitted) gives a {fmt_interval(prop.interval('a'))}, "
            f"b {fmt_interval(prop.interval('b'))}, {result.fitted_runs.data_unit} per parameter "
            f"{fmt_interval(prop.interval('tokens_per_param'))}: the share of the "
            f"uncertainty of a that another seed for every run would bring{boot}, which also "
            "counts which sizes were trained. It ignores the parabolas' misfit (the ratios "
            "below), so it is a lower bound."))
    if result.residuals:
        rows = tuple((r.what, str(r.n_points), str(r.n_params), fmt(r.rms),
                      fmt(r.expected_rms), fmt(r.ratio)) for r in result.residuals)
        unit = result.fitted_runs.loss_unit
        blocks.append(Table(("fit", "points", "parameters", f"residual RMS ({unit})",
                             "RMS from noise alone", "ratio"), rows,
                            (False, True, True, True, True, True)))
        blocks.append(Paragraph(
            "The ratio divides a fit's residual RMS by what the noise alone would leave "
            "(σ·sqrt(mean 1/seeds)·sqrt((points − parameters)/points)): near 1 the law "
            "explains the data down to the noise; well above 1 it misses structure in the "
            "data. Even for a right law the ratio scatters, by about ±1/sqrt(2·(points − "
            "parameters)): ±0.13 for 35 points and 5 parameters, ±0.35 for a budget of 7 "
            "sizes, so a single budget at 1.5–2 is not yet a misfit."))
    return blocks


def holdout_section(result: Analysis) -> list[Block]:
    blocks: list[Block] = [Heading("Held-out budget")]
    check = result.holdout
    if not isinstance(check, HoldoutCheck):
        blocks.append(Paragraph(f"Not tested: {check.reason}."))
        return blocks
    rows = []
    for r in check.rows:
        a3, fr = r.approach3_error, r.frontier_error
        observed = f"{r.loss:.4f}" + ("" if r.loss_std is None else
                                      f" ± {r.loss_std:.4f} ({r.n_seeds} seeds)")
        rows.append((r.run, fmt(r.N), fmt(r.D), fmt(r.C), observed,
                     _with_ci(r.approach3, r.approach3_ci), _pct(a3),
                     "—" if a3 is None else fmt(abs(a3) < check.target),
                     fmt(r.frontier), _pct(fr), fmt(r.n_over_n_opt)))
    blocks.append(Table(
        ("run", "N", f"D ({result.fitted_runs.data_unit})", "C (FLOPs)", "observed loss",
         "Approach 3 L̂ [95% interval]", "error", f"|error| < {check.target:.0%}",
         "frontier L*(C)", "error", "N / N_opt"), tuple(rows),
        (False, True, True, True, True, True, True, False, True, True, True)))
    text = ("These runs were never fitted. Error = (predicted − observed) / observed; the "
            "observed loss of a cell trained with several seeds is their mean (± their standard "
            "deviation). The "
            "Approach 3 interval is the spread of the prediction over the bootstrap refits: "
            "the law's uncertainty, not the run's seed-to-seed scatter.")
    if check.approach3:
        text += f" No Approach 3 prediction: {check.approach3}."
    frontier = check.frontier
    if isinstance(frontier, FrontierLaw):
        text += (f" Compute frontier: L*(C) = {fmt(frontier.L0)}·(C/{fmt(frontier.C0)})"
                 f"^−{fmt(frontier.g)} through the {frontier.n_points} Approach 2 budget "
                 "minima; it predicts the loss of the compute-optimal model, so it applies "
                 "to a run near the optimum (N / N_opt ≈ 1); a run away from it lies above.")
    else:
        text += f" No compute-frontier prediction: {frontier.reason}."
    if isinstance(result.noise, NoiseEstimate):
        # a held-out run misses a law fitted to seed averages by its seed's offset too
        spread = result.noise.pooled_rel_sigma or result.noise.rel_sigma
        text += (f" For scale: one run's noise is {spread:.2%} of the loss (within cells), "
                 f"so the {check.target:.0%} target is {check.target / spread:.1f} σ.")
    blocks.append(Paragraph(text))
    return blocks


def _refit_cells(est: Estimate | Skipped) -> tuple[str, str]:
    if isinstance(est, Skipped):
        return (f"skipped: {est.reason}", "—") if est.reason != "not requested" else ("—", "—")
    return (_with_ci(est.point["a"], est.ci95("a")),
            _with_ci(est.point["tokens_per_param"], est.ci95("tokens_per_param")))


def _spread_words(table: ConventionTable, name: str, unit: str) -> str | None:
    a, tpp = table.spread(name, "a"), table.spread(name, "tokens_per_param")
    if a is None or tpp is None:
        return None
    return (f"Approach {name}: a ranges over {fmt(a[0])}–{fmt(a[1])} (Δa = "
            f"{fmt(a[1] - a[0])}) and {unit} per parameter over {fmt(tpp[0])}–{fmt(tpp[1])} "
            f"(a factor {fmt(tpp[1] / tpp[0])})")


def conventions_section(result: Analysis) -> list[Block]:
    blocks: list[Block] = [Heading("Conventions")]
    table = result.convention_refits
    if not isinstance(table, ConventionTable):
        blocks.append(Paragraph(f"Not refitted: {table.reason}."))
        return blocks
    rows = []
    for r in table.rows:
        rows.append((r.label, fmt(r.reference_flops), *_refit_cells(r.approach2),
                     *_refit_cells(r.approach3)))
    unit = result.fitted_runs.data_unit
    blocks.append(Table(("convention", "reference C", "Approach 2 a", f"Approach 2 {unit}/param",
                         "Approach 3 a", f"Approach 3 {unit}/param"), tuple(rows),
                        (False, True, False, False, False, False)))
    spreads = [w for w in (_spread_words(table, "3", unit), _spread_words(table, "2", unit))
               if w]
    moves = ("; ".join(spreads) + "." if spreads else
             "No approach could be refitted under two conventions.")
    boot = (f"{table.n_resamples} bootstrap resamples each" if table.n_resamples
            else "no bootstrap")
    laws = [f"C/D = {fmt(r.approach3.fit.per_token.coefficient)}·N^"
            f"{fmt(r.approach3.fit.per_token.exponent)} for {r.n_label} (RMS "
            f"{r.approach3.fit.per_token.rmse_log:.1%} in ln)"
            for r in table.rows if r.c == "exact" and isinstance(r.approach3, Estimate)]
    per_token = f" ({'; '.join(laws)})" if laws else ""
    blocks.append(Paragraph(
        f"The same fitted points under each way of counting N and C ({boot}; tokens per "
        "parameter at the largest compute of the runs in that convention). Approach 3 is "
        "refitted per N; its allocation under exact FLOPs uses FLOPs per token as a power "
        f"law of N fitted to the runs{per_token}. {moves} The main analysis uses N = "
        f"{result.conventions['N']}, C = {result.conventions['C']}."))
    return blocks


def schedules_section(result: Analysis) -> list[Block]:
    """WSD against cosine runs; nothing at all when the sweep has no such pair."""
    comp = result.schedules
    if not isinstance(comp, ScheduleComparison):
        return []
    rows = []
    for p in comp.pairs:
        shape = (f"L{p.n_layer:.0f} d{p.d_model:.0f}" if p.n_layer == p.n_layer
                 and p.d_model == p.d_model else "—")
        rows.append((shape, fmt(p.N), fmt(p.D), f"{p.cosine_loss:.4f} ({p.n_cosine})",
                     f"{p.wsd_loss:.4f} ({p.n_wsd})", f"{p.difference:+.4f}",
                     _pct(p.rel_difference), "—" if p.z is None else f"{p.z:+.2f}",
                     fmt(p.branched)))
    se = comp.se_difference
    mean = (f"Mean difference over {len(comp.pairs)} pair(s): {comp.mean_difference:+.4f} "
            f"{result.fitted_runs.loss_unit}"
            + ("" if se is None else f" ± {fmt(se)} (standard error)") + ".")
    noise = ("" if comp.sigma is None else
             f" z = difference / (σ·sqrt(1/n_cosine + 1/n_wsd)), σ = {fmt(comp.sigma)}: "
             "|z| below about 2 is a difference the seeds alone could make.")
    return [Heading("WSD branches vs cosine runs"),
            Table(("shape", "N", f"D ({result.fitted_runs.data_unit})", "cosine loss (runs)",
                   "WSD loss (runs)",
                   "WSD − cosine", "relative", "z", "branched"), tuple(rows),
                  (False, True, True, True, True, True, True, True, False)),
            Paragraph(f"Cells trained with both schedules (seeds of a schedule averaged). "
                      f"{mean}{noise} The main fits use the {result.selection.schedule} runs "
                      "only.")]


def agreement_word(row: Agreement) -> str:
    """"agree", "differ" or why the pair is not judged (analysis.checks.agreement)."""
    if row.agree is None:
        return f"not judged (both fitted in {row.n_paired} of {row.n_draws} draws)"
    return "agree" if row.agree else "differ"


def agreement_blocks(result: Analysis) -> list[Block]:
    """The approaches compared on a, pair by pair (nothing when fewer than two are fitted)."""
    rows = result.agreement
    if isinstance(rows, Skipped):
        return []
    table = Table(
        ("approaches", "difference in a", "0 inside? (agree)", "intervals overlap?",
         "each estimate inside the other's interval?"),
        tuple((f"{r.first} − {r.second}",
               f"{fmt(r.difference)} {fmt_interval(r.difference_ci)}",
               fmt(r.agree) if r.agree is not None else
               f"not judged ({r.n_paired} of {r.n_draws} draws)",
               fmt(r.overlap), fmt(r.each_inside_other)) for r in rows))
    return [Paragraph(
        "**Do the approaches agree on a?** Each pair's difference with its 95% interval over "
        "the same bootstrap draws (every approach refits the same resample in draw k), so "
        "the interval is that of the difference itself; they agree when it contains 0. The "
        "last two columns are the looser and the stricter reading of two separate "
        "intervals (analysis/checks/agreement.py). A pair that both approaches fitted in "
        "fewer than half of the draws is not judged: its interval describes that minority."),
        table]
