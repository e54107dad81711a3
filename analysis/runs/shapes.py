"""The nearest buildable model for a compute-optimal N: a shape of the sweep's family.

Why here and guarded: the shape rule and the parameter count live in pipeline.families and
pipeline.flops (pure Python, no torch). Published data has no family, so predict falls back
to a gpt shape with vocabulary 256 (bytes) and sequence length 256, and to plain N and D
when pipeline cannot be imported at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.runs.table import RunsTable

DEFAULT_FAMILY = "gpt"
DEFAULT_VOCAB = 256
DEFAULT_SEQ_LEN = 256


@dataclass(frozen=True)
class ShapeChoice:
    """A concrete model of the family, its parameter count and the tokens for budget C."""

    family: str
    n_layer: int
    d_model: int
    n_heads: int
    head_dim: int
    vocab_size: int
    seq_len: int
    params_total: int
    params_non_embedding: int
    tokens: float
    """D = C / (6 · params_total): the budget spent on this shape."""

    def sweep_snippet(self, name: str, flops: float) -> str:
        """A runnable sweep file (kind: runs) training this shape for ``tokens`` tokens."""
        tokenizer = "bytes" if self.vocab_size == 256 else "bpe"
        vocab_line = "" if tokenizer == "bytes" else f"\n  bpe_vocab_size: {self.vocab_size}"
        return (
            f"# compute-optimal run for C = {flops:.3g} FLOPs (6·N·D), predicted by "
            "analysis.predict\n"
            f"# save as sweeps/{name}.yaml and run: python -m pipeline.sweep sweeps/{name}.yaml\n"
            f"name: {name}\n"
            "kind: runs\n"
            f"family: {self.family}\n"
            f"shape:\n  head_dim: {self.head_dim}\n"
            f"data:\n  tokenizer: {tokenizer}{vocab_line}\n  seq_len: {self.seq_len}\n"
            "runs:\n"
            f"  - {{n_layer: {self.n_layer}, d_model: {self.d_model}, "
            f"tokens: {self.tokens:.4g}}}  # N = {self.params_total:,} parameters\n"
        )


def _most_common(runs: RunsTable | None, column: str) -> int | None:
    if runs is None or column not in runs.frame.columns:
        return None
    values = runs.frame[column].dropna()
    return None if values.empty else int(values.value_counts().index[0])


def nearest_shape(n_target: float, flops: float, runs: RunsTable | None) -> ShapeChoice | str:
    """The family's shape closest to ``n_target`` in log N, or the reason there is none.

    Family, vocabulary, sequence length and head size come from the sweep's runs when they
    are recorded; otherwise gpt / 256 / 256 / the rule's default head size.
    """
    try:
        from pipeline import families, grid
        from pipeline import flops as flop_counts
    except ImportError as err:  # analysis without the pipeline package
        return f"pipeline is not importable ({err})"
    family = (runs.family() if runs is not None else None) or DEFAULT_FAMILY
    vocab = _most_common(runs, "vocab_size") or DEFAULT_VOCAB
    seq_len = _most_common(runs, "seq_len") or DEFAULT_SEQ_LEN
    d_model, n_heads = _most_common(runs, "d_model"), _most_common(runs, "n_heads")
    rule = families.ShapeRule()
    if d_model and n_heads and d_model % n_heads == 0 and (d_model // n_heads) % 2 == 0:
        rule = families.ShapeRule(head_dim=d_model // n_heads)
    try:
        cfg = grid.nearest_shape(family, n_target, rule, vocab_size=vocab, seq_len=seq_len)
    except families.ShapeError as err:
        return str(err)
    n_total = flop_counts.params_total(cfg)
    return ShapeChoice(
        family=cfg.family, n_layer=cfg.n_layer, d_model=cfg.d_model, n_heads=cfg.n_heads,
        head_dim=cfg.head_dim, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len,
        params_total=n_total, params_non_embedding=flop_counts.params_non_embedding(cfg),
        tokens=flops / (6.0 * n_total),
    )
