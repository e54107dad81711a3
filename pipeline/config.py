"""Sweep files: pydantic models and load_sweep(path) with errors that name file, field, value.

Validation never mutates: strict types (no "2" -> 2, no 2.5 -> 2), unknown keys are errors
(with a "did you mean" suggestion), and everything is checked before Ray or MLflow is touched.
YAML is read with safe_load semantics plus YAML 1.2 floats, so `1e13` is a number (PyYAML's
YAML 1.1 resolver would read it as the string "1e13").

A sweep file (see sweeps/*.yaml and docs/sweeps.md):
  name, description, kind (isoflop | grid | runs), family, shape, data, train, resources,
  flops_convention, and one of the sections isoflop / grid / runs matching kind.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.flops import CONVENTIONS

MAX_FILE_BYTES = 1_000_000  # a sweep file is a page of YAML; anything larger is a mistake


class SweepError(ValueError):
    """A sweep file that cannot be used; the message names the file, field and value."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads YAML 1.2 floats such as 1e13 and 3e-4 as numbers."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789."),
)

PosInt = Annotated[int, Field(gt=0)]
PosFloat = Annotated[float, Field(gt=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ShapeSection(Strict):
    """The shape rule of pipeline.families: depth -> d_model = aspect_ratio * depth."""

    aspect_ratio: PosFloat = 16.0
    """d_model / n_layer before rounding up to a multiple of head_dim."""
    head_dim: PosInt = 16
    """Fixed attention head size."""
    gqa_ratio: PosInt = 2
    """llama: target n_heads / n_kv_heads."""
    ffn_multiple: PosInt = 16
    """llama: SwiGLU hidden width is rounded up to a multiple of this."""
    max_depth: PosInt = 64
    """Largest depth the rule may produce."""


class DataSection(Strict):
    corpus: str = "stdlib"
    """"stdlib" (the interpreter's standard library sources), a text file path or glob
    (relative paths are relative to the sweep file), or "hf:<dataset>[:<split>][:<field>]"."""
    tokenizer: Literal["bytes", "chars", "bpe"] = "bytes"
    """Tokenizer; bytes has vocabulary 256."""
    bpe_vocab_size: Annotated[int, Field(ge=260, le=65535)] = 1024
    """Vocabulary size of the BPE tokenizer (when tokenizer is bpe)."""
    seq_len: Annotated[int, Field(ge=2, le=65536)] = 128
    """Context length in tokens."""
    val_fraction: Annotated[float, Field(gt=0, lt=0.5)] = 0.05
    """Fraction of documents held out for validation."""
    max_bytes: PosInt | None = None
    """Optional cap on the corpus size in bytes (for quick trials)."""


class TrainSection(Strict):
    batch_size: PosInt = 16
    """Sequences per optimizer step."""
    lr: Annotated[float, Field(gt=0, le=1.0)] = 3e-3
    """Peak learning rate at the reference width."""
    lr_width_exponent: Annotated[float, Field(ge=0, le=2)] = 0.0
    """Scale the peak LR with width: lr * (lr_reference_d_model / d_model) ** exponent."""
    lr_reference_d_model: PosInt = 64
    """Width at which the peak LR equals `lr`."""
    warmup_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.05
    """Warmup length as a fraction of each run's steps."""
    schedule: Literal["cosine", "wsd", "constant"] = "cosine"
    """cosine decays over exactly each run's steps (Chinchilla: cosine length matches D)."""
    decay_fraction: Annotated[float, Field(gt=0, le=1)] = 0.2
    """wsd: fraction of steps in the final linear decay."""
    min_lr_ratio: Annotated[float, Field(ge=0, le=1)] = 0.1
    """Final LR as a fraction of the peak."""
    weight_decay: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """AdamW decoupled weight decay on matrices."""
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.95
    grad_clip: Annotated[float, Field(ge=0)] = 1.0
    """Global gradient-norm clip (0 disables)."""
    seeds: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] = [0]
    """One run per seed for every cell."""
    evals_per_run: PosInt = 8
    """Evaluations along each run (plus one at the end)."""
    eval_batches: PosInt = 8
    """Fixed validation batches per evaluation."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """auto: bf16 autocast on CUDA, fp32 elsewhere."""
    min_steps: PosInt = 20
    """Cells with fewer optimizer steps are reported as unbuildable, not trained."""

    @model_validator(mode="after")
    def _unique_seeds(self) -> TrainSection:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be unique, got {self.seeds}")
        return self


class ResourcesSection(Strict):
    num_cpus: PosInt = 1
    """CPUs per run (whole numbers: a run gets this many torch threads)."""
    num_gpus: Annotated[float, Field(ge=0, le=64)] = 0.0
    """GPUs per run; fractions (e.g. 0.25) pack several small runs on one GPU."""
    max_retries: Annotated[int, Field(ge=0, le=100)] = 2
    """Ray retries of a run whose worker process or node died."""
    checkpoint_interval: Annotated[int, Field(ge=0)] = 0
    """Checkpoint every this many steps (0: at every evaluation)."""


class SizesSection(Strict):
    """Which model sizes a budget (or the grid) uses: exactly one of the options."""

    depths: list[PosInt] | None = None
    """Explicit depths of the shape rule."""
    shapes: list[ShapeOverride] | None = None
    """Explicit shapes (n_layer, d_model)."""
    count: PosInt | None = None
    """isoflop only: this many sizes spread in log N around the guess of the optimum."""
    span: Annotated[float, Field(gt=1)] = 8.0
    """isoflop with count: ratio of the largest to the smallest target N."""
    tokens_per_param: PosFloat = 20.0
    """isoflop with count: the guess N* = sqrt(C / (6 * tokens_per_param)) (Chinchilla: 20)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> SizesSection:
        given = [n for n in ("depths", "shapes", "count") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of depths, shapes, count (got {given or 'none'})")
        for name in ("depths", "shapes"):
            value = getattr(self, name)
            if value is not None and len(value) == 0:
                raise ValueError(f"{name} is empty")
        if self.depths is not None and len(set(self.depths)) != len(self.depths):
            raise ValueError(f"depths has duplicates: {self.depths}")
        return self


class ShapeOverride(Strict):
    n_layer: PosInt
    d_model: PosInt


class IsoflopSection(Strict):
    budgets: Annotated[list[PosFloat], Field(min_length=1)]
    """Compute budgets C in FLOPs (under flops_convention)."""
    sizes: SizesSection
    """Model sizes trained at every budget."""

    @model_validator(mode="after")
    def _unique(self) -> IsoflopSection:
        if len(set(self.budgets)) != len(self.budgets):
            raise ValueError(f"budgets has duplicates: {self.budgets}")
        return self


class GridSection(Strict):
    sizes: SizesSection
    """Model sizes (depths or shapes)."""
    tokens: Annotated[list[PosFloat], Field(min_length=1)]
    """Token counts D; every size is trained at every D."""


class RunEntry(Strict):
    n_layer: PosInt | None = None
    d_model: PosInt | None = None
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


class SweepConfig(Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]
    """Sweep name = MLflow experiment name = reports/<name>/."""
    description: str = ""
    kind: Literal["isoflop", "grid", "runs"]
    family: Literal["gpt", "llama"] = "gpt"
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
    def _section_matches_kind(self) -> SweepConfig:
        for section in ("isoflop", "grid", "runs"):
            present = getattr(self, section) is not None
            if section == self.kind and not present:
                raise ValueError(f"kind is {self.kind!r} but the {section!r} section is missing")
            if section != self.kind and present:
                raise ValueError(f"section {section!r} does not belong to kind {self.kind!r}")
        return self


SizesSection.model_rebuild()


def _format_error(path: Path, err: dict, raw: object) -> str:
    loc = ".".join(str(p) for p in err["loc"]) or "<top level>"
    if err["type"] == "extra_forbidden":
        field = str(err["loc"][-1])
        model = _model_at(SweepConfig, err["loc"][:-1])
        hint = ""
        if model is not None:
            close = difflib.get_close_matches(field, list(model.model_fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else (
                f"; known keys: {', '.join(model.model_fields)}")
        return f"{path}: unknown key {loc!r}{hint}"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] in ("missing",):
        return f"{path}: {loc}: required field is missing"
    return f"{path}: {loc}: {msg} (got {err.get('input')!r})"


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class found at a location path (list indices skipped)."""
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        ann = field.annotation
        found = None
        for cand in _classes_in(ann):
            found = cand
            break
        if found is None:
            return None
        model = found
    return model


def _classes_in(ann: object) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    out: list[type[BaseModel]] = []
    for arg in getattr(ann, "__args__", ()) or ():
        out.extend(_classes_in(arg))
    return out


def parse_sweep(text: str, path: Path) -> SweepConfig:
    try:
        raw = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise SweepError(f"{path}{where}: YAML syntax error: {problem}") from None
    if not isinstance(raw, dict):
        raise SweepError(
            f"{path}: a sweep file must be a YAML mapping of keys to values, "
            f"got {type(raw).__name__}"
        )
    try:
        return SweepConfig.model_validate(raw)
    except ValidationError as e:
        lines = [_format_error(path, err, raw) for err in e.errors()]
        raise SweepError("\n".join(lines)) from None


def load_sweep(path: str | Path) -> SweepConfig:
    """Read and validate a sweep file; raise SweepError naming the file, field and value."""
    path = Path(path)
    if not path.is_file():
        raise SweepError(f"{path}: no such sweep file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise SweepError(f"{path}: file is {size:,} bytes; a sweep file is at most "
                         f"{MAX_FILE_BYTES:,}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SweepError(f"{path}: not a UTF-8 text file ({e.reason} at byte {e.start})") from None
    cfg = parse_sweep(text, path)
    _check_corpus(cfg, path)
    return cfg


def resolve_corpus(corpus: str, sweep_path: Path) -> str:
    """Relative corpus paths are relative to the sweep file's folder."""
    if corpus == "stdlib" or corpus.startswith("hf:") or Path(corpus).is_absolute():
        return corpus
    return str((sweep_path.parent / corpus).resolve())


def _check_corpus(cfg: SweepConfig, path: Path) -> None:
    corpus = cfg.data.corpus
    if corpus == "stdlib" or corpus.startswith("hf:"):
        return
    resolved = Path(resolve_corpus(corpus, path))
    if any(ch in corpus for ch in "*?["):
        if not list(resolved.parent.glob(resolved.name)):
            raise SweepError(f"{path}: data.corpus: glob {corpus!r} matches no file")
    elif not resolved.exists():
        raise SweepError(f"{path}: data.corpus: path {corpus!r} does not exist ({resolved})")
