"""Tests of pipeline.vocab.flops (and shapes.nearest_shape) against the built model and the paper.

Three independent references:
  * the torch model: analytic parameter counts == sum(p.numel()) of pipeline.model.Transformer;
  * torch's FlopCounterMode: analytic matmul FLOPs == what torch actually multiplies;
  * Hoffmann et al. 2022, Table A4: the six published FLOP ratios to 2 decimals.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from pipeline.model import Transformer
from pipeline.vocab.families import (
    ModelConfig,
    ShapeError,
    family_names,
    make_config,
    with_overrides,
)
from pipeline.vocab.flops import (
    CONVENTIONS,
    FLOP_GROUPS,
    PARAM_GROUPS,
    chinchilla_table_a4_ratio,
    flops_per_token,
    forward_flops_per_sequence,
    param_groups,
    params_non_embedding,
    params_total,
    tokens_for_budget,
    training_flops,
)
from pipeline.vocab.shapes import ShapeRule, nearest_shape, shape_for_depth

TEXT_FAMILIES = family_names(images=False)


def test_accounting_imports_no_torch() -> None:
    """The planner and the analysis use these modules without torch (the analysis never imports it)."""
    code = "import sys, pipeline.vocab.flops, pipeline.vocab.families; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------------------
# Random valid shapes
# --------------------------------------------------------------------------------------


@st.composite
def configs(draw: st.DrawFn, mix_switches: bool = True) -> ModelConfig:
    """A small valid ModelConfig of either family; tied/untied and bias on/off.

    With mix_switches, norm / pos / mlp are also drawn independently of the family: the
    model and the accounting must both follow the config fields, not the family name.
    """
    family = draw(st.sampled_from(TEXT_FAMILIES))
    n_heads = draw(st.integers(1, 4))
    n_kv_heads = draw(st.sampled_from([k for k in range(1, n_heads + 1) if n_heads % k == 0]))
    head_dim = draw(st.sampled_from([2, 4, 6, 8]))
    cfg = make_config(
        family,
        n_layer=draw(st.integers(1, 3)),
        d_model=n_heads * head_dim,
        vocab_size=draw(st.integers(2, 50)),
        seq_len=draw(st.integers(1, 12)),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=draw(st.integers(1, 40)),
    )
    changes: dict[str, object] = {
        "tied_embeddings": draw(st.booleans()),
        "bias": draw(st.booleans()),
    }
    if mix_switches:
        changes["norm"] = draw(st.sampled_from(["layernorm", "rmsnorm"]))
        changes["pos"] = draw(st.sampled_from(["learned", "rope"]))
        changes["mlp"] = draw(st.sampled_from(["gelu", "swiglu"]))
    return with_overrides(cfg, **changes)


def _model_group(name: str) -> str:
    """Which PARAM_GROUPS entry a named parameter of pipeline.model.Transformer belongs to."""
    if name.startswith("tok_emb."):
        return "token_embedding"
    if name.startswith("pos_emb."):
        return "position_embedding"
    if name.startswith("head."):
        return "output_head"  # only listed when untied: parameters() deduplicates tied ones
    if ".attn." in name:
        return "attention"
    if ".mlp." in name:
        return "mlp"
    if "norm" in name:
        return "norms"
    raise AssertionError(f"parameter {name!r} of the model matches no accounting group")


def _model_groups(model: torch.nn.Module) -> dict[str, int]:
    counts = dict.fromkeys(PARAM_GROUPS, 0)
    for name, p in model.named_parameters():
        counts[_model_group(name)] += p.numel()
    return counts


# --------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(configs())
def test_param_groups_match_the_built_model(cfg: ModelConfig) -> None:
    model = Transformer(cfg)
    total = sum(p.numel() for p in model.parameters())  # a tied matrix is listed once
    # Group by group first, so a failure names the group that differs.
    assert param_groups(cfg) == _model_groups(model), cfg
    assert params_total(cfg) == total
    embeddings = model.tok_emb.weight.numel()
    if model.pos_emb is not None:
        embeddings += model.pos_emb.weight.numel()
    if not cfg.tied_embeddings:
        embeddings += model.head.weight.numel()
    assert params_non_embedding(cfg) == total - embeddings


@settings(max_examples=300, deadline=None)
@given(configs())
def test_param_groups_sum_and_non_embedding_identity(cfg: ModelConfig) -> None:
    g = param_groups(cfg)
    assert tuple(g) == PARAM_GROUPS
    assert all(isinstance(v, int) and v >= 0 for v in g.values())
    assert sum(g.values()) == params_total(cfg)
    assert params_non_embedding(cfg) == (
        params_total(cfg) - g["token_embedding"] - g["position_embedding"] - g["output_head"]
    )
    assert (g["output_head"] == 0) == cfg.tied_embeddings
    assert (g["position_embedding"] == 0) == (cfg.pos == "rope")


def test_family_defaults_known_counts() -> None:
    """Hand-computed counts for one shape of each family, independent of the formulas."""
    gpt = make_config("gpt", 2, 32, vocab_size=256, seq_len=64, head_dim=16)
    # wte 256·32, wpe 64·32; block: 2 LN (4·32) + qkv 32·96+96 + proj 32·32+32
    # + fc 32·128+128 + proj 128·32+32; final LN 64.
    block = 4 * 32 + (32 * 96 + 96) + (32 * 32 + 32) + (32 * 128 + 128) + (128 * 32 + 32)
    assert params_total(gpt) == 256 * 32 + 64 * 32 + 2 * block + 64
    assert params_non_embedding(gpt) == 2 * block + 64

    llama = make_config("llama", 2, 32, vocab_size=256, seq_len=64, head_dim=16, gqa_ratio=2)
    assert (llama.n_heads, llama.n_kv_heads, llama.d_ff) == (2, 1, 96)  # 2/3·128 -> 96
    # block: 2 RMSNorm (2·32) + q 32·32 + k,v 32·16 each + o 32·32 + 3 · 32·96
    block = 2 * 32 + 32 * 32 + 2 * 32 * 16 + 32 * 32 + 3 * 32 * 96
    assert params_total(llama) == 256 * 32 + 2 * block + 32 + 256 * 32
    assert params_non_embedding(llama) == 2 * block + 32


# --------------------------------------------------------------------------------------
# FLOPs against torch's FlopCounterMode
# --------------------------------------------------------------------------------------


def _count_flops(model: Transformer, idx: torch.Tensor) -> tuple[int, int]:
    """(forward, backward) matmul FLOPs that FlopCounterMode sees for one training step.

    SDPA is forced onto the MATH backend. On CPU the default fused kernel
    (aten._scaled_dot_product_flash_attention_for_cpu) has no FLOP formula registered in
    torch.utils.flop_counter (torch 2.13), so FlopCounterMode silently counts it as 0.
    The math path is the same computation decomposed into two bmm's of the full T×T
    (the causal mask is applied after Q·Kᵀ), i.e. 4·B·H·T²·hd, which is what the paper
    counts for the logits + reduction.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: threads only add contention (and wall-time noise)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            with FlopCounterMode(display=False) as fwd_counter:
                logits, _ = model(idx)
            with FlopCounterMode(display=False) as bwd_counter:
                logits.float().pow(2).mean().backward()
    finally:
        torch.set_num_threads(threads)
    return fwd_counter.get_total_flops(), bwd_counter.get_total_flops()


@settings(max_examples=30, deadline=None)
@given(configs(), st.integers(1, 3), st.data())
def test_matmul_flops_match_flop_counter(cfg: ModelConfig, batch: int, data: st.DataObject) -> None:
    """Forward matmul FLOPs == exact − embeddings − softmax; backward == 2 × forward.

    Tolerance: none (equality). Both sides count 2·m·k·n per matmul and nothing else:
    FlopCounterMode ignores bias adds, norms, activations and the softmax, and torch's
    embedding is a gather (0 matmul FLOPs) where the paper counts 2·T·V·d, so those two
    groups are taken out of the analytic side. With GQA the model repeats K/V to n_heads
    before SDPA, so torch counts the T×T matmuls over n_heads heads, as the paper does.
    """
    T = data.draw(st.integers(1, cfg.seq_len), label="T")  # any T <= seq_len
    torch.manual_seed(0)
    model = Transformer(cfg)
    idx = torch.randint(0, cfg.vocab_size, (batch, T))
    forward, backward = _count_flops(model, idx)

    f = forward_flops_per_sequence(cfg, seq_len=T)
    expected = batch * (sum(f.values()) - f["embeddings"] - f["attention_softmax"])
    assert forward == expected
    # Every matmul y = x·W costs two in backward (dx and dW); SDPA's two bmm's cost four.
    assert backward == 2 * forward


def test_flop_counter_every_family_at_full_length() -> None:
    """Each family's default at seq_len (bert: the full T x T the encoder really attends)."""
    for family in TEXT_FAMILIES:
        cfg = shape_for_depth(family, 2, ShapeRule(), vocab_size=256, seq_len=64)
        forward, backward = _count_flops(Transformer(cfg), torch.zeros(2, 64, dtype=torch.long))
        f = forward_flops_per_sequence(cfg)
        expected = 2 * (sum(f.values()) - f["embeddings"] - f["attention_softmax"])
        assert (family, forward, backward) == (family, expected, 2 * expected)


# --------------------------------------------------------------------------------------
# Forward FLOPs by group
# --------------------------------------------------------------------------------------


def test_forward_flops_groups_and_appendix_f_terms() -> None:
    cfg = make_config("gpt", 3, 64, vocab_size=100, seq_len=10, head_dim=16)
    T, d, L, V, H = 10, 64, 3, 100, 4
    f = forward_flops_per_sequence(cfg)
    assert tuple(f) == FLOP_GROUPS
    assert f["embeddings"] == f["logits"] == 2 * T * V * d
    assert f["attention_qkv"] == L * 2 * 3 * T * d * d  # the paper's 2·3·T·d·d_attn
    assert f["attention_logits"] == f["attention_reduction"] == L * 2 * T * T * d
    assert f["attention_softmax"] == L * 3 * H * T * T
    assert f["attention_out"] == L * 2 * T * d * d
    assert f["mlp"] == L * 2 * T * 2 * d * 4 * d
    assert forward_flops_per_sequence(cfg, groups=["mlp", "logits"]) == {
        "mlp": f["mlp"],
        "logits": f["logits"],
    }
    with pytest.raises(ValueError, match="nope"):
        forward_flops_per_sequence(cfg, groups=["mlp", "nope"])
    with pytest.raises(ValueError, match="seq_len"):
        forward_flops_per_sequence(cfg, seq_len=0)


def test_gqa_narrows_only_the_kv_projections() -> None:
    mha = make_config("llama", 2, 64, vocab_size=50, seq_len=8, head_dim=16, gqa_ratio=1)
    gqa = with_overrides(mha, n_kv_heads=1)
    a, b = forward_flops_per_sequence(mha), forward_flops_per_sequence(gqa)
    assert {k for k in FLOP_GROUPS if a[k] != b[k]} == {"attention_qkv"}
    assert a["attention_qkv"] - b["attention_qkv"] == 2 * 2 * 8 * 64 * 2 * (4 - 1) * 16


# --------------------------------------------------------------------------------------
# Conventions
# --------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(configs())
def test_convention_orderings_that_always_hold(cfg: ModelConfig) -> None:
    per_token = {c: flops_per_token(cfg, c) for c in CONVENTIONS}
    assert all(v > 0 for v in per_token.values())
    # Dropping embeddings removes V·d > 0 parameters; Kaplan adds the attention term on top.
    assert per_token["6nd_non_embedding"] < per_token["6nd"]
    assert per_token["6nd_non_embedding"] < per_token["kaplan"]
    assert per_token["6nd"] == 6 * params_total(cfg)
    assert per_token["kaplan"] - per_token["6nd_non_embedding"] == pytest.approx(
        6 * cfg.n_layer * cfg.seq_len * cfg.n_heads * cfg.head_dim
    )


def test_convention_ordering_for_a_realistic_shape() -> None:
    """Chinchilla row 1-like shape: the exact count is the largest (embeddings + logits +
    full T×T attention), Kaplan's non-embedding 6N the smallest."""
    cfg = make_config("gpt", 10, 640, vocab_size=32000, seq_len=2048, head_dim=64)
    c = {k: flops_per_token(cfg, k) for k in CONVENTIONS}
    assert c["6nd_non_embedding"] < c["kaplan"] < c["6nd"] < c["exact"]


def test_exact_grows_with_context_by_the_attention_terms_only() -> None:
    short = make_config("llama", 2, 64, vocab_size=50, seq_len=16, head_dim=16)
    long = with_overrides(short, seq_len=32)
    # Per token, only the T×T terms depend on T: 3·L·(4·d_attn + 3·H) per extra token.
    extra = flops_per_token(long, "exact") - flops_per_token(short, "exact")
    assert extra == pytest.approx(3 * 2 * (4 * 64 + 3 * 4) * 16)
    assert params_total(long) == params_total(short)  # rotary: no position parameters


@settings(max_examples=100, deadline=None)
@given(
    configs(mix_switches=False),
    st.sampled_from(CONVENTIONS),
    st.floats(1.0, 1e15, allow_nan=False, allow_infinity=False),
)
def test_tokens_for_budget_round_trip(cfg: ModelConfig, convention: str, tokens: float) -> None:
    c = training_flops(cfg, tokens, convention)
    assert c == pytest.approx(flops_per_token(cfg, convention) * tokens, rel=1e-12)
    assert tokens_for_budget(cfg, c, convention) == pytest.approx(tokens, rel=1e-12)


def test_unknown_convention_and_bad_numbers() -> None:
    cfg = make_config("gpt", 1, 16, vocab_size=10, seq_len=4)
    for call in (
        lambda: flops_per_token(cfg, "6ND"),
        lambda: training_flops(cfg, 1.0, "6ND"),
        lambda: tokens_for_budget(cfg, 1.0, "6ND"),
    ):
        with pytest.raises(ValueError) as err:
            call()
        message = str(err.value)
        assert "'6ND'" in message
        assert all(c in message for c in CONVENTIONS)
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="tokens"):
            training_flops(cfg, bad, "6nd")
        with pytest.raises(ValueError, match="flops"):
            tokens_for_budget(cfg, bad, "6nd")


# --------------------------------------------------------------------------------------
# Chinchilla Table A4
# --------------------------------------------------------------------------------------

TABLE_A4 = [
    # layers, d_model, ffw, heads, head size, published ratio
    (10, 640, 2560, 10, 64, "1.03"),
    (20, 1024, 4096, 16, 64, "1.10"),
    (24, 1280, 5120, 10, 128, "1.08"),
    (26, 1792, 7168, 14, 128, "1.04"),
    (28, 2048, 8192, 16, 128, "1.03"),
    (40, 3584, 14336, 28, 128, "0.99"),
]


@pytest.mark.parametrize("n_layer,d_model,ffw,n_heads,head_size,published", TABLE_A4)
def test_chinchilla_table_a4(
    n_layer: int, d_model: int, ffw: int, n_heads: int, head_size: int, published: str
) -> None:
    ratio = chinchilla_table_a4_ratio(n_layer, d_model, ffw, n_heads, head_size)
    assert f"{ratio:.2f}" == published, ratio


def test_table_a4_needs_the_relative_position_parameters() -> None:
    """Without the d²+2d per layer in N, every row comes out 0.06-0.08 too high: the counting
    detail is load-bearing, not a rounding accident. Checked on the largest row."""
    L, d, f, V = 40, 3584, 14336, 32000
    ratio = chinchilla_table_a4_ratio(L, d, f, 28, 128)
    rel_pos = L * (d * d + 2 * d)
    matrices = 4 * d * d + 2 * d * f  # attention and dense block (d_attn = d here)
    biases = 3 * d + d + f + d
    layer_norms = 2 * 2 * d
    per_layer = matrices + biases + layer_norms
    n_with = L * per_layer + rel_pos + 2 * d + V * d  # + final LN + output projection
    without = ratio * n_with / (n_with - rel_pos)
    assert f"{without:.2f}" != "0.99"
    assert without - ratio > 0.05


# --------------------------------------------------------------------------------------
# nearest_shape
# --------------------------------------------------------------------------------------

RULE = ShapeRule(max_depth=12)
COUNTERS = {"total": params_total, "non_embedding": params_non_embedding}


def _counts(family: str, convention: str) -> list[int]:
    return [
        COUNTERS[convention](shape_for_depth(family, k, RULE, vocab_size=256, seq_len=64))
        for k in range(1, RULE.max_depth + 1)
    ]


@pytest.mark.parametrize("family", TEXT_FAMILIES)
@pytest.mark.parametrize("convention", ["total", "non_embedding"])
def test_nearest_shape_hits_each_depth_and_splits_at_the_geometric_mean(
    family: str, convention: str
) -> None:
    counts = _counts(family, convention)
    assert counts == sorted(set(counts))  # strictly increasing in depth

    def depth_for(target: float) -> int:
        cfg = nearest_shape(family, target, RULE, vocab_size=256, seq_len=64, convention=convention)
        assert COUNTERS[convention](cfg) == counts[cfg.n_layer - 1]
        return cfg.n_layer

    for depth, n in enumerate(counts, start=1):
        assert depth_for(n) == depth
    for depth, (lo, hi) in enumerate(itertools.pairwise(counts), start=1):
        middle = math.sqrt(lo * hi)  # equally far from both in log space
        assert depth_for(middle * (1 - 1e-9)) == depth
        assert depth_for(middle * (1 + 1e-9)) == depth + 1
    assert depth_for(counts[0] / 2) == 1  # 2x below depth 1 is still accepted


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_nearest_shape_errors_outside_the_rule(family: str) -> None:
    counts = _counts(family, "total")
    kw = {"vocab_size": 256, "seq_len": 64}
    with pytest.raises(ShapeError, match="more than 2x below") as err:
        nearest_shape(family, counts[0] / 2.01, RULE, **kw)
    assert str(counts[0]) in str(err.value)
    with pytest.raises(ShapeError, match="max_depth=12") as err:
        nearest_shape(family, counts[-1] * 1.01, RULE, **kw)
    assert str(counts[-1]) in str(err.value)
    for bad in (0, -5.0, math.nan, math.inf):
        with pytest.raises(ShapeError, match="target_params"):
            nearest_shape(family, bad, RULE, **kw)
    with pytest.raises(ShapeError, match="'kaplan'"):
        nearest_shape(family, counts[3], RULE, convention="kaplan", **kw)  # type: ignore[arg-type]
