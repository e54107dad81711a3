"""Sweep files: pydantic models and load_sweep(path) with errors that name file, field, value.

Validation never changes a value: types are strict (no "2" -> 2, no 2.5 -> 2, no true -> 1),
unknown keys are errors (with a "did you mean" suggestion), settings that the chosen options
would ignore are errors, and everything is checked before Ray or MLflow is touched. Every
message starts with the file, then the line (YAML problems) or the field path, e.g.
``sweeps/x.yaml: train.lr: Input should be greater than 0 (got 0)``.

YAML is read by a SafeLoader subclass (no Python tags, no code execution) with these changes:
  * YAML 1.2 floats: ``1e13`` and ``1.5e11`` are numbers (PyYAML's YAML 1.1 resolver reads
    them as strings);
  * YAML 1.1 integers that YAML 1.2 reads differently are refused: ``010`` (octal 8 in 1.1,
    10 in 1.2) and ``1:30`` (base 60: 90);
  * a key given twice in one mapping is an error (PyYAML keeps the last one silently);
    ``<<: *defaults`` merges still let a mapping override merged keys.

A sweep file (see sweeps/*.yaml):
  name, description, kind (isoflop | grid | runs), family, shape, data, train, resources,
  flops_convention, and the one section isoflop / grid / runs named by kind.
"""

from __future__ import annotations

import datetime
import difflib
import glob
import os
import re
import reprlib
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from pipeline.families import FamilyName
from pipeline.flops import CONVENTIONS
from pipeline.recipe import ScalingRecipe
from pipeline.spec import DataSpec

MAX_FILE_BYTES = 1_000_000
"""A sweep file is a page of YAML; anything larger is a mistake (or an attack)."""
MAX_RUNS = 10_000
"""Most runs one sweep may plan (cells x seeds), so a typo cannot plan a billion runs."""
MAX_LAYERS = 512
"""Largest depth / n_layer accepted (planning scans every depth up to shape.max_depth)."""
MAX_D_MODEL = 65_536
"""Largest explicit d_model accepted."""
MAX_COUNT = 64
"""Most sizes per budget that isoflop.sizes.count may ask for."""


class SweepError(ValueError):
    """A sweep file that cannot be used; the message names the file, field and value."""


# --------------------------------------------------------------------------------------
# YAML
# --------------------------------------------------------------------------------------

_MERGE_TAG = "tag:yaml.org,2002:merge"
_AMBIGUOUS_INT = re.compile(r"[-+]?(?:0[0-7_]+|[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?)")


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats, no ambiguous YAML 1.1 numbers, no duplicate keys."""

    def construct_document(self, node: Node) -> Any:
        _check_duplicate_keys(node)
        return super().construct_document(node)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        # Explicitly tagged scalars (`!!int abc`, `!!timestamp x`) fail inside PyYAML with
        # plain ValueError/AttributeError; give them the line like any other YAML error.
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError, OverflowError):
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise ConstructorError(
                None, None, f"cannot read {_repr.repr(node.value)} as {tag}", node.start_mark
            ) from None

    def construct_yaml_int(self, node: ScalarNode) -> int:
        _refuse_ambiguous_number(node)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: ScalarNode) -> float:
        _refuse_ambiguous_number(node)
        return super().construct_yaml_float(node)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789."),
)
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)


def _refuse_ambiguous_number(node: ScalarNode) -> None:
    if isinstance(node.value, str) and _AMBIGUOUS_INT.fullmatch(node.value):
        raise ConstructorError(
            None, None,
            f"ambiguous number {node.value!r}: YAML 1.1 reads a leading 0 as octal and "
            "a:b as base 60; write it in plain decimal (or quote it for a string)",
            node.start_mark,
        )


def _check_duplicate_keys(root: Node) -> None:
    """Refuse a key given twice in one mapping (iterative: deep files cannot overflow)."""
    stack, visited = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in visited:  # aliases share nodes
            continue
        visited.add(id(node))
        if isinstance(node, MappingNode):
            first: dict[tuple[str, str], yaml.Mark] = {}
            for key, value in node.value:
                if isinstance(key, ScalarNode) and key.tag != _MERGE_TAG:
                    ident = (key.tag, key.value)
                    if ident in first:
                        raise ConstructorError(
                            None, None,
                            f"duplicate key {key.value!r} (first given on line "
                            f"{first[ident].line + 1})",
                            key.start_mark,
                        )
                    first[ident] = key.start_mark
                stack += [key, value]
        elif isinstance(node, SequenceNode):
            stack += node.value


def _read_yaml(text: str, path: Path) -> object:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = " ".join(p for p in (e.context, e.problem) if p) or str(e)
        raise SweepError(f"{path}{where}: invalid YAML: {problem}") from None
    except ReaderError as e:  # a character YAML does not allow
        line = text.count("\n", 0, max(e.position, 0)) + 1
        raise SweepError(f"{path}:{line}: invalid YAML: character #x{e.character:04x} is not "
                         f"allowed ({e.reason})") from None
    except yaml.YAMLError as e:
        raise SweepError(f"{path}: invalid YAML: {e}") from None
    except RecursionError:
        raise SweepError(f"{path}: invalid YAML: nested too deeply") from None


# --------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------

_NO_VALUE = object()


class _Problems(ValueError):
    """Raised by model validators: (relative field path, message, bad value) triples, so the
    error names the exact field even when the check involves several."""

    def __init__(self, problems: list[tuple[tuple[str | int, ...], str, object]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{_loc_str(loc)}: {msg}" for loc, msg, _ in problems))


def _raise_if(problems: list[tuple[tuple[str | int, ...], str, object]]) -> None:
    if problems:
        raise _Problems(problems)


def _duplicates(items: list, name: str) -> list[tuple[tuple[str | int, ...], str, object]]:
    """One problem per repeated item, at its index, naming the first occurrence.

    Items are numbers or frozen (hashable) models; a dict keeps this linear in long lists.
    """
    first: dict[object, int] = {}
    out: list[tuple[tuple[str | int, ...], str, object]] = []
    for j, item in enumerate(items):
        i = first.setdefault(item, j)
        if i != j:
            out.append(((name, j), f"duplicate of {name}[{i}]", item))
    return out


def _unused(model: BaseModel, fields: tuple[str, ...], why: str) -> list:
    return [((f,), f"is ignored {why}; remove it", getattr(model, f))
            for f in fields if f in model.model_fields_set]


PosInt = Annotated[int, Field(gt=0)]
PosFloat = Annotated[float, Field(gt=0)]


class Strict(BaseModel):
    # allow_inf_nan=False: .inf / .nan are never a sensible budget, rate or fraction.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class ShapeSection(Strict):
    """The shape rule of pipeline.families: depth -> d_model = aspect_ratio * depth."""

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

    @model_validator(mode="after")
    def _even_head_dim(self) -> ShapeSection:
        if self.head_dim % 2:
            _raise_if([(("head_dim",), "must be even", self.head_dim)])
        return self


_HF_SPEC = re.compile(r"hf:[^:]+(?::[^:]*){0,2}")  # as pipeline.data.settings._parse_hf_spec reads it


_DATA_DEFAULTS = DataSpec()  # the one source of the data settings' defaults


class DataSection(Strict):
    corpus: str = _DATA_DEFAULTS.corpus
    """"stdlib" (the interpreter's standard library sources), a text file, directory or glob
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
    evals_per_run: PosInt = 8
    """Evaluations along each run (plus one at the end)."""
    eval_batches: PosInt = 8
    """Fixed validation batches per evaluation."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """auto: bf16 autocast on CUDA, fp32 elsewhere."""
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
        """The rules this section's numbers feed (pipeline/recipe.py)."""
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
            problems += _unused(self, ("span", "tokens_per_param"), "without count")
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

    @model_validator(mode="after")
    def _check(self) -> IsoflopSection:
        problems = _duplicates(self.budgets, "budgets")
        if self.replicates is not None:
            problems += [(("replicates",) + loc, msg, v) for loc, msg, v in
                         _duplicates(self.replicates.seeds, "seeds")
                         + _duplicates(self.replicates.budgets, "budgets")]
            for i, b in enumerate(self.replicates.budgets):
                if b not in self.budgets:
                    problems.append((("replicates", "budgets", i), "is not one of budgets "
                                     f"{self.budgets}", b))
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


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_SECTIONS = ("isoflop", "grid", "runs")


class SweepConfig(Strict):
    name: str
    """Sweep name = MLflow experiment name = reports/<name>/: letters, digits, _ . -"""
    description: str = ""
    kind: Literal["isoflop", "grid", "runs"]
    family: FamilyName = "gpt"
    shape: ShapeSection = ShapeSection()
    data: DataSection = DataSection()
    train: TrainSection = TrainSection()
    resources: ResourcesSection = ResourcesSection()
    flops_convention: Literal[CONVENTIONS] = "exact"  # type: ignore[valid-type]
    """FLOP convention that turns an isoflop budget into tokens (see pipeline.flops)."""
    isoflop: IsoflopSection | None = None
    grid: GridSection | None = None
    runs: Annotated[list[RunEntry], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _check(self) -> SweepConfig:
        problems: list[tuple[tuple[str | int, ...], str, object]] = []
        if not _NAME.fullmatch(self.name):
            problems.append((("name",), "must start with a letter or digit and contain only "
                             "letters, digits, '_', '.', '-' (at most 100 characters)",
                             self.name))
        for section in _SECTIONS:
            present = getattr(self, section) is not None
            if section == self.kind and not present:
                problems.append(((section,), f"section is missing (kind is {self.kind!r})",
                                 _NO_VALUE))
            elif section != self.kind and present:
                problems.append(((section,), f"section does not belong to kind {self.kind!r}"
                                 f" (kind {section!r} would use it)", _NO_VALUE))
        if self.family != "llama":
            problems += [((("shape",) + loc), msg, v) for loc, msg, v in
                         _unused(self.shape, ("gqa_ratio", "ffn_multiple"),
                                 f"by family {self.family!r}")]
        problems += self._shape_problems()
        rep = self.isoflop.replicates if self.isoflop is not None else None
        for i, seed in enumerate(rep.seeds if rep is not None else []):
            if seed in self.train.seeds:
                problems.append((("isoflop", "replicates", "seeds", i), "is already one of "
                                 f"train.seeds {self.train.seeds}", seed))
        held = self.isoflop.holdout if self.isoflop is not None else None
        for i, seed in enumerate(held.seeds or [] if held is not None else []):
            if seed in self.train.seeds:
                problems.append((("isoflop", "holdout", "seeds", i), "is already one of "
                                 f"train.seeds {self.train.seeds}", seed))
        runs, how = self._plan_size()
        if not problems and runs > MAX_RUNS:
            problems.append(((self.kind,), f"plans {how} = {runs:,} runs; at most {MAX_RUNS:,}",
                             _NO_VALUE))
        _raise_if(problems)
        return self

    def _shape_problems(self) -> list[tuple[tuple[str | int, ...], str, object]]:
        """Depths beyond shape.max_depth and d_model values that head_dim does not divide."""
        hd, max_depth = self.shape.head_dim, self.shape.max_depth
        out: list[tuple[tuple[str | int, ...], str, object]] = []

        def depth(loc: tuple[str | int, ...], value: int) -> None:
            if value > max_depth:
                out.append((loc, f"depth is above shape.max_depth={max_depth}", value))

        def width(loc: tuple[str | int, ...], value: int) -> None:
            if value % hd:
                out.append((loc, f"is not a multiple of shape.head_dim={hd}", value))

        def knob_width(loc: tuple[str | int, ...], value: int) -> None:
            if value > self.shape.max_width:
                out.append((loc, f"width is above shape.max_width={self.shape.max_width}",
                             value))
            elif round(value * hd / self.shape.aspect_ratio) > max_depth:
                out.append((loc, f"width gives more than shape.max_depth={max_depth} layers",
                             value))

        section = self.isoflop or self.grid
        if section is not None:
            where = (self.kind, "sizes")
            for i, d in enumerate(section.sizes.depths or []):
                depth((*where, "depths", i), d)
            for i, w in enumerate(section.sizes.widths or []):
                knob_width((*where, "widths", i), w)
            for i, s in enumerate(section.sizes.shapes or []):
                width((*where, "shapes", i, "d_model"), s.d_model)
        for i, r in enumerate(self.runs or []):
            if r.depth is not None:
                depth(("runs", i, "depth"), r.depth)
            if r.d_model is not None:
                width(("runs", i, "d_model"), r.d_model)
        if self.runs is not None:
            out += _duplicates(self.runs, "runs")
        return out

    def planned_runs(self) -> int:
        """Cells x seeds before any cell is skipped (an upper bound on the plan's size)."""
        return self._plan_size()[0]

    def _plan_size(self) -> tuple[int, str]:
        if self.isoflop is not None:
            factors = {"budgets": len(self.isoflop.budgets),
                       "sizes": self.isoflop.sizes.size_count()}
        elif self.grid is not None:
            factors = {"token counts": len(self.grid.tokens),
                       "sizes": self.grid.sizes.size_count()}
        else:
            factors = {"runs": len(self.runs or [])}
        factors["seeds"] = len(self.train.seeds)
        if self.train.lrs is not None:
            factors["learning rates"] = len(self.train.lrs)
        if self.train.schedules is not None:
            factors["schedules"] = len(self.train.schedules)
        if self.train.variants is not None:
            factors["recipes"] = 1 + len(self.train.variants)
        total = 1
        for n in factors.values():
            total *= n
        how = " x ".join(f"{n} {what}" for what, n in factors.items())
        rep = self.isoflop.replicates if self.isoflop is not None else None
        if rep is not None:  # extra seeds on some budgets: same factors, those budgets only
            extra = total // len(self.isoflop.budgets) * len(rep.budgets) * len(rep.seeds)
            extra //= len(self.train.seeds)
            total += extra
            how += f" + {extra} replicate(s)"
        return total, how


# --------------------------------------------------------------------------------------
# Error messages
# --------------------------------------------------------------------------------------

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 80
_repr.maxlist = _repr.maxdict = 6
_repr.maxlevel = 3


def _loc_str(loc: tuple[Any, ...]) -> str:
    """('runs', 0, 'tokens') -> 'runs[0].tokens'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _got(value: object) -> str:
    if value is _NO_VALUE:
        return ""
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_defaults=True)
    text = _repr.repr(value)
    return f" (got {text if len(text) <= 120 else text[:117] + '...'})"


def _format_error(path: Path, err: Any) -> list[str]:
    loc: tuple[Any, ...] = tuple(err["loc"])
    where = _loc_str(loc) or "top level"
    kind, value = err["type"], err.get("input")
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, _Problems):
        return [f"{path}: {_loc_str(loc + sub)}: {msg}{_got(v)}" for sub, msg, v in cause.problems]
    if kind == "extra_forbidden":
        return [f"{path}: unknown key {where!r}{_suggest(loc)}"]
    if kind == "invalid_key":
        return [f"{path}: {_loc_str(loc[:-1]) or 'top level'}: key {loc[-1]!r} is not a string"]
    if kind == "missing":
        return [f"{path}: {where}: required field is missing"]
    msg = err["msg"].removeprefix("Value error, ")
    if not loc:  # a check of the whole file: its message says what is wrong
        return [f"{path}: {msg}"]
    hint = ""
    if kind == "model_type":
        msg = "must be a mapping of keys to values"
    elif kind == "literal_error":
        choices = re.findall(r"'([^']*)'", (err.get("ctx") or {}).get("expected", ""))
        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
    elif kind == "string_type" and isinstance(value, bool | int | float | datetime.date):
        hint = "; quote it to make it a string"
    elif kind == "int_type" and isinstance(value, float):
        msg = "must be a whole number"
    elif kind in ("int_type", "float_type") and isinstance(value, str) and _is_number(value):
        hint = "; write the number without quotes"
    return [f"{path}: {where}: {msg}{_got(value)}{hint}"]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _suggest(loc: tuple[Any, ...]) -> str:
    model = _model_at(SweepConfig, loc[:-1])
    if model is None:
        return ""
    known = list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class found at a location path (list indices skipped)."""
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        classes = _classes_in(field.annotation) if field is not None else []
        if not classes:
            return None
        model = classes[0]
    return model


def _classes_in(ann: object) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    out: list[type[BaseModel]] = []
    for arg in getattr(ann, "__args__", ()) or ():
        out.extend(_classes_in(arg))
    return out


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


def parse_sweep(text: str, path: Path | str = "<string>") -> SweepConfig:
    """Validate sweep YAML text; `path` only names the source in messages. No file checks."""
    path = Path(path)
    raw = _read_yaml(text, path)
    if raw is None:
        raise SweepError(f"{path}: the file is empty (a sweep needs at least name and kind)")
    if not isinstance(raw, dict):
        raise SweepError(f"{path}: a sweep file must be a YAML mapping of keys to values, "
                         f"got a {type(raw).__name__}: {_repr.repr(raw)}")
    try:
        return SweepConfig.model_validate(raw)
    except ValidationError as e:
        lines = [line for err in e.errors() for line in _format_error(path, err)]
        raise SweepError("\n".join(lines)) from None


def load_sweep(path: str | Path) -> SweepConfig:
    """Read and validate a sweep file; raise SweepError naming the file, field and value.

    Also checks that a local corpus exists (relative to the sweep file).
    """
    path = Path(path)
    if not path.exists():
        raise SweepError(f"{path}: no such sweep file")
    if not path.is_file():
        raise SweepError(f"{path}: not a regular file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise SweepError(f"{path}: file is {size:,} bytes; a sweep file is at most "
                         f"{MAX_FILE_BYTES:,}")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SweepError(f"{path}: not a UTF-8 text file ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise SweepError(f"{path}: cannot read: {e.strerror or e}") from None
    cfg = parse_sweep(text, path)
    _check_corpus(cfg, path)
    return cfg


def resolve_corpus(corpus: str, sweep_path: Path) -> str:
    """The corpus as pipeline.data.load_corpus should read it.

    "stdlib" and "hf:..." are returned unchanged. A local file, directory or glob (with or
    without the "path:" prefix that load_corpus also accepts; "~" expanded) becomes an
    absolute path, relative ones against the sweep file's folder. The prefix is dropped: an
    absolute path cannot be mistaken for "stdlib" or "hf:", and the same files then give the
    same run_id however they were written.
    """
    if corpus == "stdlib" or corpus.startswith("hf:"):
        return corpus
    local = Path(os.path.expanduser(corpus.removeprefix("path:")))
    if not local.is_absolute():
        local = sweep_path.parent / local
    return str(local.resolve())


def _check_corpus(cfg: SweepConfig, path: Path) -> None:
    """A local corpus must exist and hold files (as pipeline.data will require later)."""
    corpus = cfg.data.corpus
    if corpus == "stdlib" or corpus.startswith("hf:"):
        return
    resolved = resolve_corpus(corpus, path)
    if any(ch in resolved for ch in "*?["):
        if not any(os.path.isfile(p) for p in glob.iglob(resolved, recursive=True)):
            raise SweepError(f"{path}: data.corpus: glob matches no file (got {corpus!r}; "
                             f"looked for {resolved})")
        return
    p = Path(resolved)
    if not p.exists():
        raise SweepError(f"{path}: data.corpus: path does not exist (got {corpus!r}; "
                         f"looked for {resolved})")
    if p.is_dir() and not any(
        f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
        for f in p.rglob("*")
    ):
        raise SweepError(f"{path}: data.corpus: directory holds no files (got {corpus!r})")
