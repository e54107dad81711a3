"""The sections of a sweep file: shape, data, train, resources, and the isoflop / grid /
runs plans."""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from pipeline.config.base import (
    _NO_VALUE,
    MAX_COUNT,
    MAX_D_MODEL,
    MAX_LAYERS,
    PosFloat,
    PosInt,
    Strict,
    _duplicates,
    _Problems,
    _raise_if,
    _unused,
)
from pipeline.vision.sources import IMAGE_PREFIX, image_source_problem
from pipeline.vocab.recipe import ScalingRecipe
from pipeline.vocab.spec import DataSpec, TrainSpec


class ShapeSection(Strict):
    """The shape rule of pipeline.vocab.families: depth -> d_model = aspect_ratio * depth."""

    aspect_ratio: Annotated[float, Field(gt=0, le=4096)] = 16.0
    """d_model / n_layer before rounding up to a multiple of head_dim."""
    head_dim: Annotated[int, Field(ge=2, le=4096)] = 16
    """Fixed attention head size (even: rotary embeddings rotate pairs)."""
    gqa_ratio: Annotated[int, Field(ge=1, le=4096)] = 2
    """llama: target n_heads / n_kv_heads."""
    ffn_multiple: Annotated[int, Field(ge=1, le=65536)] = 16
    """llama: SwiGLU hidden width is rounded up to a multiple of this."""
    max_depth: Annotated[int, Field(ge=1, le=MAX_LAYERS)] = 64
    """Largest depth the rule may produce."""
    knob: Literal["depth", "width"] = "depth"
    """The size knob that sizes.count scans: depth (n_layer; d_model = aspect_ratio * depth)
    or width (d_model = width * head_dim; n_layer = d_model / aspect_ratio, rounded), which
    steps N ~1.5x at a time instead of ~2.5x at CPU scale."""
    max_width: Annotated[int, Field(ge=1, le=MAX_D_MODEL)] = 512
    """Largest width (in head_dim units) the width knob may produce."""
    patch_size: PosInt | None = None
    """vit only (required there): the side of a square patch in pixels; it must divide the
    image side (data.image_size, or the source's own: 8 for images:digits)."""

    @model_validator(mode="after")
    def _even_head_dim(self) -> ShapeSection:
        if self.head_dim % 2:
            _raise_if([(("head_dim",), "must be even", self.head_dim)])
        return self


_HF_SPEC = re.compile(r"hf:[^:]+(?::[^:]*){0,2}")  # as pipeline.data.settings._parse_hf_spec reads it


_DATA_DEFAULTS = DataSpec()  # the one source of the data settings' defaults
_TRAIN_DEFAULTS = TrainSpec()


class DataSection(Strict):
    corpus: str = _DATA_DEFAULTS.corpus
    """"stdlib" (the interpreter's standard library sources), "stdlib+tests" (the same with its
    test suites: ~31.5 MB instead of ~12), "site-packages" (the .py sources of the installed
    packages: hundreds of MB, as installed; cap it with max_bytes), a text file, directory or glob
    (relative to the sweep file; "path:" prefix optional, needed for a file named "stdlib"),
    or "hf:<dataset>[:<split>][:<field>]"."""
    tokenizer: Literal["bytes", "chars", "bpe"] = _DATA_DEFAULTS.tokenizer  # type: ignore[assignment]
    """Tokenizer; bytes has vocabulary 256."""
    bpe_vocab_size: Annotated[int, Field(ge=260, le=65535)] = _DATA_DEFAULTS.bpe_vocab_size
    """Vocabulary size of the BPE tokenizer (only with tokenizer: bpe)."""
    seq_len: Annotated[int, Field(ge=2, le=65536)] = 128
    """Context length in tokens."""
    val_fraction: Annotated[float, Field(gt=0, lt=0.5)] = _DATA_DEFAULTS.val_fraction
    """Fraction of documents held out for validation."""
    max_bytes: PosInt | None = _DATA_DEFAULTS.max_bytes
    """Optional cap on the corpus size in bytes (for quick trials)."""
    image_size: PosInt | None = _DATA_DEFAULTS.image_size
    """Image corpora (vit): resize every image to this side in pixels; required for
    images:folder: and images:hf: sources, which are converted to RGB; images:digits is 8x8
    grey and is not resized."""
    max_epochs: Annotated[float, Field(gt=0, le=1e6)] = 1.0
    """The sweep refuses (before training) any run whose D exceeds this many passes over the
    train split: repeated tokens lower the value of data (Muennighoff et al. 2023) and bias a
    scaling fit. Raise it to allow repetition explicitly. Not part of run_id: it decides which
    runs may exist, not what a run learns."""

    @model_validator(mode="after")
    def _check(self) -> DataSection:
        problems = []
        c = self.corpus
        if not c.strip() or c.removeprefix("path:") == "":
            problems.append((("corpus",), "must name a corpus", c))
        elif c != c.strip():
            problems.append((("corpus",), "has leading or trailing spaces", c))
        elif any(ord(ch) < 32 or ord(ch) == 127 for ch in c):
            problems.append((("corpus",), "contains a control character", c))
        elif c.startswith("hf:") and not _HF_SPEC.fullmatch(c):
            problems.append((("corpus",), "expected hf:<dataset>[:<split>][:<text_field>]", c))
        elif c.startswith(IMAGE_PREFIX) and (why := image_source_problem(c)):
            problems.append((("corpus",), why, c))
        if self.tokenizer != "bpe":
            problems += _unused(self, ("bpe_vocab_size",), f"with tokenizer {self.tokenizer!r}")
        _raise_if(problems)
        return self


class TrainSection(Strict):
    batch_size: PosInt = 16
    """Sequences per optimizer step (with batch_rule_steps: the reference batch, at which the
    peak LR is `lr` and evaluation uses eval_batches batches)."""
    batch_rule_steps: PosInt | None = None
    """A batch that grows with the run's tokens D: each run takes the power of two nearest
    (in log) to D / (seq_len * batch_rule_steps) sequences, clipped to [batch_min, batch_max],
    so every run takes about this many steps. At a fixed budget the small models (many tokens)
    then take large batches and the large ones (few tokens) more, smaller steps, as the recipe
    ablation of docs/recipes.md found best. null: every run uses batch_size."""
    batch_min: PosInt = 1
    """batch_rule_steps only: the smallest batch (a power of two)."""
    batch_max: PosInt = 128
    """batch_rule_steps only: the largest batch (a power of two dividing the
    eval_batches * batch_size evaluation sequences, which every run keeps)."""
    lr_batch_exponent: Annotated[float, Field(ge=0, le=1)] = 0.0
    """batch_rule_steps only: scale the peak LR by (batch / batch_size) ** exponent (0.5: the
    square-root rule for Adam, Malladi et al. 2022; 0: the same LR at every batch)."""
    lr: Annotated[float, Field(gt=0, le=1.0)] = 3e-3
    """Peak learning rate at the reference width."""
    lrs: Annotated[list[Annotated[float, Field(gt=0, le=1.0)]], Field(min_length=1)] | None = None
    """A tuning sweep: one run per peak LR per cell (replaces `lr`)."""
    lr_width_exponent: Annotated[float, Field(ge=0, le=2)] = 0.0
    """Scale the peak LR with width: lr * (lr_reference_d_model / d_model) ** exponent."""
    lr_reference_d_model: PosInt = 64
    """Width at which the peak LR equals `lr`."""
    warmup_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.05
    """Warmup length as a fraction of each run's steps."""
    warmup_min_steps: Annotated[int, Field(ge=0)] = 0
    """Warmup at least this many steps, but at most a fifth of the run (short runs whose
    fractional warmup is a few dozen steps start unstably; docs/recipes.md)."""
    schedule: Literal["cosine", "wsd", "constant"] = "cosine"
    """cosine decays over exactly each run's steps (Chinchilla: cosine length matches D)."""
    schedules: Annotated[list[Literal["cosine", "wsd", "constant"]],
                         Field(min_length=1)] | None = None
    """A schedule comparison: one run per schedule per cell (replaces `schedule`)."""
    decay_fraction: Annotated[float, Field(gt=0, le=1)] = 0.2
    """wsd only: fraction of steps in the final linear decay."""
    wsd_reuse: bool = False
    """wsd only: the wsd runs of one shape (same seed and LR) share one trunk, the longest
    run; each shorter run starts from the trunk's state where its own decay begins, so only
    its decay is trained (same result as training it alone, bit for bit). Warmup then
    follows the longest run (warmup_fraction of its steps) for all of them."""
    min_lr_ratio: Annotated[float, Field(ge=0, le=1)] = 0.1
    """Final LR as a fraction of the peak."""
    weight_decay: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """AdamW decoupled weight decay on matrices."""
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.95
    grad_clip: Annotated[float, Field(ge=0)] = 1.0
    """Global gradient-norm clip (0 disables)."""
    seeds: Annotated[list[Annotated[int, Field(ge=0, le=2**32 - 1)]], Field(min_length=1)] = [0]
    """One run per seed for every cell."""
    data_seed: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = None
    """Every run draws its batches (windows, images, masks) from this seed, its own seed then
    setting its initialisation (and dropout): the seeds of a cell read the same batches
    (common random numbers; docs/recipes.md). null: each run's batches follow its own seed."""
    evals_per_run: PosInt = 8
    """Evaluations along each run (plus one at the end), fewer where eval_budget binds."""
    eval_batches: PosInt = 8
    """Fixed validation batches per evaluation (of batch_size sequences: every run of the
    sweep scores the same eval_batches * batch_size held-out sequences)."""
    eval_budget: Annotated[float, Field(gt=0, le=1)] | None = ScalingRecipe.eval_budget
    """Text families: the evaluations of a run cost at most this share of its training
    compute (a forward pass is ~1/3 of a training step). A run whose evaluations would cost
    more keeps its final evaluation and as many of the evals_per_run along the way as fit
    (pipeline/vocab/recipe.py). null: every run makes evals_per_run evaluations."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """auto: bf16 autocast on CUDA; on a CPU fp32, except where the planner resolves it to
    bf16 with the head in fp32 (pipeline.vocab.recipe.resolve_auto: GPT from d_model 128 on a CPU
    with native bf16)."""
    head_precision: Literal["autocast", "fp32"] = "autocast"
    """Under bf16: the final norm and output head in bf16 ("autocast") or in fp32."""
    mask_rate: Annotated[float, Field(gt=0, lt=1)] = _TRAIN_DEFAULTS.mask_rate
    """Masked-LM families (bert) only: share of positions chosen for prediction, of which 80%
    become [MASK], 10% a random token and 10% stay (BERT's 15%; pipeline.data.masking)."""
    sampling: Literal["random", "shuffled"] = "random"
    """Training windows: "random" offsets (with replacement; earlier sweeps' runs) or
    "shuffled" (non-overlapping windows, a new permutation each epoch: no token seen twice
    within data.max_epochs <= 1)."""
    min_steps: PosInt = 20
    """Cells with fewer optimizer steps are reported as skipped, not trained."""
    variants: Annotated[list[dict[str, Any]], Field(min_length=1)] | None = None
    """An ablation: every cell is also trained with each variant, a mapping of the recipe
    keys above to other values (e.g. {batch_size: 16}), besides the recipe itself."""

    @model_validator(mode="after")
    def _check(self) -> TrainSection:
        problems = _duplicates(self.seeds, "seeds") + _duplicates(self.lrs or [], "lrs")
        if self.lrs is not None and "lr" in self.model_fields_set:
            problems.append((("lr",), "is replaced by lrs; give one of them", self.lr))
        problems += _duplicates(self.schedules or [], "schedules")
        if self.schedules is not None and "schedule" in self.model_fields_set:
            problems.append((("schedule",), "is replaced by schedules; give one of them",
                             self.schedule))
        problems += self._variant_problems() + self._batch_rule_problems()
        if "wsd" not in self.schedule_list():
            problems += _unused(self, ("decay_fraction", "wsd_reuse"),
                                f"without schedule 'wsd' (schedule {self.schedule!r})"
                                if self.schedules is None else
                                f"without 'wsd' in schedules {self.schedules}")
        elif self.warmup_fraction + self.decay_fraction > 1:
            problems.append((("decay_fraction",), "warmup_fraction + decay_fraction exceeds 1 "
                             f"(warmup_fraction is {self.warmup_fraction})", self.decay_fraction))
        _raise_if(problems)
        return self

    def _batch_rule_problems(self) -> list[tuple[tuple[str | int, ...], str, object]]:
        if self.batch_rule_steps is None:
            return _unused(self, ("batch_min", "batch_max", "lr_batch_exponent"),
                           "without batch_rule_steps")
        out: list[tuple[tuple[str | int, ...], str, object]] = []
        for name in ("batch_min", "batch_max"):
            value = getattr(self, name)
            if value & (value - 1):
                out.append(((name,), "must be a power of two", value))
        if self.batch_min > self.batch_max:
            out.append((("batch_min",), f"exceeds batch_max ({self.batch_max})", self.batch_min))
        eval_sequences = self.eval_batches * self.batch_size
        if eval_sequences % self.batch_max:
            out.append((("batch_max",), "must divide the evaluation's eval_batches * "
                        f"batch_size = {eval_sequences} sequences (every run evaluates the "
                        "same text)", self.batch_max))
        if self.wsd_reuse:
            out.append((("wsd_reuse",), "cannot share trunks between runs whose batch differs "
                        "(batch_rule_steps is set)", self.wsd_reuse))
        return out

    def scaling_recipe(self) -> ScalingRecipe:
        """The rules this section's numbers feed (pipeline/vocab/recipe.py)."""
        return ScalingRecipe(**{f.name: getattr(self, f.name) for f in fields(ScalingRecipe)})

    def batch_for(self, tokens: float, seq_len: int) -> int:
        """Sequences per step of a run of `tokens` tokens (ScalingRecipe.batch_for)."""
        return self.scaling_recipe().batch_for(tokens, seq_len)

    def schedule_list(self) -> list[str]:
        return list(self.schedules) if self.schedules is not None else [self.schedule]

    def recipes(self) -> list[TrainSection]:
        """The recipe, then one per variant (each validated as a whole train section)."""
        base = self.model_dump(exclude={"variants"}, exclude_unset=True)
        return [self] + [TrainSection.model_validate({**base, **v}) for v in self.variants or []]

    def _variant_problems(self) -> list[tuple[tuple[str | int, ...], str, object]]:
        out: list[tuple[tuple[str | int, ...], str, object]] = []
        allowed = sorted(set(TrainSection.model_fields) - VARIANT_EXCLUDED)
        base = self.model_dump(exclude={"variants"}, exclude_unset=True)
        for i, variant in enumerate(self.variants or []):
            bad = [k for k in variant if k not in allowed]
            for key in bad:
                out.append((("variants", i, key), "cannot vary here; a variant may set "
                            f"{', '.join(allowed)}", variant[key]))
            if bad:
                continue
            try:
                TrainSection.model_validate({**base, **variant})
            except ValidationError as e:
                for err in e.errors():
                    cause = (err.get("ctx") or {}).get("error")
                    if isinstance(cause, _Problems):
                        out += [(("variants", i, *loc), msg, v) for loc, msg, v in cause.problems]
                    else:
                        out.append((("variants", i, *err["loc"]), err["msg"],
                                    err.get("input", _NO_VALUE)))
        return out


VARIANT_EXCLUDED = {"variants", "seeds", "lrs", "schedules", "min_steps"}
"""Train keys a variant cannot set: what multiplies the plan already, and the planner's floor."""


class ResourcesSection(Strict):
    num_cpus: PosInt = 1
    """CPUs per run (whole numbers: a run gets this many torch threads)."""
    num_gpus: Annotated[float, Field(ge=0, le=64)] = 0.0
    """GPUs per run; fractions (e.g. 0.25) pack several small runs on one GPU."""
    max_retries: Annotated[int, Field(ge=0, le=100)] = 2
    """Ray retries of a run whose worker process or node died."""
    checkpoint_interval: Annotated[int, Field(ge=0)] = 0
    """Checkpoint every this many steps (0: at every evaluation)."""
    device_memory_gb: Annotated[float, Field(gt=0, le=100_000)] | None = None
    """Memory of the device one run trains on, GiB (a GPU's memory with num_gpus > 0, RAM
    per run otherwise). The plan refuses, before anything starts, runs whose estimated peak
    (pipeline.estimate.memory) exceeds 90% of it. Unset: this machine's, when the runs train
    here; unchecked (and said so) for a GPU sweep planned without a GPU."""
    micro_batch_size: PosInt | Literal["auto"] | None = None
    """Sequences per forward/backward pass, a divisor of every run's batch: gradients are
    accumulated over batch / micro_batch_size passes (same update, less activation memory).
    "auto": per run, the batch halved until the estimated peak fits device_memory_gb
    (required with auto). Unset: the whole batch. Not part of run_id."""

    workers_per_run: Annotated[int, Field(ge=1, le=1024)] = 1
    """Data-parallel workers per run (issue 18): above 1, each run is a Ray Train job of this
    many workers, each with num_cpus (and num_gpus), training an equal share of every global
    batch with DDP (gloo on CPUs, NCCL on GPUs). Must divide every batch. The same update up
    to floating-point rounding, so not part of run_id (docs/cluster.md)."""

    workers_from_params: Annotated[float, Field(gt=0)] | None = None
    """Only runs with at least this many parameters (N, all of them) get workers_per_run
    workers; smaller runs of the sweep train on one (a ladder's small rungs gain nothing
    from splitting a batch). Unset: every run gets workers_per_run."""
    sharding: Literal["ddp", "fsdp"] = "ddp"
    """With workers_per_run > 1: "ddp" (each worker holds the whole model, gradients and
    AdamW state; gradients averaged) or "fsdp" (FSDP2: all three sharded across the workers,
    for models whose optimizer state does not fit one device). Not part of run_id."""

    @property
    def cpus_per_run(self) -> int:
        """CPUs one run holds: its workers' together."""
        return self.num_cpus * self.workers_per_run

    @model_validator(mode="after")
    def _auto_needs_memory(self) -> ResourcesSection:
        if self.micro_batch_size == "auto" and self.device_memory_gb is None:
            raise ValueError("micro_batch_size: auto needs device_memory_gb (the memory the "
                             "micro-batch must fit)")
        if self.workers_from_params is not None and self.workers_per_run == 1:
            raise ValueError("workers_from_params needs workers_per_run > 1 (the workers the "
                             "runs from that size get)")
        if self.sharding == "fsdp" and self.workers_per_run == 1:
            raise ValueError("sharding: fsdp needs workers_per_run > 1 (it shards the model "
                             "across a run's workers)")
        return self


class ShapeOverride(Strict):
    n_layer: Annotated[int, Field(ge=1, le=MAX_LAYERS)]
    d_model: Annotated[int, Field(ge=1, le=MAX_D_MODEL)]


class SizesSection(Strict):
    """Which model sizes a budget (or the grid) uses: one of depths, widths, shapes, count."""

    depths: Annotated[list[PosInt], Field(min_length=1)] | None = None
    """Explicit depths of the shape rule (each <= shape.max_depth)."""
    widths: Annotated[list[PosInt], Field(min_length=1)] | None = None
    """Explicit widths of the shape rule's width knob (d_model = width * head_dim)."""
    shapes: Annotated[list[ShapeOverride], Field(min_length=1)] | None = None
    """Explicit shapes (n_layer, d_model); d_model must be a multiple of shape.head_dim."""
    count: Annotated[int, Field(ge=1, le=MAX_COUNT)] | None = None
    """isoflop only: this many sizes spread in log N around the guess of the optimum."""
    span: Annotated[float, Field(gt=1, le=1e6)] = 8.0
    """With count: ratio of the largest to the smallest target N."""
    tokens_per_param: Annotated[float, Field(gt=0, le=1e6)] = 20.0
    """With count: the guess N* = sqrt(C / (6 * tokens_per_param)) (Chinchilla: 20)."""
    max_embedding_fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    """With count: only rungs of the ladder whose token and position embeddings are at most
    this share of N (1/3 keeps GPT models of 2 layers and more at byte vocabularies: models
    that are mostly lookup tables do not scale like language models)."""
    max_tokens_per_param: Annotated[float, Field(gt=0, le=1e6)] | None = None
    """With count: at each budget, only sizes whose D/N is at most this (e.g. 300: the far
    under-parameterised end, where a few layers see hundreds of epochs' worth of tokens per
    parameter, is left out of the IsoFLOP sets)."""

    @model_validator(mode="after")
    def _check(self) -> SizesSection:
        given = [n for n in ("depths", "widths", "shapes", "count")
                 if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of depths, widths, shapes, count "
                f"({' and '.join(given) + ' given' if given else 'none given'})"
            )
        problems = _duplicates(self.depths or [], "depths")
        problems += _duplicates(self.widths or [], "widths")
        problems += _duplicates(self.shapes or [], "shapes")
        if self.count is None:
            problems += _unused(self, ("span", "tokens_per_param", "max_embedding_fraction",
                                       "max_tokens_per_param"), "without count")
        _raise_if(problems)
        return self

    def size_count(self) -> int:
        return len(self.depths or self.widths or self.shapes or []) or (self.count or 0)


class ReplicatesSection(Strict):
    """Run-to-run noise: the cells of some budgets trained again with other seeds."""

    seeds: Annotated[list[Annotated[int, Field(ge=0, le=2**32 - 1)]], Field(min_length=1)]
    """Extra seeds (besides train.seeds) for every cell of the budgets below."""
    budgets: Annotated[list[PosFloat], Field(min_length=1)]
    """Which of isoflop.budgets get the extra seeds."""


class RepeatsSection(Strict):
    """Every cell of some budgets again on part of the train split (DataSpec.train_fraction):
    same N and D, fewer unique tokens U, so the decay of repeated data (R_D*, Muennighoff et
    al. 2023) is identifiable. A variant is a cell (own run id, role main, train.seeds)
    making D / (fraction x split) passes, which data.max_epochs must allow."""

    fractions: Annotated[list[Annotated[float, Field(gt=0, lt=1)]], Field(min_length=1)]
    """Shares of the train split, each in (0, 1): 0.333 trains on a third of the corpus's
    train tokens, so 3x the passes of the same cell on all of it."""
    budgets: Annotated[list[PosFloat], Field(min_length=1)]
    """Which of isoflop.budgets get the variants (every cell of each)."""


class HoldoutSection(Strict):
    """Held-out budgets: trained after the main budgets at the size the main fit predicts
    optimal, kept out of every fit, and reported against the fit's prediction."""

    budgets: Annotated[list[PosFloat], Field(min_length=1)]
    """Compute budgets C in FLOPs, usually about 3x above the largest main budget."""
    count: Annotated[int, Field(ge=1, le=9)] = 1
    """Sizes per held-out budget: the ladder rung nearest the predicted N_opt, and its
    nearest neighbours for count > 1."""
    seeds: Annotated[list[Annotated[int, Field(ge=0, le=2**32 - 1)]],
                     Field(min_length=1)] | None = None
    """Extra seeds (besides train.seeds) for the held-out runs: the prediction is checked
    against the mean over seeds, since one run scatters by the run-to-run noise."""


class IsoflopSection(Strict):
    budgets: Annotated[list[PosFloat], Field(min_length=1)]
    """Compute budgets C in FLOPs (under flops_convention)."""
    sizes: SizesSection
    """Model sizes trained at every budget."""
    replicates: ReplicatesSection | None = None
    """Optional: extra seeds for some budgets, to measure run-to-run noise."""
    holdout: HoldoutSection | None = None
    """Optional: held-out budgets, planned from the fit of the main budgets."""
    repeats: RepeatsSection | None = None
    """Optional: the cells of some budgets again on part of the train split (repeated data
    at the same N and D)."""

    @model_validator(mode="after")
    def _check(self) -> IsoflopSection:
        problems = _duplicates(self.budgets, "budgets")
        # Extra seeds and data shares of some budgets: those budgets must be main ones.
        for name, values in (("replicates", "seeds"), ("repeats", "fractions")):
            if (part := getattr(self, name)) is None:
                continue
            problems += [((name,) + loc, msg, v) for loc, msg, v in
                         _duplicates(getattr(part, values), values)
                         + _duplicates(part.budgets, "budgets")]
            problems += [((name, "budgets", i), f"is not one of budgets {self.budgets}", b)
                         for i, b in enumerate(part.budgets) if b not in self.budgets]
        if self.holdout is not None:
            problems += [(("holdout",) + loc, msg, v) for loc, msg, v in
                         _duplicates(self.holdout.budgets, "budgets")
                         + _duplicates(self.holdout.seeds or [], "seeds")]
            for i, b in enumerate(self.holdout.budgets):
                if b in self.budgets:
                    problems.append((("holdout", "budgets", i), "is also a main budget; a "
                                     "held-out budget must differ from every fitted one", b))
        _raise_if(problems)
        return self


class GridSection(Strict):
    sizes: SizesSection
    """Model sizes (depths or shapes)."""
    tokens: Annotated[list[PosFloat], Field(min_length=1)]
    """Token counts D; every size is trained at every D."""

    @model_validator(mode="after")
    def _check(self) -> GridSection:
        problems = _duplicates(self.tokens, "tokens")
        if self.sizes.count is not None:
            problems.append((("sizes", "count"), "is for isoflop sweeps only; give depths or "
                             "shapes", self.sizes.count))
        _raise_if(problems)
        return self


class RunEntry(Strict):
    n_layer: Annotated[int, Field(ge=1, le=MAX_LAYERS)] | None = None
    d_model: Annotated[int, Field(ge=1, le=MAX_D_MODEL)] | None = None
    depth: PosInt | None = None
    """Use the shape rule instead of (n_layer, d_model)."""
    tokens: PosFloat
    """Training tokens D."""

    @model_validator(mode="after")
    def _shape_given(self) -> RunEntry:
        explicit = self.n_layer is not None or self.d_model is not None
        if self.depth is not None and explicit:
            raise ValueError("give either depth or (n_layer, d_model), not both")
        if self.depth is None and (self.n_layer is None or self.d_model is None):
            raise ValueError("give depth, or both n_layer and d_model")
        return self
