"""Reading published data as a careful researcher would: IsoFLOP budgets grouped within a
relative tolerance, rows kept by a --where filter, the unit of a C column checked, and each
run's non-embedding N and unique tokens U (the data it repeats) checked against its N and D.

Why apart from analysis.runs.load: these are the judgements a published CSV needs and a sweep's
ledger does not (its budgets are tags, its C is counted in FLOPs by the pipeline), each with its
constant and its reason; analysis.runs.load.load_csv applies them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.errors import DataError

Log = Callable[[str], None]
MIN_BUDGET_RUNS = 3
"""Runs sharing a C (within BUDGET_RTOL) form an IsoFLOP budget from this many on."""
MIN_BUDGET_SIZES = 3
"""Distinct sizes a budget needs for a parabola (analysis.fits.approach2.MIN_SIZES): a group
of runs sharing a C with fewer is named in a warning."""
BUDGET_RTOL = 0.01
"""Runs whose C lie within 1% of their group's median C are one IsoFLOP budget. Why 1%: a
published ladder's C is 6·N·D with N the shape's exact count and D rounded to whole steps of a
batch, which moves C in the 3rd or 4th significant digit (a few tenths of a percent), while the
budgets of an IsoFLOP design are a factor 1.5 or more apart (Hoffmann et al. 2022: 6e18, 1e19,
3e19, ...; Porian et al. 2024: factors of 2): 1% joins the first and cannot join the second."""
BUDGET_SEPARATION = 20.0
"""A budget stands apart: the gap from its runs to the nearest other C is at least 20 times the
widest gap between its own runs' C. Why: in data read off a plot (the Epoch Chinchilla points,
C within ~8% of each nominal budget) C runs on in steps of ~1%, and 3 runs fall within 1% of
each other by chance: 10 such fake sets at 1% alone, with gaps outside them at most 10.3 times
those inside; a real budget's runs share C to the 3rd or 4th digit (gaps under 0.5%) and the
next budget is 9% or more away (100 budgets over 4 decades), a ratio of 20 or more."""
FLOPS_RATIO_BAND = (0.1, 10.0)
"""Median C/(6ND) of a C column in FLOPs. Why this band: counts other than 6ND (attention
FLOPs, embeddings left out of N, a model's exact count) move the ratio by tens of percent, a
few x for tiny models with long contexts; a unit (GFLOPs, PF-days) moves it by 1e3 or more."""
TOKENS_PER_PARAM_BAND = (1e-3, 1e7)
"""Median D/N when one of N and D is derived from C. Why: trained runs range from ~0.1 tokens a
parameter (the largest size of a small IsoFLOP budget) to ~1e5 (the smallest of a large one);
C in GFLOPs instead of FLOPs puts D/N near 1e-8, and N or D counted in millions near 1e13."""
FLOP_UNITS = (("kFLOPs", 1e3), ("MFLOPs", 1e6), ("GFLOPs", 1e9), ("TFLOPs", 1e12),
              ("PFLOPs", 1e15), ("EFLOPs", 1e18), ("PF-days", 8.64e19), ("ZFLOPs", 1e21))
"""Units a published C may be in, with FLOPs per unit (1 PF-day = 1e15 FLOP/s x 86,400 s:
Kaplan et al. 2020, Brown et al. 2020 give compute in PF-days)."""
UNIT_MATCH = 3.0
"""A unit is named as likely when it brings the ratio within this factor of 1."""


def group_budgets(c: np.ndarray, n: np.ndarray, path: Path, log: Log,
             flags: Mapping[str, str] | None = None) -> np.ndarray:
    """The IsoFLOP budget of each run: the median C of its group, NaN outside any group.

    Why a tolerance: a published ladder's budgets differ in the 4th significant digit (D is
    rounded to whole batches), and runs grouped by exact C split into fake sets. Sorted log C
    is cut wherever two neighbours differ by more than BUDGET_RTOL; a piece of at least
    MIN_BUDGET_RUNS runs, all within BUDGET_RTOL of its median and BUDGET_SEPARATION times
    farther from every other run's C than from each other, is a budget. A piece that is not (C read off a plot runs on in small
    steps) is named, and so is a budget, or a pair sharing a C, of fewer than
    MIN_BUDGET_SIZES sizes."""
    c = np.asarray(c, dtype=float)
    out = np.full(c.size, np.nan)
    order = np.argsort(c, kind="stable")
    gaps = np.diff(np.log(c[order]))
    cuts = np.flatnonzero(gaps > np.log1p(BUDGET_RTOL)) + 1
    few: list[str] = []
    continuum: list[str] = []
    repeated = False  # a size twice in a group: several recipes (or seeds) in one file
    start = 0
    for piece in np.split(order, cuts):
        first, start = start, start + piece.size  # the piece's place in sorted order
        if piece.size < 2:
            continue
        centre = float(np.median(c[piece]))
        label = float(f"{centre:.6g}")
        below = gaps[first - 1] if first > 0 else np.inf
        above = gaps[start - 1] if start - 1 < gaps.size else np.inf
        tight = np.max(np.abs(c[piece] / centre - 1.0)) <= BUDGET_RTOL
        inside = float(np.max(gaps[first:start - 1]))
        if not (tight and min(below, above) >= BUDGET_SEPARATION * inside):
            continuum.append(f"{c[piece].min():.4g} to {c[piece].max():.4g} "
                             f"({piece.size} runs)")
            continue
        sizes = np.unique(n[piece]).size
        if piece.size >= MIN_BUDGET_RUNS:
            out[piece] = label
        if sizes < MIN_BUDGET_SIZES:
            repeated |= sizes < piece.size
            few.append(f"C ≈ {label:.4g} ({piece.size} runs, {sizes} size{'s' * (sizes > 1)})")
    if few:
        log(f"{path}: {len(few)} group(s) of runs sharing a C (within {BUDGET_RTOL:.0%}) have "
            f"fewer than {MIN_BUDGET_SIZES} sizes, too few for an IsoFLOP parabola: "
            f"{_listed(few)}" + (f" (a file of several datasets or recipes? keep one with "
                                 f"{flag_name(flags, '--where')})" if repeated else ""))
    if continuum:
        log(f"{path}: runs whose C agree within {BUDGET_RTOL:.0%} but lie too close to other "
            f"runs' C (under {BUDGET_SEPARATION:g} times their own spread) form no IsoFLOP "
            f"budget (C read off a plot runs on like this): {_listed(continuum)} (give "
            f"{flag_name(flags, '--budget-col')} if the file has a budget column)")
    return out


def _listed(items: Sequence[str], most: int = 5) -> str:
    """The first ``most`` items joined, with how many more there are."""
    more = f"; and {len(items) - most} more" if len(items) > most else ""
    return "; ".join(items[:most]) + more


def flag_name(flags: Mapping[str, str] | None, name: str) -> str:
    """How the calling command names the option ``name`` (compare's sides have their own)."""
    return (flags or {}).get(name, name)


# --------------------------------------------------------------------------- --where

WHERE_OPS = ("==", "!=", "<=", ">=", "<", ">")
"""The comparisons of --where; text values take == and != only."""
_WHERE_TOKEN = re.compile(r"""\s*(?:(?P<op>==|!=|<=|>=|<|>)|(?P<text>'[^']*'|"[^"]*")
                              |`(?P<name>[^`]+)`|(?P<word>[^\s=!<>'"`]+))""", re.X)
_COMPARE = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
            ">": np.greater, ">=": np.greater_equal}


@dataclass(frozen=True)
class Condition:
    """One ``COLUMN OP VALUE`` of a --where expression."""

    column: str
    op: str
    value: float | str

    def __str__(self) -> str:
        value = repr(self.value) if isinstance(self.value, str) else f"{self.value:g}"
        return f"{self.column} {self.op} {value}"


def _where_tokens(expr: str, where: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(expr.rstrip()):
        match = _WHERE_TOKEN.match(expr, pos)
        if match is None or match.end() == pos:
            raise DataError(f"{where}: cannot read {expr[pos:].strip()[:20]!r} (a quote or "
                            "backquote left open?)")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        pos = match.end()
    return tokens


def parse_where(expr: str, option: str = "--where") -> tuple[Condition, ...]:
    """The comparisons of ``expr``: ``COLUMN OP VALUE`` joined by ``and``.

    Why a parser and not eval or DataFrame.query: the expression comes from a command line
    that may be a collaborator's, and both of those run Python. COLUMN is a name, or any text
    in backquotes (`Model Size`); OP one of WHERE_OPS; VALUE a number or a quoted text.
    DataError naming the option and the expression for anything else."""
    where = f"{option} {expr!r}"
    tokens = _where_tokens(expr, where)
    if not tokens:
        raise DataError(f"{where}: is empty; give comparisons such as \"N >= 1e8\"")
    out: list[Condition] = []
    i = 0
    while True:
        part = tokens[i:i + 3]
        if len(part) < 3 or part[0][0] not in ("word", "name") or part[1][0] != "op":
            seen = " ".join(t for _, t in part) or "nothing"
            raise DataError(f"{where}: expected COLUMN OP VALUE (OP one of "
                            f"{' '.join(WHERE_OPS)}), got {seen!r}")
        (_, column), (_, op), (kind, value) = part
        if kind == "text":
            if op not in ("==", "!="):
                raise DataError(f"{where}: {column} {op} {value}: text compares with == or != "
                                "only")
            out.append(Condition(column, op, value[1:-1]))
        else:
            number = _number(value)
            if kind != "word":
                raise DataError(f"{where}: expected a number or a quoted text after "
                                f"'{column} {op}', got {value!r}")
            if number is None:
                raise DataError(f"{where}: value {value!r} of column {column!r} is not a "
                                f"number; quote text ('{value}')")
            out.append(Condition(column, op, number))
        i += 3
        if i == len(tokens):
            return tuple(out)
        if tokens[i] != ("word", "and") or i + 1 == len(tokens):
            raise DataError(f"{where}: comparisons are joined by 'and' (no 'or', 'not' or "
                            f"parentheses), got {' '.join(t for _, t in tokens[i:i + 2])!r}")
        i += 1


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if np.isfinite(value) else None


def _matches(frame: pd.DataFrame, cond: Condition, where: str) -> np.ndarray:
    """Rows of ``frame`` where ``cond`` holds; a missing cell matches no comparison."""
    cells = frame[cond.column]
    present = cells.notna().to_numpy()
    if isinstance(cond.value, str):
        hit = _COMPARE[cond.op](cells.astype(str).to_numpy(), cond.value)
        return hit & present
    values = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=float)
    if present.any() and not np.isfinite(values[present]).any():
        raise DataError(f"{where}: column {cond.column!r} is not numeric (values "
                        f"{_values(cells)}); quote the value to compare text")
    with np.errstate(invalid="ignore"):
        return _COMPARE[cond.op](values, cond.value) & np.isfinite(values)


def _values(cells: pd.Series, most: int = 5) -> str:
    found = cells.dropna().astype(str).unique()
    more = f", ... ({len(found)} in all)" if len(found) > most else ""
    return ", ".join(map(repr, found[:most])) + more


def filter_rows(frame: pd.DataFrame, expr: str, path: Path, option: str = "--where",
                ) -> pd.DataFrame:
    """The rows of ``frame`` that meet every comparison of ``expr`` (parse_where), with the
    file's index kept (line numbers in later errors); DataError naming the option, the
    expression and the column for an unknown column or when no row is left."""
    where = f"{path}: {option} {expr!r}"
    conditions = parse_where(expr, f"{path}: {option}")
    keep = np.ones(len(frame), dtype=bool)
    counts = []
    for cond in conditions:
        if cond.column not in frame.columns:
            raise DataError(f"{where}: no column {cond.column!r}; the columns are "
                            f"{', '.join(map(repr, frame.columns))} (backquote a name with "
                            "spaces: `Model Size`)")
        hit = _matches(frame, cond, where)
        counts.append((cond, int(hit.sum())))
        keep &= hit
    if not keep.any():
        none = [cond for cond, count in counts if count == 0]
        if none:
            cond = none[0]
            cells = frame[cond.column]
            if isinstance(cond.value, str):
                has = f"has {_values(cells)}"
            else:
                values = pd.to_numeric(cells, errors="coerce").dropna()
                has = f"runs from {values.min():.4g} to {values.max():.4g}"
            raise DataError(f"{where} leaves no row: {cond} matches none of {len(frame)} rows "
                            f"(column {cond.column!r} {has})")
        each = "; ".join(f"{cond}: {count} rows" for cond, count in counts)
        raise DataError(f"{where} leaves no row: no row meets all of its comparisons ({each})")
    return frame[keep]


# --------------------------------------------------------------------------- units


def _likely_unit(scale: float) -> str | None:
    """The unit of FLOP_UNITS whose size is within UNIT_MATCH of ``scale`` FLOPs, if any."""
    name, size = min(FLOP_UNITS, key=lambda u: abs(np.log(u[1] / scale)))
    return name if abs(np.log(size / scale)) <= np.log(UNIT_MATCH) else None


def check_flop_units(c: np.ndarray, n: np.ndarray, d: np.ndarray, *, c_name: str | None,
                     n_name: str | None, d_name: str | None, path: Path) -> None:
    """DataError when the C column is not in FLOPs (GFLOPs, PF-days, ...), naming the file, the
    column, the median ratio and the likely unit.

    Why: a C in GFLOPs read as FLOPs moves every budget by 1e9 and the fitted exponents not at
    all, so nothing downstream would notice. With N, D and C all columns, the median C/(6ND)
    must lie in FLOPS_RATIO_BAND; with N or D derived from C, the median D/N in
    TOKENS_PER_PARAM_BAND."""
    if c_name is None:
        return
    if n_name and d_name:
        ratio = float(np.median(c / (6.0 * n * d)))
        low, high = FLOPS_RATIO_BAND
        if low <= ratio <= high:
            return
        told = f"C/(6ND) has median {ratio:.1e} (FLOPs give {low:g} to {high:g})"
        if ratio > high:
            raise DataError(f"{path}: column {c_name!r} is {ratio:.1e} times 6·N·D: {told}; "
                            f"are columns {n_name!r} or {d_name!r} counted in thousands or "
                            "millions (give counts), or is C not FLOPs?")
        unit = _likely_unit(1.0 / ratio)
    else:
        derived = "D = C/(6N)" if n_name else "N = C/(6D)"
        ratio = float(np.median(d / n))
        low, high = TOKENS_PER_PARAM_BAND
        if low <= ratio <= high:
            return
        told = (f"{derived} gives a median of {ratio:.1e} tokens per parameter (trained runs "
                f"have {low:g} to {high:g})")
        # D/N scales as C (D derived) or 1/C (N derived); a unit that puts it near
        # Chinchilla's 20 (Hoffmann et al. 2022) is the likely one.
        scale = 20.0 / ratio if n_name else ratio / 20.0
        unit = _likely_unit(scale) if scale > 1 else None
    if unit is None:
        raise DataError(f"{path}: column {c_name!r} is not in FLOPs: {told}; give FLOPs")
    raise DataError(f"{path}: column {c_name!r} looks like {unit}: {told}; give FLOPs")


# --------------------------------------------------------------------------- N conventions

NON_EMBEDDING_ALIASES = ("N_kaplan", "non_embedding_params", "params_non_embedding")
"""Columns read as the non-embedding parameter count without --n-nonembed-col. Why both
conventions: on a published ladder of real LLM runs, non-embedding N moves a from 0.42 to 0.54
and the verdict with it (issue 51), so a reader of such data must see both."""


def non_embedding(frame: pd.DataFrame, n: np.ndarray, col: str | None, path: Path,
                  flag: str = "--n-nonembed-col") -> np.ndarray | None:
    """Each row's non-embedding parameter count: from ``col``, else from the first column of
    ``NON_EMBEDDING_ALIASES`` with every cell a positive number; None when there is none.
    DataError for a named column that is missing, blank, not positive or above N (``n``)."""
    if col is None:
        col = next((a for a in NON_EMBEDDING_ALIASES if a in frame.columns), None)
        if col is None:
            return None
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
        # A blank cell (a report's runs.csv of published data has the column empty): not given.
        return values if (np.isfinite(values) & (values > 0)).all() and \
            (values <= n * (1 + 1e-9)).all() else None
    if col not in frame.columns:
        raise DataError(f"{path}: no column {col!r} ({flag}); the columns are "
                        f"{', '.join(map(repr, frame.columns))}")
    values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
    lines = frame.index.to_numpy() + 2  # file line numbers: the header is line 1
    for bad, what in ((~(np.isfinite(values) & (values > 0)), "blank, not a number or <= 0"),
                      (values > n * (1 + 1e-9), "exceeds N")):
        if bad.any():
            raise DataError(f"{path}: column {col!r} ({flag}: non-embedding parameters) {what} "
                            f"on {int(bad.sum())} row(s) (lines "
                            f"{', '.join(map(str, lines[bad][:5]))})")
    return values


# --------------------------------------------------------------------------- unique tokens

UNIQUE_ALIASES = ("U", "unique_tokens", "unique")
"""Columns read as U, the unique tokens a run trained on (the data it repeats: epochs = D/U),
without --unique-col; ``unique_tokens`` is the runs table's own name (a report's runs.csv)."""
UNIQUE_RTOL = 1e-6
"""U may exceed D by this fraction: a file's U and D rounded apart are still one pass."""


def unique_tokens(frame: pd.DataFrame, d: np.ndarray, col: str | None, path: Path,
                  flag: str = "--unique-col") -> np.ndarray | None:
    """U of each row: from ``col``, else from the first column of UNIQUE_ALIASES; None when
    there is none, or when an alias column is blank on every row (a report's runs.csv of runs
    whose U was unknown). DataError, naming the file, the column, the option and the lines,
    for a named column that is missing, and for a cell that is blank, not a number, <= 0 or
    above the row's D (``d``)."""
    if col is None:
        col = next((a for a in UNIQUE_ALIASES if a in frame.columns), None)
        if col is None or frame[col].isna().all():
            return None
    elif col not in frame.columns:
        raise DataError(f"{path}: no column {col!r} ({flag}); the columns are "
                        f"{', '.join(map(repr, frame.columns))}")
    what = f"column {col!r} ({flag}: U, the unique tokens each run trained on)"
    values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
    lines = frame.index.to_numpy() + 2  # file line numbers: the header is line 1

    def listed(bad: np.ndarray) -> str:
        return f"on {int(bad.sum())} row(s) (lines {', '.join(map(str, lines[bad][:5]))})"

    bad = ~np.isfinite(values)
    if bad.any():
        raise DataError(f"{path}: {what} is blank or not a number {listed(bad)}")
    bad = values <= 0
    if bad.any():
        raise DataError(f"{path}: {what} is <= 0 {listed(bad)}: a run with U of zero "
                        "trained on no data")
    bad = values > d * (1.0 + UNIQUE_RTOL)
    if bad.any():
        raise DataError(f"{path}: {what} exceeds D {listed(bad)}: a run cannot see more "
                        "distinct tokens than it trained on (if the column holds a corpus "
                        "size, the unique tokens a run saw are min(corpus, D))")
    return values
