"""The shape ladder: which model shapes a sweep trains, from its shape rule and sizes section.

The shape rule (shape_rule) turns one number, the knob (depth or width), into a shape; its
ladder (size_ladder) is every size of the knob the rule can make, smallest first. A sizes
section names depths, widths or explicit shapes, or (isoflop sweeps only) a `count` of ladder
sizes around the guessed compute-optimal N at a budget (_around_guess), within the caps on
embeddings and tokens per parameter (_allowed_rungs). Only the family's shapes are kept: with
grouped-query attention, one group size at every size (group_problem). Shapes that cannot be
made, or are left out, go to skipped with the reason.
"""

from __future__ import annotations

import math

from pipeline.config import SizesSection, SweepConfig
from pipeline.planner.plan import Skipped
from pipeline.vision.sources import declared_geometry, is_image_corpus
from pipeline.vocab import flops
from pipeline.vocab.families import ModelConfig, ShapeError, get_family, make_config
from pipeline.vocab.shapes import ShapeRule, shape_for_depth, shape_for_size, shape_for_width


def shape_rule(cfg: SweepConfig) -> ShapeRule:
    s, image = cfg.shape, {}
    if is_image_corpus(cfg.data.corpus):  # the schema made sure the geometry is declared
        side, channels = declared_geometry(cfg.data.corpus, cfg.data.image_size) or (0, 0)
        image = {"image_size": side, "channels": channels, "patch_size": s.patch_size or 0}
    return ShapeRule(aspect_ratio=s.aspect_ratio, head_dim=s.head_dim, gqa_ratio=s.gqa_ratio,
                     ffn_multiple=s.ffn_multiple, max_depth=s.max_depth, knob=s.knob,
                     max_width=s.max_width, **image)


def group_problem(cfg: SweepConfig, m: ModelConfig) -> str | None:
    """Why a shape is not of the sweep's family, for a family with grouped-query attention
    (llama: Family.shape_keys has gqa_ratio): GQA is a fixed group size, n_heads /
    n_kv_heads = shape.gqa_ratio at every size. A head count the ratio does not divide would
    take another group (families.kv_heads_for falls back to a divisor: 17 heads -> 1 KV head,
    a ratio of 17), so that shape is left out of the sweep, with this reason."""
    ratio = cfg.shape.gqa_ratio
    if "gqa_ratio" not in get_family(cfg.family).shape_keys or m.n_heads == m.n_kv_heads * ratio:
        return None
    return (f"n_heads={m.n_heads} is not a multiple of shape.gqa_ratio={ratio} (GQA groups of "
            f"{ratio} query heads per KV head at every size)")


def size_ladder(cfg: SweepConfig, rule: ShapeRule, vocab: int) -> list[ModelConfig]:
    """Every size of the shape rule's knob, smallest first."""
    top = rule.max_width if rule.knob == "width" else rule.max_depth
    out: list[ModelConfig] = []
    for size in range(1, top + 1):
        try:
            m = shape_for_size(cfg.family, size, rule, vocab_size=vocab, seq_len=cfg.data.seq_len)
        except ShapeError:
            break
        if group_problem(cfg, m) is None:  # the ladder holds the family's sizes only
            out.append(m)
    return out


def shapes_for(cfg: SweepConfig, sizes: SizesSection, vocab: int, budget: float | None,
               skipped: list[Skipped]) -> list[ModelConfig]:
    """The model shapes of one budget (or of the grid), in increasing size, deduplicated."""
    rule, T = shape_rule(cfg), cfg.data.seq_len
    out: list[ModelConfig] = []
    if sizes.depths is not None:
        for depth in sizes.depths:
            try:
                m = shape_for_depth(cfg.family, depth, rule, vocab_size=vocab, seq_len=T)
            except ShapeError as e:
                skipped.append(Skipped(f"depth {depth}", str(e), budget, "shape"))
            else:
                _one_family(cfg, out, m, f"depth {depth}", budget, skipped)
    elif sizes.widths is not None:
        for width in sizes.widths:
            try:
                m = shape_for_width(cfg.family, width, rule, vocab_size=vocab, seq_len=T)
            except ShapeError as e:
                skipped.append(Skipped(f"width {width}", str(e), budget, "shape"))
            else:
                _one_family(cfg, out, m, f"width {width}", budget, skipped)
    elif sizes.shapes is not None:
        for s in sizes.shapes:
            label = f"shape n_layer={s.n_layer} d_model={s.d_model}"
            try:
                m = make_config(cfg.family, s.n_layer, s.d_model, vocab_size=vocab, seq_len=T,
                                head_dim=rule.head_dim, gqa_ratio=rule.gqa_ratio,
                                ffn_multiple=rule.ffn_multiple, **rule.image())
            except ShapeError as e:
                skipped.append(Skipped(label, str(e), budget, "shape"))
            else:
                _one_family(cfg, out, m, label, budget, skipped)
    else:
        if budget is None or sizes.count is None:
            raise ValueError("sizes.count needs a compute budget (isoflop sweeps only)")
        out.extend(_around_guess(cfg, sizes, rule, vocab, budget, skipped))
    # A total order (params, depth, width): ties never fall back to set order, which
    # depends on the process's string hash seed.
    unique = sorted(set(out), key=lambda m: (flops.params_total(m), m.n_layer, m.d_model))
    if len(unique) < len(out):
        where = f"budget {budget:.3g}" if budget else "grid"
        skipped.append(Skipped(where, f"{len(out) - len(unique)} size(s) mapped to a shape "
                                      "already in the list (shape rule too coarse); deduplicated",
                               budget, "dedup"))
    return unique


def _one_family(cfg: SweepConfig, out: list[ModelConfig], m: ModelConfig, label: str,
                budget: float | None, skipped: list[Skipped]) -> None:
    if problem := group_problem(cfg, m):
        skipped.append(Skipped(label, problem, budget, "group"))
    else:
        out.append(m)


def _around_guess(cfg: SweepConfig, sizes: SizesSection, rule: ShapeRule, vocab: int,
                  budget: float, skipped: list[Skipped]) -> list[ModelConfig]:
    """`count` distinct sizes of the rule's ladder spread over `span` around the guess N*.

    Chinchilla: C = 6 N D and D = k N  =>  N* = sqrt(C / (6 k)). Targets are log-spaced over
    span; each maps to the nearest rung of the ladder. Where the ladder is coarser than the
    targets (tiny models), two targets can land on one rung: the nearest unused rungs around
    N* fill in, so a budget always gets `count` sizes (or as many as the ladder has).
    """
    assert sizes.count is not None
    full = size_ladder(cfg, rule, vocab)
    ladder = _allowed_rungs(cfg, sizes, full, budget, skipped)
    if not ladder:
        return []
    # vit: a unit of data (an image) is `positions` tokens, C = 6 N S D  =>  N* = sqrt(C/(6 S k)).
    per_unit = ladder[0].positions if ladder[0].is_image else 1
    guess = math.sqrt(budget / (6 * per_unit * sizes.tokens_per_param))
    logs = [math.log(flops.params_total(m)) for m in ladder]
    half = math.log(sizes.span) / 2
    chosen: set[int] = set()
    for i in range(sizes.count):
        frac = i / (sizes.count - 1) if sizes.count > 1 else 0.5
        target = math.log(guess) - half + 2 * half * frac
        chosen.add(min(range(len(ladder)), key=lambda j, t=target: (abs(logs[j] - t), j)))
    by_distance = sorted(range(len(ladder)), key=lambda j: (abs(logs[j] - math.log(guess)), j))
    for j in by_distance:
        if len(chosen) >= sizes.count:
            break
        chosen.add(j)
    if len(chosen) < sizes.count and len(ladder) < len(full):
        # The caps, not the ladder, left too few: say so (the fix is in the sizes section).
        skipped.append(Skipped(f"C={budget:.3g}", f"only {len(ladder)} of the shape rule's "
                               f"{len(full)} sizes are within {_caps(sizes)} at this budget",
                               budget, "caps"))
    elif len(chosen) < sizes.count:
        skipped.append(Skipped(f"C={budget:.3g}", f"the shape rule has only {len(ladder)} sizes",
                               budget, "ladder"))
    return [ladder[j] for j in sorted(chosen)]


def _allowed_rungs(cfg: SweepConfig, sizes: SizesSection, ladder: list[ModelConfig],
                   budget: float, skipped: list[Skipped]) -> list[ModelConfig]:
    """The rungs a budget may use: embeddings at most max_embedding_fraction of N, and D/N at
    most max_tokens_per_param at this budget (D in the sweep's FLOP convention)."""
    out = ladder
    if (cap := sizes.max_embedding_fraction) is not None:
        out = [m for m in out
               if 1 - flops.params_non_embedding(m) / flops.params_total(m) <= cap]
    if (most := sizes.max_tokens_per_param) is not None:
        out = [m for m in out if flops.tokens_for_budget(m, budget, cfg.flops_convention)
               <= most * flops.params_total(m)]
    if not out:
        skipped.append(Skipped(f"C={budget:.3g}", "no size of the shape rule has embeddings "
                               f"<= {sizes.max_embedding_fraction} of N and D/N <= "
                               f"{sizes.max_tokens_per_param} at this budget", budget, "caps"))
    return out


def _caps(sizes: SizesSection) -> str:
    """The caps of a sizes section that are set, as the file spells them."""
    caps = [f"sizes.{k}={v:g}" for k in ("max_embedding_fraction", "max_tokens_per_param")
            if (v := getattr(sizes, k)) is not None]
    return " and ".join(caps)
