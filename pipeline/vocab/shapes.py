"""The shape nearest a parameter count: what a planner asks of a family's shape rule.

Kept apart from pipeline.vocab.families (which pipeline.vocab.flops needs for its types) because it
counts parameters with pipeline.vocab.flops.
"""

from __future__ import annotations

import math
import numbers
from typing import Literal

from pipeline.vocab import flops
from pipeline.vocab.families import ModelConfig, ShapeError, ShapeRule, shape_for_size


def nearest_shape(
    family: str,
    target_params: float,
    rule: ShapeRule,
    *,
    vocab_size: int,
    seq_len: int,
    convention: Literal["total", "non_embedding"] = "total",
) -> ModelConfig:
    """The rule's shape whose parameter count is closest to target_params in log space.

    Why log space: scaling sweeps space sizes geometrically, so 2x too big and 2x too small
    are equally far. Depths 1..rule.max_depth are scanned (the count grows with depth); a tie
    goes to the smaller depth. ``convention`` picks N: "total" (all parameters, Chinchilla)
    or "non_embedding" (Kaplan). Raises ShapeError when the target is outside what the rule
    can make: more than 2x below the depth-1 count, or above the max-depth count.
    """
    counters = {"total": flops.params_total, "non_embedding": flops.params_non_embedding}
    if convention not in counters:
        raise ShapeError(f"unknown parameter convention {convention!r}; known: "
                         f"{', '.join(counters)}")
    is_number = isinstance(target_params, numbers.Real) and not isinstance(target_params, bool)
    if not (is_number and math.isfinite(target_params) and target_params > 0):
        raise ShapeError(f"target_params must be a finite number > 0, got {target_params!r}")
    count = counters[convention]
    shapes = []
    top = rule.max_width if rule.knob == "width" else rule.max_depth
    for size in range(1, top + 1):
        try:
            shapes.append(
                shape_for_size(family, size, rule, vocab_size=vocab_size, seq_len=seq_len)
            )
        except ShapeError:
            break  # width beyond max_depth: the rule ends here
    if not (counts := [count(cfg) for cfg in shapes]):
        raise ShapeError(f"the shape rule builds no {family} shape (depth or width 1 fails)")
    if target_params < counts[0] / 2:
        raise ShapeError(
            f"target_params={target_params:g} is more than 2x below the smallest {family} shape "
            f"({rule.knob} 1: {counts[0]} {convention} params)"
        )
    if target_params > counts[-1]:
        raise ShapeError(
            f"target_params={target_params:g} is above the largest {family} shape "
            f"(max_depth={rule.max_depth}, max_width={rule.max_width}: {counts[-1]} "
            f"{convention} params); raise max_depth or max_width"
        )
    log_target = math.log(target_params)
    best = min(
        range(len(shapes)),
        key=lambda i: (abs(math.log(counts[i]) - log_target), i),
    )
    return shapes[best]
