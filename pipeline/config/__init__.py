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

Modules: base (SweepError, limits, the strict model and validator problems), yaml_reader,
sections (shape, data, train, resources, isoflop, grid, runs), schema (SweepConfig), messages
(validation errors as file: field: message). This module loads files and re-exports the names.

A sweep file (see sweeps/*.yaml):
  name, description, kind (isoflop | grid | runs), family, shape, data, train, resources,
  flops_convention, and the one section isoflop / grid / runs named by kind.
"""

from __future__ import annotations

import glob
import hashlib
import os
from pathlib import Path

from pydantic import ValidationError

from pipeline.config.base import (
    MAX_COUNT,
    MAX_D_MODEL,
    MAX_FILE_BYTES,
    MAX_LAYERS,
    MAX_RUNS,
    SweepError,
    _repr,
)
from pipeline.config.messages import _format_error
from pipeline.config.schema import SweepConfig
from pipeline.config.sections import (
    VARIANT_EXCLUDED,
    DataSection,
    GridSection,
    HoldoutSection,
    IsoflopSection,
    RepeatsSection,
    ReplicatesSection,
    ResourcesSection,
    RunEntry,
    ShapeOverride,
    ShapeSection,
    SizesSection,
    TrainSection,
)
from pipeline.config.yaml_reader import _Loader, _read_yaml
from pipeline.vision.sources import IMAGE_PREFIX, is_image_corpus, parse_image_source
from pipeline.vocab.spec import STDLIB_CORPORA

__all__ = [
    "MAX_COUNT", "MAX_D_MODEL", "MAX_FILE_BYTES", "MAX_LAYERS", "MAX_RUNS", "VARIANT_EXCLUDED",
    "DataSection", "GridSection", "HoldoutSection", "IsoflopSection", "RepeatsSection",
    "ReplicatesSection",
    "ResourcesSection", "RunEntry", "ShapeOverride", "ShapeSection", "SizesSection",
    "SweepConfig", "SweepError", "TrainSection", "_Loader", "check_sweep_text", "load_sweep",
    "load_sweep_and_sha256", "parse_sweep", "resolve_corpus",
]


MAX_MESSAGE_LINES = 20
"""Most problems one refusal lists; the rest are counted."""


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
        lines = [line for err in e.errors() for line in _format_error(path, err, SweepConfig)]
        if len(lines) > MAX_MESSAGE_LINES:  # 9,999 duplicate seeds are one mistake, not 9,998
            more = len(lines) - MAX_MESSAGE_LINES
            lines = [*lines[:MAX_MESSAGE_LINES], f"{path}: ... and {more:,} more problem(s)"]
        raise SweepError("\n".join(lines)) from None


def load_sweep(path: str | Path) -> SweepConfig:
    """Read and validate a sweep file; raise SweepError naming the file, field and value.

    Also checks that a local corpus exists (relative to the sweep file).
    """
    return load_sweep_and_sha256(path)[0]


def load_sweep_and_sha256(path: str | Path) -> tuple[SweepConfig, str]:
    """load_sweep, and the sha256 of the very bytes it validated (the plan manifest's
    sweep_sha256, pipeline.vocab.manifest): the file is read once, so the hash cannot be of
    another version of it than the plan."""
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
        data = path.read_bytes()
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SweepError(f"{path}: not a UTF-8 text file ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise SweepError(f"{path}: cannot read: {e.strerror or e}") from None
    return check_sweep_text(text, path), hashlib.sha256(data).hexdigest()


def check_sweep_text(text: str, path: Path) -> SweepConfig:
    """TEXT validated as load_sweep validates a sweep file at PATH: its schema, and its corpus
    relative to PATH's folder (regular files only). Reads no sweep file: for a sweep that is
    about to be written there (analysis.predict --write)."""
    cfg = parse_sweep(text, path)
    _check_corpus(cfg, path)
    return cfg


def resolve_corpus(corpus: str, sweep_path: Path) -> str:
    """The corpus as pipeline.data.load_corpus should read it.

    The named corpora (STDLIB_CORPORA) and "hf:..." are returned unchanged. A local file, directory or glob (with or
    without the "path:" prefix that load_corpus also accepts; "~" expanded) becomes an
    absolute path, relative ones against the sweep file's folder. The prefix is dropped: an
    absolute path cannot be mistaken for "stdlib" or "hf:", and the same files then give the
    same run_id however they were written.
    """
    if corpus in STDLIB_CORPORA or corpus.startswith("hf:"):
        return corpus
    if is_image_corpus(corpus):  # only a folder of images is a path (relative to the file)
        source = parse_image_source(corpus)
        if source.kind != "folder":
            return corpus
        folder = Path(os.path.expanduser(source.location))
        if not folder.is_absolute():
            folder = sweep_path.parent / folder
        return f"{IMAGE_PREFIX}folder:{folder.resolve()}"
    local = Path(os.path.expanduser(corpus.removeprefix("path:")))
    if not local.is_absolute():
        local = sweep_path.parent / local
    return str(local.resolve())


def _check_corpus(cfg: SweepConfig, path: Path) -> None:
    """A local corpus must exist and hold regular files, nothing else (as pipeline.data will
    require later): refused here, before the ledger is created or anything is read."""
    corpus = cfg.data.corpus
    if corpus in STDLIB_CORPORA or corpus.startswith("hf:"):
        return
    if is_image_corpus(corpus):
        resolved = resolve_corpus(corpus, path)
        folder = resolved.removeprefix(f"{IMAGE_PREFIX}folder:")
        if folder != resolved and not Path(folder).is_dir():
            raise SweepError(f"{path}: data.corpus: image folder does not exist (got "
                             f"{corpus!r}; looked for {folder})")
        return
    resolved = resolve_corpus(corpus, path)
    # Lazy: pipeline.data costs 0.3 s to import, and only a local corpus needs it.
    from pipeline.data.settings import DataError
    from pipeline.data.sources import NotAFileError, local_files

    try:  # the rule every local corpus is read under: regular files only, named if not
        local_files(resolved)
    except NotAFileError as e:
        raise SweepError(f"{path}: data.corpus: {e} (got {corpus!r})") from None
    except DataError:
        pass  # missing or empty: said below, in the sweep file's words
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
