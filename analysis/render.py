"""Human-readable tables of an Analysis (rich), for `python -m analysis.fit`.

Only presentation: every number comes from the Analysis object, the same one that
``analysis.schema.analysis_to_json`` serialises, so the table and the JSON never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from rich.table import Table
from rich.text import Text

from analysis.analyze import Analysis, Estimate, Skipped
from analysis.fits.approach2 import Approach2Fit
from analysis.fits.table import FITS
from analysis.schema import estimate_to_json
from analysis.text import fmt, fmt_interval


def estimate_table(name: str, est: Estimate) -> Table:
    table = Table(title=FITS[name].title, title_justify="left")
    for col in ("quantity", "estimate", "95% interval"):
        table.add_column(col)
    for key, value in est.point.items():
        table.add_row(key, fmt(value), fmt_interval(est.ci95(key)))
    extra = estimate_to_json(name, est)
    for key in ("N_c", "D_c", "C_c", "objective", "n_points"):
        if key in extra:
            table.add_row(key, fmt(extra[key]), "")
    if est.bootstrap is not None:
        b = est.bootstrap
        table.caption = f"bootstrap: {b.n_resamples} resamples of runs, {b.n_failed} failed"
    elif est.bootstrap_error:
        table.caption = f"bootstrap failed: {est.bootstrap_error}"
    return table


def flagged_table(fit: Approach2Fit) -> Table | None:
    if not fit.flagged:
        return None
    table = Table(title="Approach 2: budgets left out (no interior minimum)",
                  title_justify="left")
    table.add_column("budget")
    table.add_column("runs")
    table.add_column("reason")
    for m in fit.flagged:
        table.add_row(f"{m.budget:.3g}", str(m.n_runs), m.reason)
    return table


def comparison_table(result: Analysis) -> Table:
    table = Table(title="Documented results vs ours", title_justify="left")
    for col in ("source", "quantity", "approach", "documented", "ours", "95% interval",
                "inside?", "consistent?"):
        table.add_column(col)
    missing = 0
    for row in result.comparison:
        if row.estimate is None:
            missing += 1
            continue
        table.add_row(row.source, row.quantity, row.approach, fmt(row.documented),
                      fmt(row.estimate), fmt_interval(row.ci95), fmt(row.inside),
                      fmt(row.consistent))
    if missing:
        table.caption = f"{missing} documented value(s) not compared: their fit was skipped"
    return table


def extrapolation_table(checks: Mapping[str, object]) -> Table:
    table = Table(title="Extrapolation: refit without the largest compute", title_justify="left")
    for col in ("approach", "held out", "N_opt predicted", "N_opt reference", "N_opt error",
                "loss error (mean / max)"):
        table.add_column(col)
    for name, chk in checks.items():
        if isinstance(chk, Skipped):
            table.add_row(name, f"skipped: {chk.reason}", "", "", "", "")
            continue
        loss = ("—" if chk.loss_mean_abs_rel_error is None else
                f"{chk.loss_mean_abs_rel_error:.2%} / {chk.loss_max_abs_rel_error:.2%}")
        table.add_row(name, chk.held_out, fmt(chk.n_opt_predicted),
                      f"{chk.n_opt_reference:.4g} ({chk.n_opt_reference_kind})",
                      f"{chk.n_opt_rel_error:+.1%}", loss)
    return table


def render(result: Analysis, console: Console | None = None) -> None:
    # No console markup: the source, the reasons and the conventions carry file, run and
    # column names, in which "[/x]" would raise and "[link=...]" would make a link.
    console = console or Console(markup=False)
    console.print(Text.assemble((result.source, "bold"), f": {result.n_runs} runs"
                  f" ({len(result.excluded)} excluded); N = {result.conventions['N']}, "
                  f"C = {result.conventions['C']}; Kaplan: {result.conventions['kaplan']}; "
                  f"allocation at C = {result.reference_flops:.3g}"))
    for name, est in result.approaches().items():
        if isinstance(est, Skipped):
            if est.reason != "not requested":
                console.print(f"{FITS[name].title}: skipped: {est.reason}")
            continue
        console.print(estimate_table(name, est))
        if isinstance(est.fit, Approach2Fit) and (flagged := flagged_table(est.fit)):
            console.print(flagged)
        skipped_parts = getattr(est.fit, "skipped", {})
        for part, reason in skipped_parts.items():
            console.print(f"  Kaplan {part}: skipped: {reason}")
    console.print(comparison_table(result))
    if result.extrapolation:
        console.print(extrapolation_table(result.extrapolation))
    for line in check_lines(result):
        console.print(line, highlight=False)


def check_lines(result: Analysis) -> list[str]:
    """One line each on the approaches' agreement, the noise, the held-out runs and WSD vs
    cosine (the report has more)."""
    lines = [] if isinstance(result.agreement, Skipped) else [
        f"Approach {r.first} - Approach {r.second}: a differs by {fmt(r.difference)} "
        f"{fmt_interval(r.difference_ci)} (paired bootstrap; "
        + (f"not judged: both fitted in {r.n_paired} of {r.n_draws} draws)" if r.agree is None
           else f"{'agree: 0 inside' if r.agree else 'differ: 0 outside'})")
        for r in result.agreement]
    noise = result.noise
    lines += [f"Run-to-run noise: skipped: {noise.reason}" if isinstance(noise, Skipped) else
             f"Run-to-run noise: sigma = {fmt(noise.sigma)} {fmt_interval(noise.sigma_ci)} "
             f"({noise.n_groups} replicate groups, {noise.dof} degrees of freedom"
             + ("" if not noise.balanced else
                f"; net of an offset per seed, F test p = {noise.draw_effect_p:.2g}, "
                f"within cells {fmt(noise.pooled_sigma)}") + ")"]
    lines += [f"  residual RMS {r.what}: {fmt(r.rms)} (ratio to noise {fmt(r.ratio)})"
              for r in result.residuals]
    holdout = result.holdout
    if isinstance(holdout, Skipped):
        lines.append(f"Held-out runs: skipped: {holdout.reason}")
    else:
        for row in holdout.rows:
            seeds = f" (mean of {row.n_seeds} seeds)" if row.n_seeds > 1 else ""
            lines.append(f"Held-out {row.run}: observed {row.loss:.4f}{seeds}, Approach 3 "
                         f"{fmt(row.approach3)} ({_pct(row.approach3_error)}), frontier "
                         f"{fmt(row.frontier)} ({_pct(row.frontier_error)})")
    if not isinstance(result.schedules, Skipped):
        comp = result.schedules
        lines.append(f"WSD - cosine: mean {comp.mean_difference:+.4f} over "
                     f"{len(comp.pairs)} pair(s) (standard error {fmt(comp.se_difference)})")
    verdict = result.verdict
    if verdict is not None:
        lines += [f"Law {v.approach}: {v.reason()}" for v in verdict.laws]
        head = result.fits.get(verdict.headline) if verdict.headline else None
        if isinstance(head, Estimate):
            lines.append(
                f"Headline ({verdict.headline}"
                f"{'' if verdict.headline_describes else ', residuals ' + verdict.headline_state}): "
                f"a = {fmt(head.point['a'])} {fmt_interval(head.ci95('a'))}, "
                f"{fmt(head.point['tokens_per_param'])} "
                f"{fmt_interval(head.ci95('tokens_per_param'))} "
                f"{result.fitted_runs.data_unit} per parameter")
    return lines


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.2%}"
