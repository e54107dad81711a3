"""The error type of sweep files, the limits a file must keep, the (field path, message,
value) problems that validators raise, and the strict base model every section uses."""

from __future__ import annotations

import reprlib
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

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


def _loc_str(loc: tuple[Any, ...]) -> str:
    """('runs', 0, 'tokens') -> 'runs[0].tokens'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 80
_repr.maxlist = _repr.maxdict = 6
_repr.maxlevel = 3
