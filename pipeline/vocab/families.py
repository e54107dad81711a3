"""Model families: a shape (ModelConfig), the family registry, and each family's builder.

This module is pure Python (no torch): the planner, the FLOP accounting and the analysis
all need shapes without building a model.

Families (docs/sweeps.md, "shape"; Radford et al. 2019 and Touvron et al. 2023):
  gpt    pre-norm LayerNorm, fused QKV with biases, learned positions, GELU MLP 4x,
         tied input/output embeddings (GPT-2 / nanoGPT).
  llama  RMSNorm, rotary positions, SwiGLU MLP (hidden = 2/3 * 4d rounded up to a multiple),
         grouped-query attention (n_kv_heads), no biases, untied output head (LLaMA).
  bert   GPT's layers without the causal mask: a bidirectional encoder trained as a masked
         language model (Devlin et al. 2019), its vocabulary one [MASK] token larger than the
         tokenizer's (pipeline.data.masking).

  vit    a Vision Transformer (Dosovitskiy et al. 2021): patches by a strided convolution, a
         [CLS] token, learned positions, GPT's pre-norm blocks without a mask, a linear
         classifier on the [CLS] state (pipeline.vision).

Objectives (OBJECTIVES, one per Family): "causal" families predict the next token at every position;
the "masked" family predicts the original token at the masked positions only, so its loss is
nats per masked token and it cannot generate text (pipeline.sample refuses it); "classify"
(vit) predicts an image's class, its loss in nats per image.

The unit of data of vit is the image: its seq_len is 1 (one image per sample) and its
vocab_size is the number of classes, so D = steps * batch_size counts images and C = FLOPs
per image x D everywhere a text family counts tokens (planner, ledger, analysis). The image's
own sequence (n_patches + 1 positions) follows from image_size and patch_size (positions).

The shape rule (one size knob -> a shape of a family) is pipeline.vocab.shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Literal


class ShapeError(ValueError):
    """A shape that cannot be built; the message names the offending values."""


@dataclass(frozen=True)
class ModelConfig:
    """A fully resolved Transformer shape. Every field is explicit so run_ids are stable."""

    family: str
    """Model family name: a key of FAMILY_REGISTRY ("gpt", "llama", "bert", "vit", ...)."""
    vocab_size: int
    """Number of token ids (256 for the byte tokenizer)."""
    seq_len: int
    """Context length in tokens (the learned position table has this many rows)."""
    n_layer: int
    """Number of Transformer blocks."""
    d_model: int
    """Residual stream width."""
    n_heads: int
    """Query heads; head_dim = d_model / n_heads."""
    n_kv_heads: int
    """Key/value heads (grouped-query attention); equals n_heads for gpt."""
    d_ff: int
    """Hidden width of the MLP (for SwiGLU: of each of the two input projections)."""
    norm: Literal["layernorm", "rmsnorm"]
    """Normalisation layer type."""
    pos: Literal["learned", "rope"]
    """Position encoding: learned absolute table, or rotary embeddings."""
    mlp: Literal["gelu", "swiglu"]
    """MLP type."""
    tied_embeddings: bool
    """Whether the output head shares the token-embedding matrix."""
    bias: bool
    """Biases in linear layers and LayerNorm (gpt: True; llama: False)."""
    dropout: float = 0.0
    """Dropout probability; 0 for scaling runs (single epoch, no overfitting)."""
    causal: bool = True
    """Causal self-attention; False gives a bidirectional encoder."""
    rope_theta: float = 10000.0
    """Rotary base frequency (llama only)."""
    norm_eps: float = 1e-5
    """Epsilon of the normalisation layers."""
    image_size: int = 0
    """vit: side of the square input image in pixels; 0 for the text families."""
    patch_size: int = 0
    """vit: side of a square patch in pixels (it divides image_size); 0 for text."""
    channels: int = 0
    """vit: colour channels of the input (1 grey, 3 RGB); 0 for text."""

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def is_image(self) -> bool:
        return self.image_size > 0

    @property
    def n_patches(self) -> int:
        """vit: patches per image, (image_size / patch_size)^2; 0 for text."""
        return (self.image_size // self.patch_size) ** 2 if self.is_image else 0

    @property
    def positions(self) -> int:
        """Positions the Transformer attends over per sample: seq_len for text, the patches
        plus [CLS] for vit (its seq_len is 1: one image)."""
        return self.n_patches + 1 if self.is_image else self.seq_len

    def __post_init__(self) -> None:
        validate(self)

    def to_dict(self) -> dict:
        return asdict(self)


def validate(cfg: ModelConfig) -> None:
    """Raise ShapeError naming the values when a shape cannot be built. Never mutates."""
    kind = get_family(cfg.family).objective
    for name in ("vocab_size", "seq_len", "n_layer", "d_model", "n_heads", "n_kv_heads", "d_ff"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ShapeError(f"{name} must be a positive integer, got {value!r}")
    if cfg.d_model % cfg.n_heads:
        raise ShapeError(
            f"d_model={cfg.d_model} is not divisible by n_heads={cfg.n_heads}"
        )
    if cfg.n_heads % cfg.n_kv_heads:
        raise ShapeError(
            f"n_heads={cfg.n_heads} is not divisible by n_kv_heads={cfg.n_kv_heads}"
        )
    if cfg.pos == "rope" and cfg.head_dim % 2:
        raise ShapeError(
            f"rotary embeddings need an even head_dim, got d_model={cfg.d_model} / "
            f"n_heads={cfg.n_heads} = {cfg.head_dim}"
        )
    if not 0.0 <= cfg.dropout < 1.0:
        raise ShapeError(f"dropout must be in [0, 1), got {cfg.dropout!r}")
    if kind is MASKED and cfg.causal:
        raise ShapeError(f"family {cfg.family!r} is a masked-LM encoder: causal must be False")
    _validate_image(cfg, kind)


def _validate_image(cfg: ModelConfig, kind: Objective) -> None:
    """An image family needs the image geometry (and a seq_len of 1 image); text families
    have none."""
    geometry = {"image_size": cfg.image_size, "patch_size": cfg.patch_size,
                "channels": cfg.channels}
    if not kind.images:
        if given := {k: v for k, v in geometry.items() if v}:
            raise ShapeError(f"family {cfg.family!r} takes text, not images: "
                             f"{', '.join(f'{k}={v}' for k, v in given.items())} is for "
                             f"{_image_families()}")
        return
    for name, value in geometry.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ShapeError(f"family {cfg.family!r}: {name} must be a positive integer, "
                             f"got {value!r}")
    if cfg.image_size % cfg.patch_size:
        raise ShapeError(f"patch_size={cfg.patch_size} does not divide "
                         f"image_size={cfg.image_size}")
    if cfg.seq_len != 1 or cfg.causal:
        raise ShapeError(f"family {cfg.family!r}: seq_len must be 1 (one image) and causal "
                         f"False, got seq_len={cfg.seq_len}, causal={cfg.causal}")


def round_up(x: float, multiple: int) -> int:
    return int(math.ceil(x / multiple) * multiple)


def swiglu_hidden(d_model: int, multiple: int) -> int:
    """LLaMA's SwiGLU width: 2/3 of 4d keeps the parameter count of a 4d GELU MLP."""
    return round_up(2 * 4 * d_model / 3, multiple)


def kv_heads_for(n_heads: int, gqa_ratio: int) -> int:
    """The largest divisor of n_heads that is <= n_heads / gqa_ratio (at least 1)."""
    target = max(1, n_heads // gqa_ratio)
    return max(d for d in range(1, target + 1) if n_heads % d == 0)


def make_config(
    family: str,
    n_layer: int,
    d_model: int,
    *,
    vocab_size: int,
    seq_len: int,
    head_dim: int = 16,
    gqa_ratio: int = 2,
    ffn_multiple: int = 16,
    n_heads: int | None = None,
    n_kv_heads: int | None = None,
    d_ff: int | None = None,
    dropout: float = 0.0,
    causal: bool | None = None,
    image_size: int = 0,
    patch_size: int = 0,
    channels: int = 0,
) -> ModelConfig:
    """A family's shape from explicit (n_layer, d_model); heads and MLP width follow the rule.
    causal: None takes the family's own (True for the causal families, False for bert and
    vit). vit: the image geometry; its seq_len is then 1 whatever is given (one image)."""
    fam = get_family(family)
    if n_heads is None:
        if d_model % head_dim:
            raise ShapeError(f"d_model={d_model} is not divisible by head_dim={head_dim}")
        n_heads = d_model // head_dim
    common = dict(n_layer=n_layer, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads,
                  d_ff=d_ff, vocab_size=vocab_size, gqa_ratio=gqa_ratio,
                  ffn_multiple=ffn_multiple, dropout=dropout)
    if fam.objective.images:
        return fam.build(**common, seq_len=1, causal=bool(causal), image_size=image_size,
                         patch_size=patch_size, channels=channels)
    if image_size or patch_size or channels:
        raise ShapeError(f"family {family!r} takes text, not images: image_size, patch_size "
                         f"and channels are for {_image_families()}")
    return fam.build(**common, seq_len=seq_len,
                     causal=fam.objective.causal if causal is None else causal)


def _gpt(*, n_layer: int, d_model: int, n_heads: int, n_kv_heads: int | None, d_ff: int | None,
         vocab_size: int, seq_len: int, gqa_ratio: int, ffn_multiple: int, dropout: float,
         causal: bool) -> ModelConfig:
    """GPT-2 / nanoGPT: LayerNorm, learned positions, GELU MLP 4x, biases, tied head."""
    return ModelConfig(
        family="gpt", vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer,
        d_model=d_model, n_heads=n_heads, n_kv_heads=n_heads if n_kv_heads is None else n_kv_heads,
        d_ff=4 * d_model if d_ff is None else d_ff, norm="layernorm", pos="learned",
        mlp="gelu", tied_embeddings=True, bias=True, dropout=dropout, causal=causal,
    )


def _llama(*, n_layer: int, d_model: int, n_heads: int, n_kv_heads: int | None,
           d_ff: int | None, vocab_size: int, seq_len: int, gqa_ratio: int, ffn_multiple: int,
           dropout: float, causal: bool) -> ModelConfig:
    """LLaMA: RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases, untied."""
    return ModelConfig(
        family="llama", vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer,
        d_model=d_model, n_heads=n_heads,
        n_kv_heads=kv_heads_for(n_heads, gqa_ratio) if n_kv_heads is None else n_kv_heads,
        d_ff=swiglu_hidden(d_model, ffn_multiple) if d_ff is None else d_ff,
        norm="rmsnorm", pos="rope", mlp="swiglu", tied_embeddings=False, bias=False,
        dropout=dropout, causal=causal,
    )


def _bert(*, n_layer: int, d_model: int, n_heads: int, n_kv_heads: int | None, d_ff: int | None,
          vocab_size: int, seq_len: int, gqa_ratio: int, ffn_multiple: int, dropout: float,
          causal: bool) -> ModelConfig:
    """BERT (Devlin et al. 2019): GPT-2's layers (LayerNorm, learned positions, GELU MLP 4x,
    biases, tied MLM head) with bidirectional attention. Pre-norm, as the transformer guide's
    blocks, where BERT itself is post-norm: pre-norm trains stably without warmup tuning at
    every depth, and keeps the three families' blocks one code path. BERT's MLM head has a
    dense + LayerNorm transform before the tied decoder; here the final norm is the transform
    (as GPT's head), so N and the FLOPs count exactly what is built. vocab_size includes the
    [MASK] token (model_vocab_size)."""
    if causal:
        raise ShapeError("family 'bert' is a bidirectional encoder; causal=True is not bert")
    cfg = _gpt(n_layer=n_layer, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads,
               d_ff=d_ff, vocab_size=vocab_size, seq_len=seq_len, gqa_ratio=gqa_ratio,
               ffn_multiple=ffn_multiple, dropout=dropout, causal=False)
    return replace(cfg, family="bert")


def _vit(*, n_layer: int, d_model: int, n_heads: int, n_kv_heads: int | None, d_ff: int | None,
         vocab_size: int, seq_len: int, gqa_ratio: int, ffn_multiple: int, dropout: float,
         causal: bool, image_size: int, patch_size: int, channels: int) -> ModelConfig:
    """ViT (Dosovitskiy et al. 2021): GPT-2's pre-norm blocks (LayerNorm, GELU MLP 4x,
    biases) without a mask over the [CLS] token and the patches; vocab_size is the number of
    classes (the head's outputs), seq_len 1 (the unit of data is the image)."""
    cfg = _gpt(n_layer=n_layer, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads,
               d_ff=d_ff, vocab_size=vocab_size, seq_len=1, gqa_ratio=gqa_ratio,
               ffn_multiple=ffn_multiple, dropout=dropout, causal=False)
    return replace(cfg, family="vit", tied_embeddings=False, image_size=image_size,
                   patch_size=patch_size, channels=channels)


@dataclass(frozen=True)
class Objective:
    """What a family is trained to predict, and every choice that follows from it. The
    trainer's batches and loss weights for each are in pipeline.train.objective, by name."""

    name: str
    """"causal", "masked" or "classify": the key of the trainer's batches and loss weights."""
    data_unit: str
    """What D counts: "tokens" (text windows) or "images" (one image per sample, seq_len 1)."""
    loss_unit: str
    """The unit of the validation loss, as reports print it."""
    extra_tokens: int
    """Token ids the objective adds after the tokenizer's (masked LM: [MASK])."""
    causal: bool
    """Whether its attention is causal when the family's builder is not told otherwise."""
    generates: bool
    """Whether its models continue text (pipeline.sample, the runs' sample tags)."""
    images: bool
    """Whether it reads images (an image corpus, image geometry in the shape), not text."""
    described: str
    """What a model of it is, in words (errors say it, e.g. why it cannot be sampled)."""
    train_keys: tuple[str, ...] = ()
    """Recipe keys only this objective reads; the sweep schema rejects them for the others."""


CAUSAL = Objective("causal", "tokens", "nats/token", 0, causal=True, generates=True,
                   images=False, described="a causal language model")
"""Predict the next token at every position (gpt, llama)."""
MASKED = Objective("masked", "tokens", "nats/masked token", 1, causal=False, generates=False,
                   images=False, train_keys=("mask_rate",),
                   described="a masked language model: it predicts masked tokens from both "
                             "sides")
"""Predict the original token at the masked positions only (BERT's MLM objective); the
loss is nats per masked token, and the vocabulary is one [MASK] id larger (model_vocab_size)."""
CLASSIFY = Objective("classify", "images", "nats/image", 0, causal=False, generates=False,
                     images=True, described="an image classifier")
"""Predict an image's class (vit); the loss is nats per image."""
OBJECTIVES: dict[str, Objective] = {o.name: o for o in (CAUSAL, MASKED, CLASSIFY)}
"""Every objective the trainer implements (pipeline.train.objective has one branch each)."""


@dataclass(frozen=True)
class Family:
    """A model family: everything the planner, the trainer and the analysis need to know of
    it, in one object registered once (register). The layers themselves are generic
    (pipeline.model builds any ModelConfig), so a family that composes them needs nothing
    else; its objective is one of OBJECTIVES."""

    name: str
    """Its name in sweep files (`family:`), run specs, the ledger and `--family`."""
    build: Callable[..., ModelConfig]
    """Its shape from (n_layer, d_model, ...) and the rule's knobs (make_config's keywords)."""
    objective: Objective
    """What it is trained to predict."""
    about: str
    """One line on what it is, with its source (docs, `--family` help)."""
    shape_keys: tuple[str, ...] = ()
    """Shape-rule keys only it reads (llama: gqa_ratio, ffn_multiple); the sweep schema
    rejects them for the families that do not."""
    auto_bf16: bool = False
    """Whether `precision: auto` may train it in bf16 on a CPU with native bf16 instructions
    (pipeline.vocab.recipe.resolve_auto): only where bf16's loss was measured equivalent."""


FAMILY_REGISTRY: dict[str, Family] = {f.name: f for f in (
    Family("gpt", _gpt, CAUSAL, "GPT-2 / nanoGPT (Radford et al. 2019)", auto_bf16=True),
    Family("llama", _llama, CAUSAL, "LLaMA (Touvron et al. 2023)",
           shape_keys=("gqa_ratio", "ffn_multiple")),
    Family("bert", _bert, MASKED, "BERT's masked-LM encoder (Devlin et al. 2019)"),
    Family("vit", _vit, CLASSIFY, "Vision Transformer (Dosovitskiy et al. 2021)"),
)}
"""The family registry (as torchtitan's model_registry, litgpt's name_to_config): name ->
Family. The sweep schema's family check, the CLI's --family choices, make_config, the
trainer's batches and the analysis's units all read it: a new family is one Family given to
register (tests/test_toy_family.py runs one through plan, train, ledger and fit)."""


DEFAULT_FAMILY = "gpt"
"""The family of a sweep file without `family:` and of `python -m pipeline.train`; run names
leave it out."""


def register(new: Family) -> None:
    """Add a family to the registry; ValueError for a name that is taken or not a plain name
    (it names run specs and sweep files), or an objective the trainer does not implement."""
    if not new.name.isidentifier():
        raise ValueError(f"family name {new.name!r} is not a plain name (letters, digits, _)")
    if new.name in FAMILY_REGISTRY:
        raise ValueError(f"family {new.name!r} is already registered")
    if OBJECTIVES.get(new.objective.name) != new.objective:
        raise ValueError(f"family {new.name!r}: objective {new.objective.name!r} is not one of "
                         f"{', '.join(OBJECTIVES)}")
    FAMILY_REGISTRY[new.name] = new


def unregister(name: str) -> None:
    """Remove a family registered with register (tests register toy families)."""
    del FAMILY_REGISTRY[name]


def family_names(*, images: bool | None = None) -> tuple[str, ...]:
    """The registered names, in order; images=False: the text families, True: the image ones."""
    return tuple(n for n, f in FAMILY_REGISTRY.items()
                 if images is None or f.objective.images == images)


def get_family(name: str) -> Family:
    """The registered family of that name; ShapeError naming the known ones otherwise."""
    if name not in FAMILY_REGISTRY:
        raise ShapeError(f"unknown family {name!r}; known: {', '.join(FAMILY_REGISTRY)}")
    return FAMILY_REGISTRY[name]


def _image_families() -> str:
    """The image families' names, for errors ("is for vit")."""
    return " or ".join(family_names(images=True)) or "an image family"


def data_unit(name: str) -> str:
    """What D counts for the family: "images" (vit: seq_len 1 image per sample) or "tokens"."""
    return get_family(name).objective.data_unit


def model_vocab_size(name: str, tokenizer_vocab: int) -> int:
    """The model's vocabulary: the tokenizer's ids, then the objective's own tokens (the
    masked family's [MASK] is id tokenizer_vocab, so no text ever encodes to it)."""
    return tokenizer_vocab + get_family(name).objective.extra_tokens


def with_overrides(cfg: ModelConfig, **changes: object) -> ModelConfig:
    """A copy with some fields changed, re-validated."""
    return replace(cfg, **changes)
