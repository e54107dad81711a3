"""The shape rule: one size knob (depth or width) -> a family's full, reproducible shape, and
the shape nearest a parameter count (what a planner asks of it).

The shape rule (nanochat's depth knob, with our own constants):
  n_layer  = depth                                   (the knob)
  d_model  = aspect_ratio * depth, rounded up to a multiple of head_dim
  n_heads  = d_model / head_dim                      (head size is fixed across sizes)
  n_kv_heads (llama) = the largest divisor of n_heads that is <= n_heads / gqa_ratio; a
                       sweep keeps only sizes where that is n_heads / gqa_ratio exactly
                       (one group size per family: pipeline.planner.group_problem)
  d_ff     = 4 * d_model (gpt); 2/3 * 4 * d_model rounded up to ffn_multiple (llama)
Kaplan et al. 2020 (Fig. 5) found loss nearly independent of the aspect ratio d_model/n_layer
over a wide range, so fixing it and moving only depth is a fair one-knob family.

At CPU scale depth is a coarse knob (depth 1 -> 2 -> 3 multiplies N by ~4x, then ~2.5x), too
coarse for 5-7 sizes per IsoFLOP budget. The rule's alternative knob is width, in head_dim units:
  d_model = width * head_dim,  n_layer = max(1, floor(d_model / aspect_ratio + 1/2))
which moves N by ~1.3-1.7x per step while keeping the aspect ratio close to the target.

Kept apart from pipeline.vocab.families (which pipeline.vocab.flops needs for its types) because
nearest_shape counts parameters with pipeline.vocab.flops.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Literal

from pipeline.vocab import flops
from pipeline.vocab.families import ModelConfig, ShapeError, make_config, round_up


@dataclass(frozen=True)
class ShapeRule:
    """How the depth knob becomes a shape. Defaults suit CPU-sized models (<= a few M params)."""

    aspect_ratio: float = 16.0
    """d_model / n_layer before rounding (nanochat uses 64 at GPU scale)."""
    head_dim: int = 16
    """Fixed head size; d_model is rounded up to a multiple of it."""
    gqa_ratio: int = 2
    """llama: target n_heads / n_kv_heads (the actual n_kv_heads must divide n_heads)."""
    ffn_multiple: int = 16
    """llama: SwiGLU hidden size is rounded up to a multiple of this (LLaMA uses 256)."""
    max_depth: int = 64
    """Largest depth (n_layer) the rule produces."""
    knob: Literal["depth", "width"] = "depth"
    """The size knob: depth (n_layer) or width (d_model in head_dim units)."""
    max_width: int = 512
    """Largest width, in head_dim units, when knob is "width"."""
    image_size: int = 0
    """vit: the data's image side in pixels (0 for text families)."""
    patch_size: int = 0
    """vit: patch side in pixels, dividing image_size (0 for text families)."""
    channels: int = 0
    """vit: the data's colour channels (0 for text families)."""

    def image(self) -> dict[str, int]:
        """The image geometry as make_config's keywords (empty for text)."""
        if not self.image_size:
            return {}
        return {"image_size": self.image_size, "patch_size": self.patch_size,
                "channels": self.channels}

    def __post_init__(self) -> None:
        if self.aspect_ratio <= 0:
            raise ShapeError(f"aspect_ratio must be > 0, got {self.aspect_ratio!r}")
        if self.head_dim < 2 or self.head_dim % 2:
            raise ShapeError(f"head_dim must be an even integer >= 2, got {self.head_dim!r}")
        if self.gqa_ratio < 1:
            raise ShapeError(f"gqa_ratio must be >= 1, got {self.gqa_ratio!r}")
        if self.ffn_multiple < 1:
            raise ShapeError(f"ffn_multiple must be >= 1, got {self.ffn_multiple!r}")


def shape_for_depth(
    family: str, depth: int, rule: ShapeRule, *, vocab_size: int, seq_len: int
) -> ModelConfig:
    """The shape rule: depth -> full ModelConfig (see the module docstring)."""
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= rule.max_depth:
        raise ShapeError(f"depth must be an integer in [1, {rule.max_depth}], got {depth!r}")
    d_model = round_up(rule.aspect_ratio * depth, rule.head_dim)
    return make_config(
        family, depth, d_model, vocab_size=vocab_size, seq_len=seq_len,
        head_dim=rule.head_dim, gqa_ratio=rule.gqa_ratio, ffn_multiple=rule.ffn_multiple,
        **rule.image(),
    )


def shape_for_width(
    family: str, width: int, rule: ShapeRule, *, vocab_size: int, seq_len: int
) -> ModelConfig:
    """The width knob: d_model = width * head_dim, depth from the aspect ratio (rounded half up)."""
    if not isinstance(width, int) or isinstance(width, bool) or not 1 <= width <= rule.max_width:
        raise ShapeError(f"width must be an integer in [1, {rule.max_width}], got {width!r}")
    d_model = width * rule.head_dim
    n_layer = max(1, math.floor(d_model / rule.aspect_ratio + 0.5))
    if n_layer > rule.max_depth:
        raise ShapeError(f"width {width} gives n_layer={n_layer} > max_depth={rule.max_depth}")
    return make_config(
        family, n_layer, d_model, vocab_size=vocab_size, seq_len=seq_len,
        head_dim=rule.head_dim, gqa_ratio=rule.gqa_ratio, ffn_multiple=rule.ffn_multiple,
        **rule.image(),
    )


def shape_for_size(
    family: str, size: int, rule: ShapeRule, *, vocab_size: int, seq_len: int
) -> ModelConfig:
    """The rule's knob (depth or width) -> shape."""
    make = shape_for_width if rule.knob == "width" else shape_for_depth
    return make(family, size, rule, vocab_size=vocab_size, seq_len=seq_len)


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
