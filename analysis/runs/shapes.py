"""The nearest buildable model for a compute-optimal N: a shape of the sweep's family.

Why here and guarded: the shape rule and the parameter count live in pipeline.vocab.families and
pipeline.vocab.flops (pure Python, no torch). Published data has no family, so predict falls back
to a gpt shape with vocabulary 256 (bytes) and sequence length 256, and to plain N and D
when pipeline cannot be imported at all.
"""

from __future__ import annotations

import math
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
    """D = C / (6 · params_total) tokens (vit: images, C / (6 · params_total · positions))."""
    tokenizer_vocab: int = 0
    """The tokenizer's ids (vocab_size less an objective's own: bert's [MASK])."""
    image: tuple[str, int] | None = None
    """vit: (the runs' image corpus, patch_size); None for text."""
    train_units: float | None = None
    """The runs' train split in images (vit), to allow the repetition the run needs."""

    def sweep_snippet(self, name: str, flops: float) -> str:
        """A runnable sweep file (kind: runs) training this shape for ``tokens`` tokens."""
        if self.image is not None:
            data = f"data:\n  corpus: '{self.image[0]}'\n"
            if self.train_units:  # a small image set repeats: say how often, explicitly
                data += f"  max_epochs: {math.ceil(1.01 * self.tokens / self.train_units)}\n"
            shape = f"shape:\n  head_dim: {self.head_dim}\n  patch_size: {self.image[1]}\n"
            unit = "images"
        else:
            tokenizer = "bytes" if self.tokenizer_vocab == 256 else "bpe"
            vocab_line = ("" if tokenizer == "bytes"
                          else f"\n  bpe_vocab_size: {self.tokenizer_vocab}")
            data = f"data:\n  tokenizer: {tokenizer}{vocab_line}\n  seq_len: {self.seq_len}\n"
            shape, unit = f"shape:\n  head_dim: {self.head_dim}\n", "tokens"
        return (
            f"# compute-optimal run for C = {flops:.3g} FLOPs (6·N·D), predicted by "
            "analysis.predict\n"
            f"# save as sweeps/{name}.yaml and run: python -m pipeline.sweep sweeps/{name}.yaml\n"
            f"name: {name}\n"
            "kind: runs\n"
            f"family: {self.family}\n"
            f"{shape}{data}"
            "runs:\n"
            f"  - {{n_layer: {self.n_layer}, d_model: {self.d_model}, "
            f"tokens: {self.tokens:.4g}}}  # {unit}; N = {self.params_total:,} parameters\n"
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
        from pipeline.vocab import families, shapes
        from pipeline.vocab import flops as flop_counts
    except ImportError as err:  # analysis without the pipeline package
        return f"pipeline is not importable ({err})"
    family = (runs.family() if runs is not None else None) or DEFAULT_FAMILY
    vocab = _most_common(runs, "vocab_size") or DEFAULT_VOCAB
    seq_len = _most_common(runs, "seq_len") or DEFAULT_SEQ_LEN
    d_model, n_heads = _most_common(runs, "d_model"), _most_common(runs, "n_heads")
    head_dim = 16
    if d_model and n_heads and d_model % n_heads == 0 and (d_model // n_heads) % 2 == 0:
        head_dim = d_model // n_heads
    image, geometry = None, {}
    try:
        fam = families.get_family(family)
    except families.ShapeError as err:  # the runs' family is not registered here
        return str(err)
    if fam.objective.images:  # vit: the runs' image geometry
        geometry = {k: _most_common(runs, k) for k in ("image_size", "patch_size", "channels")}
        corpus = _most_common_text(runs, "data_corpus")
        if not all(geometry.values()) or not corpus:
            return "the runs do not record their image size, patch size and corpus"
        image = (corpus, int(geometry["patch_size"]))
    try:
        rule = shapes.ShapeRule(head_dim=head_dim, **geometry)
        cfg = shapes.nearest_shape(family, n_target, rule, vocab_size=vocab, seq_len=seq_len)
    except families.ShapeError as err:
        return str(err)
    n_total = flop_counts.params_total(cfg)
    return ShapeChoice(
        family=cfg.family, n_layer=cfg.n_layer, d_model=cfg.d_model, n_heads=cfg.n_heads,
        head_dim=cfg.head_dim, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len,
        params_total=n_total, params_non_embedding=flop_counts.params_non_embedding(cfg),
        # 6·N per token; a vit image is `positions` tokens (flops_per_token's 6nd for it).
        tokens=flops / flop_counts.flops_per_token(cfg, "6nd"),
        tokenizer_vocab=cfg.vocab_size - fam.objective.extra_tokens,
        image=image, train_units=train_units(runs) if image else None,
    )


def train_units(runs: RunsTable | None) -> float | None:
    """The train split's size the runs record (D / epochs, their median), None when they do
    not (published data, runs without final/epochs)."""
    if runs is None or "epochs" not in runs.frame.columns:
        return None
    size = (runs.frame["D"] / runs.frame["epochs"]).dropna()
    return None if size.empty else float(size.median())


def _most_common_text(runs: RunsTable | None, column: str) -> str | None:
    if runs is None or column not in runs.frame.columns:
        return None
    values = runs.frame[column].dropna().astype(str)
    values = values[values != ""]
    return None if values.empty else str(values.value_counts().index[0])
