"""What the planner returns: a Plan (RunSpecs in order) and the Skipped cells, each with why.

A cell that cannot be trained is never dropped silently: every step of planning (ladder,
cells, specs) appends it to the one list of Skipped that goes out with the Plan. Each says
the IsoFLOP budget it was dropped from and a cause, so that a budget left with too few sizes
to fit can be named with why and how to fix it (coverage), not found out after training.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.vocab.spec import RunSpec


@dataclass(frozen=True)
class Skipped:
    """A planned cell that cannot be trained, and why."""

    label: str
    reason: str
    budget: float | None = None
    """The IsoFLOP budget it was dropped from (None: a grid or runs cell, or every budget's)."""
    cause: str = ""
    """What dropped it, one of CAUSES (coverage.py words the fix of each)."""


CAUSES = ("group", "shape", "caps", "ladder", "dedup", "min_steps", "off_budget", "duplicate")
"""group: a head count shape.gqa_ratio does not divide; shape: the shape rule cannot build
it; caps: sizes.max_embedding_fraction / max_tokens_per_param; ladder: the shape rule has
fewer sizes than sizes.count; dedup: two sizes made one shape; min_steps: too few steps;
off_budget: the steps' rounding misses the budget; duplicate: a run already planned (it is
trained once: no size is lost)."""


@dataclass(frozen=True)
class Plan:
    specs: list[RunSpec]
    skipped: list[Skipped]
