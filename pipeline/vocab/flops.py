"""Parameter and FLOP accounting by group, under named conventions. Pure Python, no torch.

Why pure: the grid planner turns a compute budget C into tokens D before any model exists,
and the analysis side never imports torch. The counts are derived from the fields of
``pipeline.vocab.families.ModelConfig`` only, and are tested against ``pipeline.model.Transformer``
(``sum(p.numel())``) and against ``torch.utils.flop_counter.FlopCounterMode``.

Parameters (``param_groups``)
-----------------------------
token_embedding      V·d
position_embedding   seq_len·d for a learned table; 0 for rotary (no parameters)
attention            per layer: Q, K, V and output projections (+ their biases if cfg.bias)
mlp                  per layer: 2 matrices (GELU) or 3 (SwiGLU) (+ biases if cfg.bias)
norms                2 per layer + the final one; LayerNorm weight (+ bias), RMSNorm weight
output_head          V·d when untied (never a bias); 0 when tied to the token embedding

Two parameter conventions (docs/analysis.md, "Methods"):

* ``params_total``: every parameter, a tied head counted once. Chinchilla's N
  (Hoffmann et al. 2022).
* ``params_non_embedding``: the total minus token and position embeddings and minus an
  untied output head. Kaplan's N (Kaplan et al. 2020, Sec. 2.1: "excluding all vocabulary
  and positional embeddings"; N ≈ 12·n_layer·d² counts the blocks only).

FLOP conventions (``CONVENTIONS``; all are TRAINING FLOPs per token = forward + backward)
-----------------------------------------------------------------------------------------
``"6nd"``
    6·N with N = params_total. 2 FLOPs per parameter per token forward (one multiply-add),
    backward twice that. Hoffmann et al. 2022 (Sec. 3 and Appendix F) use C ≈ 6·N·D.
``"6nd_non_embedding"``
    6·N with Kaplan's non-embedding N. Kaplan et al. 2020, Sec. 2.1: C ≈ 6·N·D.
``"kaplan"``
    3 × C_forward with C_forward = 2·N + 2·n_layer·n_ctx·d_attn (Kaplan et al. 2020,
    Table 1), N non-embedding, n_ctx = seq_len, d_attn = n_heads·head_dim. The second term
    is the attention QK logits only, as Kaplan tabulates it.
``"exact"``
    3 × (sum of ``forward_flops_per_sequence``) / seq_len: Hoffmann et al. 2022,
    Appendix F, with backward = 2 × forward. Counts every matmul including the full T×T
    attention (not halved for the causal mask, as in the paper; the bert family's encoder
    attends to all T×T positions, so for it the count is the work done) and the embedding lookup as
    a 2·T·V·d matmul (as the paper counts it; torch does a gather: 0 matmul FLOPs). Norms,
    biases, activations and residual adds are not counted (nor are they in the paper).

vit (a unit of data is an image of S = n_patches + 1 positions; seq_len is 1)
------------------------------------------------------------------------------
Groups as above with T = S: token_embedding is the patch projection (C·p²·d + its bias) and
the [CLS] vector, position_embedding S·d, output_head the classifier (classes·d + bias).
FLOPs are per image: "exact" counts the patch convolution as its matmul (2·n_patches·C·p²·d),
the blocks over S positions, and the classifier on [CLS] only (2·d·classes); "6nd" is 6·N·S
(6·N per token, S tokens per image), "kaplan" 3·S·(2·N + 2·n_layer·S·d_attn).

A FLOP here is one multiply or one add: a multiply-add of an (m×k)·(k×n) matmul is 2·m·k·n.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for type hints
    from pipeline.vocab.families import ModelConfig

CONVENTIONS: tuple[str, ...] = ("6nd", "6nd_non_embedding", "kaplan", "exact")

PARAM_GROUPS: tuple[str, ...] = (
    "token_embedding",
    "position_embedding",
    "attention",
    "mlp",
    "norms",
    "output_head",
)
"""Keys of ``param_groups``; they sum to ``params_total``."""

FLOP_GROUPS: tuple[str, ...] = (
    "embeddings",
    "attention_qkv",
    "attention_logits",
    "attention_softmax",
    "attention_reduction",
    "attention_out",
    "mlp",
    "logits",
)
"""Keys of ``forward_flops_per_sequence`` (Hoffmann et al. 2022, Appendix F)."""

_MLP_MATRICES = {"gelu": 2, "swiglu": 3}


def _check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown FLOP convention {convention!r}; known: {', '.join(CONVENTIONS)}")


def _mlp_matrices(mlp: str) -> int:
    try:
        return _MLP_MATRICES[mlp]
    except KeyError:
        raise ValueError(f"unknown mlp {mlp!r}; known: {', '.join(_MLP_MATRICES)}") from None


# --------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------


def param_groups(cfg: ModelConfig) -> dict[str, int]:
    """Parameter count per group (keys: ``PARAM_GROUPS``), derived from the config fields.

    Why by group: the two N conventions differ only in which groups they include, and a
    disagreement with the built model can be traced to one group.
    """
    d, hd, L = cfg.d_model, cfg.head_dim, cfg.n_layer
    q_dim, kv_dim = cfg.n_heads * hd, cfg.n_kv_heads * hd

    # Attention, per layer: W_q (d×q_dim), W_k and W_v (d×kv_dim each), W_o (q_dim×d).
    attention = d * (q_dim + 2 * kv_dim) + q_dim * d
    if cfg.bias:
        attention += (q_dim + 2 * kv_dim) + d

    # MLP, per layer: GELU has fc (d×d_ff) and proj (d_ff×d); SwiGLU adds a gate (d×d_ff).
    k = _mlp_matrices(cfg.mlp)
    mlp = k * d * cfg.d_ff
    if cfg.bias:
        mlp += (k - 1) * cfg.d_ff + d

    # Norms: two per block plus the final one. RMSNorm has a weight only.
    if cfg.norm == "layernorm":
        per_norm = 2 * d if cfg.bias else d
    elif cfg.norm == "rmsnorm":
        per_norm = d
    else:
        raise ValueError(f"unknown norm {cfg.norm!r}; known: layernorm, rmsnorm")

    if cfg.pos not in ("learned", "rope"):
        raise ValueError(f"unknown pos {cfg.pos!r}; known: learned, rope")

    if cfg.is_image:  # vit: patches, [CLS] and positions in; a classifier (with bias) out
        return {
            "token_embedding": cfg.channels * cfg.patch_size ** 2 * d + d + d,
            "position_embedding": cfg.positions * d,
            "attention": L * attention,
            "mlp": L * mlp,
            "norms": (2 * L + 1) * per_norm,
            "output_head": cfg.vocab_size * d + cfg.vocab_size,
        }
    return {
        "token_embedding": cfg.vocab_size * d,
        "position_embedding": cfg.seq_len * d if cfg.pos == "learned" else 0,
        "attention": L * attention,
        "mlp": L * mlp,
        "norms": (2 * L + 1) * per_norm,
        "output_head": 0 if cfg.tied_embeddings else cfg.vocab_size * d,
    }


def params_total(cfg: ModelConfig) -> int:
    """All parameters, a tied output head counted once (Chinchilla's N)."""
    return sum(param_groups(cfg).values())


def params_non_embedding(cfg: ModelConfig) -> int:
    """Kaplan's N: the total minus token and position embeddings and an untied output head.

    Kaplan et al. 2020 (Sec. 2.1) exclude "all vocabulary and positional embeddings";
    their N ≈ 12·n_layer·d² counts the Transformer blocks only, so an untied output head
    (a vocabulary matrix too) is excluded as well. The final norm stays in.
    """
    g = param_groups(cfg)
    return params_total(cfg) - g["token_embedding"] - g["position_embedding"] - g["output_head"]


# --------------------------------------------------------------------------------------
# Forward FLOPs (Hoffmann et al. 2022, Appendix F)
# --------------------------------------------------------------------------------------


def _attention_layer_flops(
    T: int, d: int, n_heads: int, n_kv_heads: int, head_dim: int
) -> dict[str, float]:
    """Forward FLOPs of one attention layer over a sequence of T tokens (Appendix F)."""
    d_attn = n_heads * head_dim
    return {
        # 1) Q, K, V projections: 2·T·d·(n_heads + 2·n_kv_heads)·hd (the paper has
        #    n_kv_heads = n_heads, i.e. 2·3·T·d·d_attn; with GQA K and V are narrower).
        "attention_qkv": 2.0 * T * d * (n_heads + 2 * n_kv_heads) * head_dim,
        # 2) Q·Kᵀ logits: 2·T·T·d_attn (full T×T, not halved for the causal mask).
        "attention_logits": 2.0 * T * T * d_attn,
        # 3) Softmax: 3·n_heads·T·T (the paper's count: exp, sum, divide).
        "attention_softmax": 3.0 * n_heads * T * T,
        # 4) Softmax·V reduction: 2·T·T·d_attn.
        "attention_reduction": 2.0 * T * T * d_attn,
        # 5) Output projection: 2·T·d_attn·d.
        "attention_out": 2.0 * T * d_attn * d,
    }


def forward_flops_per_sequence(
    cfg: ModelConfig,
    *,
    groups: Iterable[str] | None = None,
    seq_len: int | None = None,
) -> dict[str, float]:
    """Forward FLOPs of one sequence, by group (Hoffmann et al. 2022, Appendix F).

    Args:
        cfg: the model shape.
        groups: which of ``FLOP_GROUPS`` to return (default: all, in that order). Unknown
            names raise ValueError.
        seq_len: tokens in the sequence, T (default ``cfg.seq_len``); a shorter T models a
            shorter input to the same model.

    Per-layer items are already multiplied by n_layer. The attention T×T terms are the full
    square, as in the paper, although a causal model could skip half of it. ``embeddings``
    is 2·T·V·d as the paper counts it (a one-hot matmul); torch does a gather instead.
    """
    T = cfg.positions if seq_len is None else seq_len
    if not isinstance(T, int) or isinstance(T, bool) or T < 1:
        raise ValueError(f"seq_len must be a positive integer, got {T!r}")
    d, L, V = cfg.d_model, cfg.n_layer, cfg.vocab_size
    if cfg.is_image and cfg.positions != T:
        raise ValueError(f"vit attends over its {cfg.positions} positions (patches + [CLS]); "
                         f"seq_len={T} is not one of its inputs")

    per_layer = _attention_layer_flops(T, d, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)
    # 6) MLP: k matrices of d×d_ff: 2·T·d·d_ff·k (k = 2 GELU, 3 SwiGLU).
    per_layer["mlp"] = 2.0 * T * d * cfg.d_ff * _mlp_matrices(cfg.mlp)

    if cfg.is_image:
        everything = {
            # 0) vit: the patch projection, a strided convolution = a matmul of each patch's
            #    C·p² pixels by d: 2·n_patches·C·p²·d (the [CLS] and position adds are free).
            "embeddings": 2.0 * cfg.n_patches * cfg.channels * cfg.patch_size ** 2 * d,
            **{name: L * flops for name, flops in per_layer.items()},
            # 7) vit: the classifier reads the [CLS] position only: 2·d·classes.
            "logits": 2.0 * d * V,
        }
    else:
        everything = {
            # 0) Embedding lookup, counted as a matmul with one-hot rows: 2·T·V·d.
            "embeddings": 2.0 * T * V * d,
            **{name: L * flops for name, flops in per_layer.items()},
            # 7) Output logits: 2·T·d·V (tied or not, the matmul is done).
            "logits": 2.0 * T * d * V,
        }
    if groups is None:
        return everything
    wanted = list(groups)
    unknown = [g for g in wanted if g not in everything]
    if unknown:
        raise ValueError(f"unknown FLOP group(s) {unknown}; known: {', '.join(FLOP_GROUPS)}")
    return {g: everything[g] for g in wanted}


# --------------------------------------------------------------------------------------
# Training FLOPs under a named convention
# --------------------------------------------------------------------------------------


def flops_per_token(cfg: ModelConfig, convention: str) -> float:
    """TRAINING FLOPs (forward + backward) per token under a named convention.

    See the module docstring for the conventions and their sources.
    """
    _check_convention(convention)
    # vit's unit of data is the image (seq_len 1) of `positions` tokens; text: one token.
    per = cfg.positions if cfg.is_image else 1
    if convention == "6nd":
        return 6.0 * params_total(cfg) * per
    if convention == "6nd_non_embedding":
        return 6.0 * params_non_embedding(cfg) * per
    if convention == "kaplan":
        d_attn = cfg.n_heads * cfg.head_dim
        forward = 2.0 * params_non_embedding(cfg) + 2.0 * cfg.n_layer * cfg.positions * d_attn
        return 3.0 * forward * per
    # "exact": backward = 2 × forward, so training = 3 × forward.
    return 3.0 * sum(forward_flops_per_sequence(cfg).values()) / cfg.seq_len


def _check_nonnegative(name: str, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def training_flops(cfg: ModelConfig, tokens: float, convention: str) -> float:
    """C = FLOPs per token × D: the training compute of D tokens, in FLOPs."""
    _check_nonnegative("tokens", tokens)
    return flops_per_token(cfg, convention) * tokens


def tokens_for_budget(cfg: ModelConfig, flops: float, convention: str) -> float:
    """D = C / FLOPs per token: how many training tokens a budget of C FLOPs buys."""
    _check_nonnegative("flops", flops)
    return flops / flops_per_token(cfg, convention)


# --------------------------------------------------------------------------------------
# Chinchilla Table A4 (a check that the accounting matches the paper's)
# --------------------------------------------------------------------------------------


def chinchilla_table_a4_ratio(
    n_layer: int,
    d_model: int,
    ffw: int,
    n_heads: int,
    head_size: int,
    seq_len: int = 2048,
    vocab: int = 32000,
) -> float:
    """Exact training FLOPs / 6·N·D for a model of Hoffmann et al. 2022, Table A4.

    The paper's convention for this table (Hoffmann et al. 2022, Appendix F and Table A4):
      * FLOPs: forward per layer only (Q/K/V, logits, softmax, reduction, output projection,
        and the 2-matrix dense block); no embedding and no logit FLOPs; backward = 2×.
      * N: all parameters except the input embedding: per layer the Q/K/V/output and dense
        matrices with their biases, two LayerNorms (weight + bias) and the Transformer-XL
        relative-position parameters (a d×d projection and two d-vectors: d² + 2d), then a
        final LayerNorm and the untied output projection V·d (no bias).
    The ratio does not depend on D (both sides are linear in it). Row 1 of the table lies
    only 4e-5 above the rounding boundary (1.02504 -> 1.03): counting anything more than
    about 2.6k extra parameters there (e.g. a V-sized bias on the output projection) turns it
    into 1.02.
    """
    d, f, T = d_model, ffw, seq_len
    d_attn = n_heads * head_size
    attention = sum(_attention_layer_flops(T, d, n_heads, n_heads, head_size).values())
    dense = 2.0 * T * 2 * d * f
    exact_training = 3.0 * n_layer * (attention + dense)  # per sequence of T tokens

    qkv = d * 3 * d_attn + 3 * d_attn  # Q, K, V with biases
    out = d_attn * d + d  # output projection with bias
    dense_params = 2 * d * f + f + d  # dense block: 2 matrices with biases
    layer_norms = 2 * 2 * d  # two LayerNorms, weight + bias
    relative_positions = d * d + 2 * d  # Transformer-XL: W_r (d×d) and the u, v biases
    per_layer_params = qkv + out + dense_params + layer_norms + relative_positions
    n = n_layer * per_layer_params + 2 * d + vocab * d  # + final LayerNorm + output proj.
    return exact_training / (6.0 * n * T)
