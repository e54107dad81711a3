"""The documented results our estimates are compared with (the papers below; docs/analysis.md,
"Reproducing Besiroglu et al. (2024)", for the numbers this repository reproduces).

Sources:
  Kaplan et al. 2020, "Scaling Laws for Neural Language Models" (arXiv:2001.08361):
      α_N = 0.076, α_D = 0.095, α_C^min = 0.050, N_opt ∝ C^0.73.
  Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models" (arXiv:2203.15556),
      Table 2: a = 0.50 / 0.49 / 0.46 and b = 0.50 / 0.51 / 0.54 for Approaches 1 / 2 / 3;
      ≈ 20 tokens per parameter; Approach 3 α = 0.34, β = 0.28.
  Besiroglu et al. 2024, "Chinchilla Scaling: A replication attempt" (arXiv:2404.10102):
      refit of Approach 3: a = 0.513, ≈ 20 tokens per parameter.
Constants (E, A, B, N_c, D_c) depend on the tokenizer and data, so only exponents and the
tokens-per-parameter ratio are compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from analysis.numerics.bootstrap import Interval


@dataclass(frozen=True)
class Documented:
    """One published value and which of our statistics it is compared with."""

    source: str
    quantity: str
    """Name of our statistic: alpha_N, alpha_D, alpha_C, n_opt_exponent, a, b, alpha, beta,
    tokens_per_param."""
    approach: str
    """Which of our fits estimates it: "kaplan", "1", "2" or "3"."""
    value: float
    note: str = ""


KAPLAN = "Kaplan 2020"
HOFFMANN = "Hoffmann 2022"
BESIROGLU = "Besiroglu 2024"

DOCUMENTED: tuple[Documented, ...] = (
    Documented(KAPLAN, "alpha_N", "kaplan", 0.076, "L(N), non-embedding N"),
    Documented(KAPLAN, "alpha_D", "kaplan", 0.095, "L(D)"),
    Documented(KAPLAN, "alpha_C", "kaplan", 0.050, "L(C_min), envelope of curves"),
    Documented(KAPLAN, "n_opt_exponent", "kaplan", 0.73, "N_opt ∝ C^x, envelope of curves"),
    Documented(HOFFMANN, "a", "1", 0.50, "N_opt ∝ C^a"),
    Documented(HOFFMANN, "b", "1", 0.50, "D_opt ∝ C^b"),
    Documented(HOFFMANN, "tokens_per_param", "1", 20.0, "≈ 20"),
    Documented(HOFFMANN, "a", "2", 0.49, "N_opt ∝ C^a"),
    Documented(HOFFMANN, "b", "2", 0.51, "D_opt ∝ C^b"),
    Documented(HOFFMANN, "tokens_per_param", "2", 20.0, "≈ 20"),
    Documented(HOFFMANN, "a", "3", 0.46, "N_opt ∝ C^a"),
    Documented(HOFFMANN, "b", "3", 0.54, "D_opt ∝ C^b"),
    Documented(HOFFMANN, "alpha", "3", 0.34, "L = E + A/N^α + B/D^β"),
    Documented(HOFFMANN, "beta", "3", 0.28, "L = E + A/N^α + B/D^β"),
    Documented(HOFFMANN, "tokens_per_param", "3", 20.0, "≈ 20"),
    Documented(BESIROGLU, "a", "3", 0.513, "refit of Approach 3"),
    Documented(BESIROGLU, "tokens_per_param", "3", 20.0, "≈ 20, refit of Approach 3"),
)


@dataclass(frozen=True)
class ComparisonRow:
    """A documented value next to our estimate and 95% interval."""

    source: str
    quantity: str
    approach: str
    documented: float
    estimate: float | None
    """None when the approach was skipped or this quantity could not be fitted."""
    ci95: Interval | None
    """None without a bootstrap."""
    inside: bool | None
    """Whether the documented value lies inside our 95% interval (None: no interval)."""
    note: str = ""
    describes_runs: bool | None = None
    """Whether the approach's law describes the runs (analysis.checks.verdict); None for an
    approach that is not a law judged there (Kaplan's separate laws, Approaches 1 and 2)."""
    interval_problem: str | None = None
    """Why our interval cannot be compared (analysis.checks.verdict.interval_problem: most
    resamples failed, or it excludes our estimate); None when it can."""

    @property
    def consistent(self) -> bool | None:
        """"Consistent with the documented value": inside our interval *and* from a law that
        describes the runs. A law that does not is never called consistent (issue 16); an
        interval that cannot be compared is not judged (None)."""
        if self.inside is None or self.interval_problem is not None:
            return None
        return self.inside and self.describes_runs is not False

    def to_json_dict(self) -> dict:
        return {
            "source": self.source, "quantity": self.quantity, "approach": self.approach,
            "documented": self.documented, "estimate": self.estimate,
            "ci95": None if self.ci95 is None else self.ci95.as_list(),
            "inside": self.inside, "describes_runs": self.describes_runs,
            "consistent": self.consistent, "interval_problem": self.interval_problem,
            "note": self.note,
        }


def compare(estimates: dict[str, tuple[dict[str, float], dict[str, Interval]] | str],
            *, tokens_note: str = "",
            not_describing: Mapping[str, str] | None = None,
            interval_problems: Mapping[tuple[str, str], str] | None = None,
            ) -> tuple[ComparisonRow, ...]:
    """One row per documented value.

    ``estimates`` maps an approach ("kaplan", "1", "2", "3") to (point statistics, 95%
    intervals), or to the reason the approach was skipped. ``not_describing`` maps each judged
    law (analysis.checks.verdict) that does not describe the runs to the reason, and each
    that does to "" ; its rows are then never "consistent". ``interval_problems`` maps
    (approach, quantity) to why that interval cannot be compared; its row is not judged.
    """
    judged = {} if not_describing is None else dict(not_describing)
    problems = {} if interval_problems is None else dict(interval_problems)
    rows = []
    for doc in DOCUMENTED:
        entry = estimates.get(doc.approach, "not run")
        note = doc.note
        describes = None if doc.approach not in judged else not judged[doc.approach]
        if describes is False:
            note = (f"{note}; this law does not describe the runs ({judged[doc.approach]}), "
                    "so a value inside its interval is not agreement")
        if doc.quantity == "tokens_per_param" and tokens_note:
            note = f"{note}; ours {tokens_note}"
        if isinstance(entry, str):
            rows.append(ComparisonRow(doc.source, doc.quantity, doc.approach, doc.value,
                                      None, None, None, f"{note}; skipped: {entry}", describes))
            continue
        point, intervals = entry
        estimate = point.get(doc.quantity)
        interval = intervals.get(doc.quantity)
        if estimate is None:
            note = f"{note}; not estimated"
        inside = None if interval is None or estimate is None else interval.contains(doc.value)
        problem = problems.get((doc.approach, doc.quantity)) if inside is not None else None
        if problem is not None:
            note = f"{note}; not judged: {problem}"
        rows.append(ComparisonRow(doc.source, doc.quantity, doc.approach, doc.value,
                                  estimate, interval, inside, note, describes, problem))
    return tuple(rows)
