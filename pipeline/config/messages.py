"""Pydantic validation errors as messages that name the file, the field path and the value,
with "did you mean" suggestions."""

from __future__ import annotations

import datetime
import difflib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pipeline.config.base import (
    _NO_VALUE,
    _loc_str,
    _Problems,
    _repr,
)


def _got(value: object) -> str:
    if value is _NO_VALUE:
        return ""
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_defaults=True)
    text = _repr.repr(value)
    return f" (got {text if len(text) <= 120 else text[:117] + '...'})"


def _format_error(path: Path, err: Any, root: type[BaseModel]) -> list[str]:
    loc: tuple[Any, ...] = tuple(err["loc"])
    where = _loc_str(loc) or "top level"
    kind, value = err["type"], err.get("input")
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, _Problems):
        return [f"{path}: {_loc_str(loc + sub)}: {msg}{_got(v)}" for sub, msg, v in cause.problems]
    if kind == "extra_forbidden":
        return [f"{path}: unknown key {where!r}{_suggest(loc, root)}"]
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


def _suggest(loc: tuple[Any, ...], root: type[BaseModel]) -> str:
    model = _model_at(root, loc[:-1])
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
