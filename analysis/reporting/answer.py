"""The answer block: first in the report and the last lines in the terminal (issue 55). Only
presentation of analysis.checks.answer, from fit.json's ``summary.answer`` (so a report kept
because nothing changed prints the same lines as one just made)."""

from __future__ import annotations

from typing import Any

from analysis.reporting.document import Block, Bullets, Heading, Table

ROWS = (("n_opt", "N_opt (parameters)"), ("d_opt", "D_opt ({unit})"),
        ("tokens_per_param", "{unit} per parameter"), ("loss", "loss (nats/{unit_one})"))


def _sig3(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def _cell(ans: dict[str, Any], key: str) -> str:
    iv = ans.get(f"{key}_ci95")
    text = _sig3(ans.get(key))
    return text if iv is None else f"{text} [{_sig3(iv[0])}, {_sig3(iv[1])}]"


def answer_blocks(ans: dict[str, Any] | None, unit: str = "tokens") -> list[Block]:
    """The block at the top of the report; nothing without an answer (no headline law)."""
    if ans is None:
        return []
    one = unit.removesuffix("s")
    rows = tuple((label.format(unit=unit, unit_one=one), _cell(ans, key)) for key, label in ROWS)
    return [
        Heading(f"Answer at C = {_sig3(ans['flops'])} FLOPs"),
        Table(("compute-optimal", "estimate [95% interval]"), rows),
        Bullets((f"**Law**: {ans['law']} ({ans['what']}): {ans['why']}.",
                 f"**How sure**: {ans['sure']}.",
                 f"**Next**: {ans['next']}.")),
    ]


def answer_lines(ans: dict[str, Any] | None) -> list[str]:
    """The same for the terminal: a few plain lines."""
    if ans is None:
        return ["answer: none (no law could be chosen; see the report's laws section)"]
    return [f"answer at C = {_sig3(ans['flops'])} FLOPs ({ans['law']}): N_opt "
            f"{_cell(ans, 'n_opt')}, D_opt {_cell(ans, 'd_opt')}, "
            f"{_cell(ans, 'tokens_per_param')} per parameter, loss {_cell(ans, 'loss')}",
            f"how sure: {ans['sure']}",
            f"next: {ans['next']}"]
