"""What the planner returns: a Plan (RunSpecs in order) and the Skipped cells, each with why.

A cell that cannot be trained is never dropped silently: every step of planning (ladder,
cells, specs) appends it to the one list of Skipped that goes out with the Plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.vocab.spec import RunSpec


@dataclass(frozen=True)
class Skipped:
    """A planned cell that cannot be trained, and why."""

    label: str
    reason: str


@dataclass(frozen=True)
class Plan:
    specs: list[RunSpec]
    skipped: list[Skipped]
