"""Planning: SweepConfig -> RunSpecs (deterministic), and the cells that cannot be built.

IsoFLOP cells: for budget C and model shape m, D = C / flops_per_token(m, convention), then
steps = round(D / (batch_size * seq_len)); the achieved C differs from the budget only by that
rounding (under 1% once steps >= 50). Cells with fewer than train.min_steps steps, cells whose
achieved C misses the budget by more than ISOFLOP_TOLERANCE, sizes the shape rule cannot make,
and cells that resolve to a run already planned are returned as Skipped with the reason, never
dropped silently. The order is the file's order of budgets (or token counts, or runs), sizes
in increasing parameter count within a budget, then seeds; expanding twice gives the same list.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path

from pipeline.config import SizesSection, SweepConfig, resolve_corpus
from pipeline.vision.sources import declared_classes, declared_geometry, is_image_corpus
from pipeline.vocab import flops
from pipeline.vocab.families import (
    ModelConfig,
    ShapeError,
    data_unit,
    get_family,
    make_config,
    model_vocab_size,
)
from pipeline.vocab.recipe import resolve_auto, trained_precision
from pipeline.vocab.shapes import ShapeRule, shape_for_depth, shape_for_size, shape_for_width
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

ISOFLOP_TOLERANCE = 0.01
"""Largest relative gap between an isoflop cell's achieved FLOPs and its budget."""


@dataclass(frozen=True)
class Skipped:
    """A planned cell that cannot be trained, and why."""

    label: str
    reason: str


@dataclass(frozen=True)
class Plan:
    specs: list[RunSpec]
    skipped: list[Skipped]


def vocab_size_for(cfg: SweepConfig) -> int | None:
    """Vocabulary size known without reading the corpus (None for chars: depends on it). For
    an image corpus: its number of classes (None unless the source fixes it: the digits)."""
    if is_image_corpus(cfg.data.corpus):
        return declared_classes(cfg.data.corpus)
    return {"bytes": 256, "bpe": cfg.data.bpe_vocab_size}.get(cfg.data.tokenizer)


def _model_vocab(cfg: SweepConfig, vocab_size: int | None) -> int:
    """The models' vocabulary: the tokenizer's (vocab_size, or known from the settings) plus
    the family objective's own tokens (bert's [MASK]: families.model_vocab_size)."""
    if (vocab := vocab_size or vocab_size_for(cfg)) is None:
        raise ValueError("vocab_size must be given: the chars tokenizer's vocabulary and an "
                         "image folder's classes are read from the data")
    return model_vocab_size(cfg.family, vocab)


def data_spec_for(cfg: SweepConfig, sweep_path: Path | str) -> DataSpec:
    """The sweep's data section, with a relative corpus path resolved against the sweep file."""
    d = cfg.data
    settings = {f.name: getattr(d, f.name) for f in fields(DataSpec)}
    return DataSpec(**{**settings, "corpus": resolve_corpus(d.corpus, Path(sweep_path))})


def _rule(cfg: SweepConfig) -> ShapeRule:
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


def _one_family(cfg: SweepConfig, out: list[ModelConfig], m: ModelConfig, label: str,
                skipped: list[Skipped]) -> None:
    if problem := group_problem(cfg, m):
        skipped.append(Skipped(label, problem))
    else:
        out.append(m)


def _shapes(cfg: SweepConfig, sizes: SizesSection, vocab: int, budget: float | None,
            skipped: list[Skipped]) -> list[ModelConfig]:
    """The model shapes of one budget (or of the grid), in increasing size, deduplicated."""
    rule, T = _rule(cfg), cfg.data.seq_len
    out: list[ModelConfig] = []
    if sizes.depths is not None:
        for depth in sizes.depths:
            try:
                m = shape_for_depth(cfg.family, depth, rule, vocab_size=vocab, seq_len=T)
            except ShapeError as e:
                skipped.append(Skipped(f"depth {depth}", str(e)))
            else:
                _one_family(cfg, out, m, f"depth {depth}", skipped)
    elif sizes.widths is not None:
        for width in sizes.widths:
            try:
                m = shape_for_width(cfg.family, width, rule, vocab_size=vocab, seq_len=T)
            except ShapeError as e:
                skipped.append(Skipped(f"width {width}", str(e)))
            else:
                _one_family(cfg, out, m, f"width {width}", skipped)
    elif sizes.shapes is not None:
        for s in sizes.shapes:
            label = f"shape n_layer={s.n_layer} d_model={s.d_model}"
            try:
                m = make_config(cfg.family, s.n_layer, s.d_model, vocab_size=vocab, seq_len=T,
                                head_dim=rule.head_dim, gqa_ratio=rule.gqa_ratio,
                                ffn_multiple=rule.ffn_multiple, **rule.image())
            except ShapeError as e:
                skipped.append(Skipped(label, str(e)))
            else:
                _one_family(cfg, out, m, label, skipped)
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
                                      "already in the list (shape rule too coarse); deduplicated"))
    return unique


def _around_guess(cfg: SweepConfig, sizes: SizesSection, rule: ShapeRule, vocab: int,
                  budget: float, skipped: list[Skipped]) -> list[ModelConfig]:
    """`count` distinct sizes of the rule's ladder spread over `span` around the guess N*.

    Chinchilla: C = 6 N D and D = k N  =>  N* = sqrt(C / (6 k)). Targets are log-spaced over
    span; each maps to the nearest rung of the ladder. Where the ladder is coarser than the
    targets (tiny models), two targets can land on one rung: the nearest unused rungs around
    N* fill in, so a budget always gets `count` sizes (or as many as the ladder has).
    """
    assert sizes.count is not None
    ladder = _allowed_rungs(cfg, sizes, _ladder(cfg, rule, vocab), budget, skipped)
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
    if len(chosen) < sizes.count:
        skipped.append(Skipped(f"C={budget:.3g}", f"the shape rule has only {len(ladder)} sizes"))
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
                               f"{sizes.max_tokens_per_param} at this budget"))
    return out


def _train_spec(cfg: SweepConfig, model: ModelConfig, steps: int, batch: int, seed: int,
                base_lr: float, schedule: str, warmup_of: int, cpu_bf16: bool) -> TrainSpec:
    """The recipe of one run (pipeline/vocab/recipe.py's rules); warmup follows `warmup_of` steps
    (its own, or the longest run's for WSD runs sharing a trunk)."""
    t = cfg.train
    recipe = t.scaling_recipe()
    eval_batches = recipe.eval_batches(t.eval_batches, batch)
    # An image family scores its whole validation split (eval_batches is unused), outside
    # eval_budget.
    evals = (t.evals_per_run if get_family(cfg.family).objective.images
             else recipe.evals_per_run(t.evals_per_run, steps, eval_batches))
    kind = "cuda" if cfg.resources.num_gpus > 0 else "cpu"
    precision, head_precision = resolve_auto(
        t.precision, t.head_precision, kind, model.family, model.d_model,
        cpu_bf16=kind == "cpu" and t.precision == "auto" and cpu_bf16)
    return TrainSpec(
        batch_size=batch, lr=recipe.peak_lr(base_lr, model.d_model, batch),
        min_lr_ratio=t.min_lr_ratio, warmup_steps=recipe.warmup_steps(warmup_of),
        schedule=schedule,
        decay_fraction=t.decay_fraction, weight_decay=t.weight_decay, beta1=t.beta1,
        beta2=t.beta2, grad_clip=t.grad_clip, seed=seed,
        data_seed=None if t.data_seed == seed else t.data_seed,  # one computation, one spec
        evals_per_run=evals,
        eval_batches=eval_batches, sampling=t.sampling, mask_rate=t.mask_rate,
        precision=precision, head_precision=head_precision,
    )


@dataclass(frozen=True)
class _Cell:
    model: ModelConfig
    tokens: float
    budget: float | None
    seeds: tuple[int, ...]


def _ladder(cfg: SweepConfig, rule: ShapeRule, vocab: int) -> list[ModelConfig]:
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


def expand(cfg: SweepConfig, sweep_path: Path | str = ".", vocab_size: int | None = None, *,
           cpu_bf16: bool = False) -> Plan:
    """All RunSpecs of a sweep, in a deterministic order, plus the skipped cells.

    Held-out budgets are not in it: they depend on the fit of these runs (plan_holdout).
    ``cpu_bf16``: whether the CPUs the runs train on compute bf16 natively, which decides what
    `precision: auto` becomes on a CPU (pipeline.vocab.recipe.resolve_auto). An input, never
    asked of this machine: a plan, hence every run id, is the same wherever it is made (the
    sweep command passes what its machine has: pipeline.estimate.device)."""
    vocab = _model_vocab(cfg, vocab_size)
    d = cfg.data
    skipped: list[Skipped] = []
    seeds = tuple(cfg.train.seeds)
    cells: list[_Cell] = []
    if cfg.isoflop is not None:
        rep = cfg.isoflop.replicates
        for budget in cfg.isoflop.budgets:
            extra = tuple(rep.seeds) if rep is not None and budget in rep.budgets else ()
            for m in _shapes(cfg, cfg.isoflop.sizes, vocab, budget, skipped):
                cells.append(_Cell(m, flops.tokens_for_budget(m, budget, cfg.flops_convention),
                                   budget, seeds + extra))
    elif cfg.grid is not None:
        shapes = _shapes(cfg, cfg.grid.sizes, vocab, None, skipped)
        cells = [_Cell(m, tok, None, seeds) for m in shapes for tok in cfg.grid.tokens]
    else:
        rule = _rule(cfg)
        for i, r in enumerate(cfg.runs or []):
            try:
                if r.depth is not None:
                    m = shape_for_depth(cfg.family, r.depth, rule, vocab_size=vocab,
                                        seq_len=d.seq_len)
                else:
                    m = make_config(cfg.family, r.n_layer, r.d_model, vocab_size=vocab,
                                    seq_len=d.seq_len, head_dim=rule.head_dim,
                                    gqa_ratio=rule.gqa_ratio, ffn_multiple=rule.ffn_multiple,
                                    **rule.image())
            except ShapeError as e:
                skipped.append(Skipped(f"runs[{i}]", str(e)))
                continue
            if problem := group_problem(cfg, m):
                skipped.append(Skipped(f"runs[{i}]", problem))
                continue
            cells.append(_Cell(m, r.tokens, None, seeds))
    data = data_spec_for(cfg, sweep_path)
    specs: list[RunSpec] = []
    seen: dict[str, str] = {}
    for recipe in cfg.train.recipes():  # the recipe, then each ablation variant
        specs += _specs(cfg.model_copy(update={"train": recipe}), data, cells, skipped,
                        role="main", cpu_bf16=cpu_bf16, seen=seen)
    if cfg.train.wsd_reuse:
        specs = _share_trunks(specs)
    return Plan(specs, skipped)


def _specs(cfg: SweepConfig, data: DataSpec, cells: list[_Cell], skipped: list[Skipped],
           role: str, cpu_bf16: bool, seen: dict[str, str] | None = None) -> list[RunSpec]:
    """The RunSpecs of buildable cells x seeds x LRs x schedules; the rest go to skipped.

    seen: run_id -> label of the runs planned so far (a run planned twice is skipped)."""
    built: list[tuple[_Cell, int, int, str]] = []
    longest: dict[ModelConfig, int] = {}  # steps of the longest run per shape (WSD trunks)
    for cell in cells:
        m, budget = cell.model, cell.budget
        batch = cfg.train.batch_for(cell.tokens, cell.model.seq_len)
        tokens_per_step = batch * cell.model.seq_len
        steps = round(cell.tokens / tokens_per_step)
        unit = data_unit(m.family)
        label = (f"{m.family} L{m.n_layer} d{m.d_model}"
                 + (f" at C={budget:.3g}" if budget else f" D={cell.tokens:.3g}"))
        if steps < cfg.train.min_steps:
            skipped.append(Skipped(label, f"{cell.tokens:.3g} {unit} give {steps} steps of "
                                          f"{tokens_per_step} {unit} (< min_steps="
                                          f"{cfg.train.min_steps})"))
            continue
        if budget is not None:
            achieved = flops.training_flops(m, steps * tokens_per_step, cfg.flops_convention)
            if abs(achieved / budget - 1) > ISOFLOP_TOLERANCE:
                skipped.append(Skipped(label, f"{steps} steps of {tokens_per_step} {unit} give "
                                              f"{achieved:.4g} FLOPs, off the budget by more "
                                              f"than {ISOFLOP_TOLERANCE:.0%}"))
                continue
        built.append((cell, steps, batch, label))
        longest[m] = max(longest.get(m, 0), steps)

    t = cfg.train
    specs: list[RunSpec] = []
    seen = {} if seen is None else seen
    for cell, steps, batch, label in built:
        for seed, base_lr, schedule in itertools.product(
                cell.seeds, t.lrs or [t.lr], t.schedule_list()):
            shared = schedule == "wsd" and t.wsd_reuse
            train = _train_spec(cfg, cell.model, steps, batch, seed, base_lr, schedule,
                                longest[cell.model] if shared else steps, cpu_bf16)
            # Default: a checkpoint every 1/evals_per_run of the run (at every evaluation where
            # eval_budget leaves them all), so a lost run redoes at most 1/8 of it.
            ckpt = cfg.resources.checkpoint_interval or max(1, steps // t.evals_per_run)
            exec_spec = ExecSpec(threads=cfg.resources.num_cpus, checkpoint_interval=ckpt,
                                 micro_batch_size=_micro_batch(cfg, cell.model, train),
                                 workers=_workers(cfg, cell.model),
                                 sharding=cfg.resources.sharding)
            spec = RunSpec(sweep=cfg.name, model=cell.model, data=data, train=train,
                           steps=steps, budget=cell.budget,
                           flops_convention=cfg.flops_convention, exec=exec_spec, role=role)
            if spec.run_id in seen:
                skipped.append(Skipped(label, f"duplicate of {seen[spec.run_id]}"))
                continue
            seen[spec.run_id] = label
            specs.append(spec)
    return specs


def _workers(cfg: SweepConfig, model: ModelConfig) -> int:
    """exec.workers of a run: resources.workers_per_run, or 1 below workers_from_params."""
    res = cfg.resources
    if res.workers_from_params is not None and flops.params_total(model) < res.workers_from_params:
        return 1
    return res.workers_per_run


def _micro_batch(cfg: SweepConfig, model: ModelConfig, train: TrainSpec) -> int:
    """exec.micro_batch_size of a run: 0 (the whole batch), the sweep's size (at most the
    run's batch: the batch rule's small batches take one pass), or with "auto" the largest
    halving of the batch whose estimated peak fits resources.device_memory_gb."""
    res = cfg.resources
    batch = train.batch_size // _workers(cfg, model)  # the rows one worker trains on
    if res.micro_batch_size is None:
        return 0
    if res.micro_batch_size == "auto":
        from pipeline.estimate.memory import GIB, micro_batch_to_fit

        kind = "cuda" if res.num_gpus > 0 else "cpu"
        bf16 = trained_precision(train.precision, kind) == "bf16"
        micro = micro_batch_to_fit(model, batch, bf16, res.device_memory_gb * GIB)
    else:
        micro = min(res.micro_batch_size, batch)
    return 0 if micro == batch else micro


def _share_trunks(specs: list[RunSpec]) -> list[RunSpec]:
    """WSD reuse: in each group of wsd runs that differ only in length, the longest is the
    trunk and keeps its state where each shorter run's decay begins; those start there.

    A shorter run whose decay would begin at step 0 trains alone.
    """
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, s in enumerate(specs):
        if s.train.schedule == "wsd":
            # Evaluations never change the trajectory (eval_budget gives the lengths their
            # own counts), so runs that differ in them share a trunk too.
            groups[(s.model, s.data, replace(s.train, evals_per_run=0), s.role)].append(i)
    out = list(specs)
    for members in groups.values():
        trunk = max(members, key=lambda i: (specs[i].steps, i))
        points: list[int] = []
        for i in members:
            s = specs[i]
            start = s.train.decay_start(s.steps)
            if i == trunk or start <= 0:
                continue
            points.append(start)
            out[i] = replace(s, exec=replace(s.exec, branch_from=specs[trunk].run_id,
                                             branch_step=start))
        if points:
            t = specs[trunk]
            out[trunk] = replace(t, exec=replace(t.exec, branch_steps=tuple(sorted(set(points)))))
    return out


def plan_holdout(cfg: SweepConfig, n_opt: dict[float, float], sweep_path: Path | str = ".",
                 vocab_size: int | None = None, *, cpu_bf16: bool = False) -> Plan:
    """The held-out runs: for each held-out budget C, the `count` ladder sizes nearest in
    log N to n_opt[C], the compute-optimal N that the fit of the main budgets predicts
    (``cpu_bf16`` as in expand)."""
    assert cfg.isoflop is not None and cfg.isoflop.holdout is not None
    seeds = tuple(cfg.train.seeds) + tuple(cfg.isoflop.holdout.seeds or ())
    vocab = _model_vocab(cfg, vocab_size)
    ladder = _ladder(cfg, _rule(cfg), vocab)
    skipped: list[Skipped] = []
    cells: list[_Cell] = []
    for budget in cfg.isoflop.holdout.budgets:
        target = math.log(n_opt[budget])
        nearest = sorted(range(len(ladder)), key=lambda j: (
            abs(math.log(flops.params_total(ladder[j])) - target), j))
        for j in sorted(nearest[: cfg.isoflop.holdout.count]):
            m = ladder[j]
            cells.append(_Cell(m, flops.tokens_for_budget(m, budget, cfg.flops_convention),
                               budget, seeds))
    specs = _specs(cfg, data_spec_for(cfg, sweep_path), cells, skipped, role="holdout",
                   cpu_bf16=cpu_bf16)
    return Plan(specs, skipped)


def planned_run_ids(cfg: SweepConfig, held_out: Iterable[tuple[float, float]] = (),
                    sweep_path: Path | str = ".", vocab_size: int | None = None) -> set[str]:
    """The ids of ``planned_specs``."""
    return {s.run_id for s in planned_specs(cfg, held_out, sweep_path, vocab_size)}


def planned_specs(cfg: SweepConfig, held_out: Iterable[tuple[float, float]] = (),
                  sweep_path: Path | str = ".", vocab_size: int | None = None) -> list[RunSpec]:
    """The runs the file plans now, each once (the first planned of an id): its main plan
    and, for each held-out run (N, budget)
    of a ledger, the run the held-out section would plan had the fit put the optimum at that
    N (same recipe and seed). A held-out run of an earlier recipe is therefore not in it. A
    CPU sweep with precision auto plans other ids for CPUs with native bf16
    (pipeline.vocab.recipe.resolve_auto): the runs of both kinds of CPU count, so a report
    made on another machine keeps the runs."""
    held_out = list(held_out)  # read once per kind of CPU
    kinds = [False]
    if (cfg.train.precision == "auto" and cfg.resources.num_gpus == 0
            and get_family(cfg.family).auto_bf16):
        kinds.append(True)
    specs = [s for bf16 in kinds
             for s in _planned_specs(cfg, held_out, sweep_path, vocab_size, bf16)]
    first: dict[str, RunSpec] = {}
    for s in specs:
        first.setdefault(s.run_id, s)
    return list(first.values())


def _planned_specs(cfg: SweepConfig, held_out: list[tuple[float, float]],
                   sweep_path: Path | str, vocab_size: int | None,
                   cpu_bf16: bool) -> list[RunSpec]:
    vocab = vocab_size or vocab_size_for(cfg)  # the tokenizer's; expand checks it is known
    specs = list(expand(cfg, sweep_path, vocab, cpu_bf16=cpu_bf16).specs)
    section = cfg.isoflop.holdout if cfg.isoflop is not None else None
    if section is None:
        return specs
    for n, budget in held_out:
        if budget in section.budgets:
            one = cfg.model_copy(update={"isoflop": cfg.isoflop.model_copy(update={
                "holdout": section.model_copy(update={"budgets": [budget]})})})
            specs += plan_holdout(one, {budget: n}, sweep_path, vocab, cpu_bf16=cpu_bf16).specs
    return specs
