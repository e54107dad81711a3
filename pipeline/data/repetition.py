"""The planner's data-repetition rule: no run trains past data.max_epochs passes over the
train split (default 1: every planned token is a new one, with train.sampling: shuffled),
or over its own share of it where the run reads only part (DataSpec.train_fraction: a run at
a third of the split makes 3x the passes of one at the whole split).

Checked by the sweep driver once the token store is open (its train split's length is the
number of unique tokens available), before Ray starts, for the main plan and again for the
held-out plan, whose D is known only after the main fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.data.subset import kept_count
from pipeline.vocab.families import data_unit
from pipeline.vocab.spec import RunSpec

_LISTED = 8  # offending runs named in full; the rest are counted


def repetition_problem(specs: Sequence[RunSpec], train_tokens: int, max_epochs: float,
                       where: str) -> str:
    """Why the plan would repeat data ("" when no run exceeds max_epochs). ``train_tokens``:
    the whole train split; each run's epochs are over its own share (kept_count)."""
    def split(s: RunSpec) -> int:
        return kept_count(train_tokens, s.data.train_fraction)

    over = [s for s in specs if s.tokens > max_epochs * split(s)]
    if not over:
        return ""
    unit = data_unit(specs[0].model.family)
    lines = [f"  {s.run_id} ({s.model.family} L{s.model.n_layer} d{s.model.d_model}"
             + (f", budget {s.budget:.3g}" if s.budget else "") + f"): D = {s.tokens:,} "
             f"{unit} = {s.tokens / max(split(s), 1):.2f} epochs"
             + (f" of its {s.data.train_fraction:g} of the split ({split(s):,} {unit})"
                if s.data.train_fraction < 1 else "")
             for s in over[:_LISTED]]
    if len(over) > _LISTED:
        lines.append(f"  ... and {len(over) - _LISTED} more")
    corpus = specs[0].data.corpus
    return (f"{where}: {len(over)} run(s) would train past data.max_epochs = {max_epochs:g} "
            f"passes over the train split of corpus {corpus!r} ({train_tokens:,} {unit}):\n"
            + "\n".join(lines)
            + "\nRaise data.max_epochs in the sweep file to allow repeated data explicitly, "
              "use a larger corpus, or plan smaller runs (sizes.max_tokens_per_param, budgets)")
