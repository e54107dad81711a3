"""The next sweep: a runnable sweep file for a larger budget, with the source sweep's recipe.

Why: a prediction is only useful if the next runs are trained the way the fitted ones were.
The learning-rate rule, batch rule, warmup floor, schedule, corpus, tokenizer, seq_len and
shape rule all moved the fitted losses (docs/recipes.md); a snippet with a default shape and
recipe would test another recipe at the new budget. So the written file is the source file
with only its plan replaced: one IsoFLOP budget, sizes spread around the predicted optimum
(the planner's centre sqrt(C / (6 · tokens_per_param)) set to the predicted N_opt), the source's span and
size rules, no replicates or held-out budgets. Every other section is copied as it is.

    python -m analysis.predict --sweep chinchilla --sweep-file sweeps/chinchilla.yaml \\
        --flops 2e13 --write sweeps/chinchilla_next.yaml

Planner work, so on the pipeline side: it takes a sweep file and numbers (a budget, N_opt,
D_opt) and imports nothing of the analysis; the entry point analysis.predict computes the
numbers and turns this module's SweepError into its one error line.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import yaml

from pipeline.config import SweepError, check_sweep_text, load_sweep, resolve_corpus
from pipeline.config.yaml_reader import _read_yaml
from pipeline.vision.sources import IMAGE_PREFIX, is_image_corpus, parse_image_source
from pipeline.vocab.disk import NewFileError, write_new_file
from pipeline.vocab.spec import STDLIB_CORPORA

DEFAULT_COUNT = 5
"""Sizes at the new budget when the source plans none by count (a grid or explicit runs)."""
DEFAULT_SPAN = 6.0


def _plan(cfg: object, flops: float, n_opt: float) -> dict:
    """The isoflop section of the next sweep."""
    sizes = {"count": DEFAULT_COUNT, "span": DEFAULT_SPAN}
    source = getattr(cfg, "isoflop", None)
    if source is not None and source.sizes.count is not None:
        sizes = {"count": source.sizes.count, "span": source.sizes.span}
        for rule in ("max_embedding_fraction", "max_tokens_per_param"):
            if getattr(source.sizes, rule) is not None:
                sizes[rule] = getattr(source.sizes, rule)
    # The planner centres the sizes on sqrt(C / (6 · S · tokens_per_param)), S the tokens of
    # a unit of data (1; vit: an image's positions): this value puts that centre at the
    # predicted N_opt (on exact-FLOP lines D_opt/N_opt would not).
    sizes["tokens_per_param"] = float(f"{flops / (6.0 * _positions(cfg) * n_opt**2):.4g}")
    return {"budgets": [float(f"{flops:.4g}")], "sizes": sizes}


def _positions(cfg: object) -> int:
    """Tokens per unit of data of the sweep's models: 1 for text, an image's for vit."""
    from pipeline.planner import expand, vocab_size_for

    if not is_image_corpus(cfg.data.corpus):
        return 1
    plan = expand(cfg, ".", vocab_size_for(cfg) or 2)  # the geometry, not the classes
    return plan.specs[0].model.positions if plan.specs else 1


def next_sweep_text(source: Path, out: Path, *, flops: float, n_opt: float, d_opt: float,
                    approach: str, convention: str, corpus_units: float | None = None) -> str:
    """The YAML of the next sweep; SweepError when it cannot be made. ``corpus_units``: the
    train split's size in data units (predict --unique-tokens: the sweep trains on the whole
    corpus, and n_opt, d_opt are the optimum with only that much data): data.max_epochs is
    then raised to what the planned runs need (``_epochs_allowed``)."""
    cfg = load_sweep(source)
    try:
        raw = _read_yaml(source.read_text(encoding="utf-8-sig"), source)
    except (OSError, UnicodeDecodeError) as e:  # replaced since load_sweep read it
        raise SweepError(f"{source}: cannot read: {e}") from None
    if cfg.flops_convention != convention:
        raise SweepError(f"{source}: its budgets are in {cfg.flops_convention!r} FLOPs, the "
                        f"prediction's C in {convention!r}; predict with C in the file's "
                        f"convention (--flops-convention {cfg.flops_convention}; for a CSV also "
                        f"its flops_{cfg.flops_convention} column as --c-col)")
    if out.stem == cfg.name:
        raise SweepError(f"{out}: a sweep named {cfg.name!r} is the source itself (the name is "
                        "the file's stem, the MLflow experiment and the report folder); give "
                        "the next sweep another name")
    if not isinstance(raw, dict):  # load_sweep validated it, unless replaced meanwhile
        raise SweepError(f"{source}: changed while it was read")
    for section in ("isoflop", "grid", "runs"):
        raw.pop(section, None)
    raw["name"] = out.stem
    raw["description"] = (f"IsoFLOP at C = {flops:.3g} ({convention}): sizes around approach "
                          f"{approach}'s N_opt = {n_opt:.4g}, recipe of {source.name}")
    raw["kind"] = "isoflop"
    corpus = raw.get("data", {}).get("corpus", cfg.data.corpus)
    folder = corpus.startswith(IMAGE_PREFIX) and parse_image_source(corpus).kind == "folder"
    if folder or not (corpus in STDLIB_CORPORA or corpus.startswith(("hf:", IMAGE_PREFIX))):
        # A local corpus is relative to the sweep file's folder: point at the same files.
        target = resolve_corpus(corpus, source).removeprefix(f"{IMAGE_PREFIX}folder:")
        relative = os.path.relpath(target, out.resolve().parent)
        raw["data"]["corpus"] = f"{IMAGE_PREFIX}folder:{relative}" if folder else relative
    raw["isoflop"] = _plan(cfg, flops, n_opt)
    header = (f"# Written by `python -m analysis.predict --write` from {source.name}: the next "
              f"budget C = {flops:.4g} FLOPs\n# ({convention}) at approach {approach}'s "
              f"predicted optimum N_opt = {n_opt:.4g}, D_opt = {d_opt:.4g}, with the source's "
              "recipe.\n#   python -m pipeline.sweep THIS_FILE --dry-run\n")
    if corpus_units is not None:
        epochs = _epochs_needed(_dump(raw), out, corpus_units)
        if epochs > cfg.data.max_epochs:
            allowed = _epochs_allowed(epochs)
            raw.setdefault("data", {})["max_epochs"] = allowed
            header += (f"# data.max_epochs {allowed:g} (the source allows "
                       f"{cfg.data.max_epochs:g}): the optimum above is the data-constrained "
                       f"law's with only the corpus's {corpus_units:.4g} unique units, and the "
                       f"smallest size below trains {epochs:.3g} passes over them.\n")
    return header + _dump(raw)


def _dump(raw: dict) -> str:
    return yaml.safe_dump(raw, sort_keys=False, default_flow_style=False, width=96)


def _epochs_needed(text: str, out: Path, corpus_units: float) -> float:
    """The most passes over ``corpus_units`` that a run of the sweep ``text`` makes."""
    from pipeline.config import parse_sweep
    from pipeline.planner import expand, vocab_size_for

    cfg = parse_sweep(text, out)
    plan = expand(cfg, out, vocab_size_for(cfg) or 2)  # D depends on N, not on the classes
    return max((s.tokens / corpus_units for s in plan.specs), default=0.0)


def _epochs_allowed(epochs: float) -> float:
    """data.max_epochs for runs that need ``epochs`` passes: 5% more (the train split of a
    new checkout may differ by a few blocks), rounded up to a tenth."""
    return math.ceil(epochs * 1.05 * 10) / 10


def validate_next_sweep(out: Path, text: str, option: str = "--write") -> None:
    """SweepError unless ``text`` is a sweep file that load_sweep would accept at ``out``
    (its schema, and its corpus relative to ``out``'s folder). Reads and writes nothing."""
    try:
        check_sweep_text(text, out)
    except SweepError as e:
        raise SweepError(f"{option} {out}: the written sweep file would not validate: {e}") \
            from e


def write_next_sweep(out: Path, text: str, option: str = "--write") -> None:
    """Validate ``text`` (validate_next_sweep), then write it to ``out`` whole, never over an
    existing file: the folders are made only after every check, and removed again if the
    write fails."""
    validate_next_sweep(out, text, option)
    try:
        write_new_file(out, text, option)
    except NewFileError as e:
        raise SweepError(str(e)) from e
