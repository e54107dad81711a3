"""The RunSpecs of cells: each cell's steps and batch, then one run per seed x LR x schedule.

A cell becomes `steps = round(D / (batch_size * seq_len))` steps; the achieved C of an isoflop
cell differs from its budget only by that rounding (under 1% once steps >= 50). Cells with
fewer than train.min_steps steps, isoflop cells whose achieved C misses the budget by more
than ISOFLOP_TOLERANCE, and runs already planned (same run id) go to skipped with the reason.
Each run's recipe (_train_spec: pipeline/vocab/recipe.py's rules) and execution settings
(checkpoints, micro-batch, workers) are decided here, with the vocabulary and data sections
every RunSpec of the sweep shares (vocab_size_for, model_vocab, data_spec_for).
"""

from __future__ import annotations

import itertools
from dataclasses import fields, replace
from pathlib import Path

from pipeline.config import SweepConfig, resolve_corpus
from pipeline.planner.cells import Cell
from pipeline.planner.plan import Skipped
from pipeline.vision.sources import declared_classes, is_image_corpus
from pipeline.vocab import flops
from pipeline.vocab.families import ModelConfig, data_unit, get_family, model_vocab_size
from pipeline.vocab.recipe import resolve_auto, trained_precision
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

ISOFLOP_TOLERANCE = 0.01
"""Largest relative gap between an isoflop cell's achieved FLOPs and its budget."""


def vocab_size_for(cfg: SweepConfig) -> int | None:
    """Vocabulary size known without reading the corpus (None for chars: depends on it). For
    an image corpus: its number of classes (None unless the source fixes it: the digits)."""
    if is_image_corpus(cfg.data.corpus):
        return declared_classes(cfg.data.corpus)
    return {"bytes": 256, "bpe": cfg.data.bpe_vocab_size}.get(cfg.data.tokenizer)


def model_vocab(cfg: SweepConfig, vocab_size: int | None) -> int:
    """The models' vocabulary: the tokenizer's (vocab_size, or known from the settings) plus
    the family objective's own tokens (bert's [MASK]: families.model_vocab_size)."""
    if (vocab := vocab_size or vocab_size_for(cfg)) is None:
        raise ValueError("vocab_size must be given: the chars tokenizer's vocabulary and an "
                         "image folder's classes are read from the data")
    return model_vocab_size(cfg.family, vocab)


def data_spec_for(cfg: SweepConfig, sweep_path: Path | str) -> DataSpec:
    """The sweep's data section, with a relative corpus path resolved against the sweep file."""
    d = cfg.data
    # train_fraction is a cell's (isoflop.repeats), not the data section's: its default here.
    settings = {f.name: getattr(d, f.name) for f in fields(DataSpec)
                if f.name != "train_fraction"}
    return DataSpec(**{**settings, "corpus": resolve_corpus(d.corpus, Path(sweep_path))})


def run_specs(cfg: SweepConfig, data: DataSpec, cells: list[Cell], skipped: list[Skipped],
              role: str, cpu_bf16: bool, seen: dict[str, str] | None = None) -> list[RunSpec]:
    """The RunSpecs of buildable cells x seeds x LRs x schedules; the rest go to skipped.

    seen: run_id -> label of the runs planned so far (a run planned twice is skipped)."""
    built: list[tuple[Cell, int, int, str]] = []
    longest: dict[ModelConfig, int] = {}  # steps of the longest run per shape (WSD trunks)
    for cell in cells:
        m, budget = cell.model, cell.budget
        batch = cfg.train.batch_for(cell.tokens, cell.model.seq_len)
        tokens_per_step = batch * cell.model.seq_len
        steps = round(cell.tokens / tokens_per_step)
        unit = data_unit(m.family)
        label = (f"{m.family} L{m.n_layer} d{m.d_model}"
                 + (f" at C={budget:.3g}" if budget else f" D={cell.tokens:.3g}")
                 + (f" on {cell.train_fraction:g} of the train split"
                    if cell.train_fraction < 1 else ""))
        if steps < cfg.train.min_steps:
            skipped.append(Skipped(label, f"{cell.tokens:.3g} {unit} give {steps} steps of "
                                          f"{tokens_per_step} {unit} (< min_steps="
                                          f"{cfg.train.min_steps})", budget, "min_steps"))
            continue
        if budget is not None:
            achieved = flops.training_flops(m, steps * tokens_per_step, cfg.flops_convention)
            if abs(achieved / budget - 1) > ISOFLOP_TOLERANCE:
                skipped.append(Skipped(label, f"{steps} steps of {tokens_per_step} {unit} give "
                                              f"{achieved:.4g} FLOPs, off the budget by more "
                                              f"than {ISOFLOP_TOLERANCE:.0%}",
                                       budget, "off_budget"))
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
            spec = RunSpec(sweep=cfg.name, model=cell.model,
                           data=(data if cell.train_fraction == 1 else
                                 replace(data, train_fraction=cell.train_fraction)),
                           train=train,
                           steps=steps, budget=cell.budget,
                           flops_convention=cfg.flops_convention, exec=exec_spec, role=role)
            if spec.run_id in seen:
                skipped.append(Skipped(label, f"duplicate of {seen[spec.run_id]}", cell.budget,
                                       "duplicate"))
                continue
            seen[spec.run_id] = label
            specs.append(spec)
    return specs


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
