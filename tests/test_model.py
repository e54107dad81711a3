"""Tests of pipeline.model (with the shapes of pipeline.vocab.families): causality, every input
length, family differences, GPT-2 initialisation, shape errors, and sampling.

All models are tiny (<= ~60k parameters) and run on the CPU in well under a second each.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from pipeline.model import RMSNorm, Transformer, apply_rotary, rotary_tables
from pipeline.vocab.families import ModelConfig, ShapeError, make_config, with_overrides

FAMILIES = ("gpt", "llama")
VOCAB = 256


def tiny(family: str, *, n_layer: int = 2, d_model: int = 32, seq_len: int = 16,
         **kw: object) -> ModelConfig:
    return make_config(family, n_layer, d_model, vocab_size=VOCAB, seq_len=seq_len,
                       head_dim=16, **kw)


def build(cfg: ModelConfig, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(cfg).eval()


def tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, length), generator=g)


# --- causality -------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_changing_a_token_never_changes_earlier_logits(family: str) -> None:
    model = build(tiny(family))
    x = tokens(2, 16)
    with torch.no_grad():
        base, _ = model(x)
        for t in (0, 5, 14):
            changed = x.clone()
            changed[:, t + 1] = (changed[:, t + 1] + 1) % VOCAB
            out, _ = model(changed)
            # Positions <= t cannot see token t+1: bit-identical, not just close.
            assert torch.equal(out[:, : t + 1], base[:, : t + 1]), (family, t)
            # ...and position t+1 does see it (the test would pass vacuously otherwise).
            assert not torch.allclose(out[:, t + 1], base[:, t + 1])


@pytest.mark.parametrize("family", FAMILIES)
def test_bidirectional_model_sees_later_tokens(family: str) -> None:
    model = build(tiny(family, causal=False))
    x = tokens(2, 16)
    changed = x.clone()
    changed[:, 10] = (changed[:, 10] + 1) % VOCAB
    with torch.no_grad():
        base, _ = model(x)
        out, _ = model(changed)
    diff = (out[:, :10] - base[:, :10]).abs().amax(dim=-1)  # (B, 10)
    assert (diff > 1e-6).all(), diff


# --- every length up to the context (the llama seed's rotary table broke below max) ----------


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_at_every_length_matches_the_full_sequence(family: str) -> None:
    seq_len = 16
    model = build(tiny(family, seq_len=seq_len))
    x = tokens(2, seq_len)
    with torch.no_grad():
        full, _ = model(x)
        for length in range(1, seq_len + 1):
            out, _ = model(x[:, :length])
            assert out.shape == (2, length, VOCAB)
            # A causal model's logits on a prefix are those of the full sequence: positions
            # (learned or rotary) are indexed from 0 at every length.
            torch.testing.assert_close(out, full[:, :length], rtol=1e-5, atol=1e-5)


def test_rotary_embeddings_encode_relative_positions() -> None:
    head_dim, length = 8, 12
    cos, sin = rotary_tables(head_dim, length, theta=10000.0)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, head_dim, generator=g), torch.randn(1, 1, 1, head_dim, generator=g)
    q_all = apply_rotary(q.expand(1, 1, length, head_dim), cos, sin)[0, 0]  # q at every position
    k_all = apply_rotary(k.expand(1, 1, length, head_dim), cos, sin)[0, 0]
    torch.testing.assert_close(q_all[0], q[0, 0, 0])  # position 0 is not rotated
    torch.testing.assert_close(q_all.norm(dim=-1), q[0, 0, 0].norm().expand(length))  # rotation
    scores = q_all @ k_all.T  # scores[m, n] = <q at m, k at n>
    # Depends only on m - n: shifting both positions changes nothing...
    torch.testing.assert_close(scores[3, 1], scores[9, 7], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(scores[5, 5], scores[0, 0], rtol=1e-5, atol=1e-5)
    # ...while the offset does matter.
    assert not torch.allclose(scores[3, 1], scores[3, 2], atol=1e-3)


@pytest.mark.parametrize("family", FAMILIES)
def test_input_longer_than_the_context_is_rejected(family: str) -> None:
    model = build(tiny(family, seq_len=8))
    with pytest.raises(ValueError, match="input length 9 exceeds the context length 8"):
        model(tokens(1, 9))


# --- family differences ----------------------------------------------------------------------


def test_llama_uses_rmsnorm_and_no_layernorm() -> None:
    llama = build(tiny("llama"))
    kinds = [type(m) for m in llama.modules()]
    assert RMSNorm in kinds
    assert nn.LayerNorm not in kinds
    # 2 per block + the final one.
    assert kinds.count(RMSNorm) == 2 * llama.cfg.n_layer + 1
    gpt = build(tiny("gpt"))
    gpt_kinds = [type(m) for m in gpt.modules()]
    assert RMSNorm not in gpt_kinds and gpt_kinds.count(nn.LayerNorm) == 2 * gpt.cfg.n_layer + 1


def test_rmsnorm_normalises_to_unit_rms_without_centering() -> None:
    norm = RMSNorm(8, eps=1e-6)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]]) + 10.0
    y = norm(x)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(1), rtol=1e-5, atol=1e-5)
    assert (y > 0).all()  # no mean subtraction (LayerNorm would make half of them negative)


def test_gpt_ties_head_and_embedding_llama_does_not() -> None:
    gpt, llama = build(tiny("gpt")), build(tiny("llama"))
    assert gpt.head.weight is gpt.tok_emb.weight
    assert llama.head.weight is not llama.tok_emb.weight
    assert llama.head.weight.data_ptr() != llama.tok_emb.weight.data_ptr()
    # The tied matrix is one parameter, counted once.
    n_gpt = sum(p.numel() for p in gpt.parameters())
    n_separate = sum(p.numel() for _, p in gpt.named_parameters(remove_duplicate=False))
    assert n_separate - n_gpt == VOCAB * gpt.cfg.d_model


def test_llama_has_no_biases_gpt_has_them() -> None:
    llama = build(tiny("llama"))
    assert not [n for n, _ in llama.named_parameters() if n.endswith("bias")]
    assert all(getattr(m, "bias", None) is None for m in llama.modules() if isinstance(m, nn.Linear))
    gpt = build(tiny("gpt"))
    assert [n for n, _ in gpt.named_parameters() if n.endswith("bias")]


def test_llama_uses_grouped_query_attention_and_rotary_positions() -> None:
    cfg = tiny("llama", d_model=64)  # 4 heads of 16, 2 kv heads
    assert (cfg.n_heads, cfg.n_kv_heads) == (4, 2)
    model = build(cfg)
    attn = model.blocks[0].attn
    assert attn.qkv.out_features == (4 + 2 * 2) * 16
    assert model.pos_emb is None and model.rope_cos.shape == (cfg.seq_len, 8)
    assert "rope_cos" not in model.state_dict()  # rebuilt from the config, not saved


# --- initialisation --------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_gpt2_initialisation(family: str) -> None:
    n_layer = 4
    model = build(tiny(family, n_layer=n_layer, d_model=64, seq_len=32))
    residual_std = 0.02 / math.sqrt(2 * n_layer)
    seen_residual = 0
    for name, p in model.named_parameters():
        if p.dim() < 2:
            # Norm gains start at 1, biases at 0.
            expected = 0.0 if name.endswith("bias") else 1.0
            assert torch.all(p == expected), name
            continue
        is_residual = name.endswith(("attn.proj.weight", "mlp.proj.weight"))
        seen_residual += is_residual
        want = residual_std if is_residual else 0.02
        # Each matrix has >= 4096 entries: the sample std is within a few % of the true one.
        assert p.std().item() == pytest.approx(want, rel=0.08), name
        assert abs(p.mean().item()) < want / 5, name
    assert seen_residual == 2 * n_layer


@pytest.mark.parametrize("family", FAMILIES)
def test_initial_loss_is_ln_vocab_on_random_data(family: str) -> None:
    model = build(tiny(family, d_model=64, seq_len=32))
    x, y = tokens(16, 32, seed=2), tokens(16, 32, seed=3)  # independent random targets
    with torch.no_grad():
        _, loss = model(x, y)
    assert loss.item() == pytest.approx(math.log(VOCAB), abs=0.1)


# --- shape errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "kwargs", "message"),
    [
        ("gpt", {"d_model": 30, "n_heads": 4}, "d_model=30 is not divisible by n_heads=4"),
        ("llama", {"d_model": 64, "n_heads": 4, "n_kv_heads": 3},
         "n_heads=4 is not divisible by n_kv_heads=3"),
        ("llama", {"d_model": 12, "n_heads": 4}, r"even head_dim.*d_model=12.*n_heads=4 = 3"),
        ("t5", {"d_model": 32}, "unknown family 't5'"),
    ],
)
def test_invalid_shapes_raise_shape_error_naming_the_values(
    family: str, kwargs: dict, message: str
) -> None:
    d_model = kwargs.pop("d_model")
    with pytest.raises(ShapeError, match=message):
        make_config(family, 1, d_model, vocab_size=VOCAB, seq_len=8, **kwargs)


def test_shape_errors_also_come_from_the_config_itself() -> None:
    cfg = tiny("llama")
    with pytest.raises(ShapeError, match="unknown family 't5'"):
        with_overrides(cfg, family="t5")
    with pytest.raises(ShapeError, match="n_heads=2 is not divisible by n_kv_heads=3"):
        with_overrides(cfg, n_kv_heads=3)
    with pytest.raises(ShapeError, match="d_model=33 is not divisible by n_heads=2"):
        with_overrides(cfg, d_model=33)


def test_odd_head_dim_is_fine_without_rope() -> None:
    cfg = make_config("gpt", 1, 12, vocab_size=VOCAB, seq_len=8, n_heads=4)  # head_dim 3
    logits, _ = build(cfg)(tokens(1, 8))
    assert logits.shape == (1, 8, VOCAB)


# --- generate --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_shapes_and_greedy_is_deterministic(family: str) -> None:
    model = build(tiny(family))
    prompt = tokens(3, 5)
    out = model.generate(prompt, 7, temperature=0)
    assert out.shape == (3, 12) and out.dtype == torch.long
    assert torch.equal(out[:, :5], prompt)
    assert torch.equal(model.generate(prompt, 7, temperature=0), out)
    # Greedy = argmax of the model's next-token logits at every step.
    with torch.no_grad():
        for t in range(5, 12):
            logits, _ = model(out[:, :t])
            assert torch.equal(out[:, t], logits[:, -1].argmax(-1))


@pytest.mark.parametrize("family", FAMILIES)
def test_top_k_1_equals_greedy(family: str) -> None:
    model = build(tiny(family))
    prompt = tokens(2, 4)
    greedy = model.generate(prompt, 6, temperature=0)
    g = torch.Generator().manual_seed(0)
    sampled = model.generate(prompt, 6, temperature=1.5, top_k=1, generator=g)
    assert torch.equal(sampled, greedy)


def test_sampling_is_reproducible_with_a_generator_and_varies_without_filtering() -> None:
    model = build(tiny("gpt"))
    prompt = tokens(4, 2)
    a = model.generate(prompt, 8, generator=torch.Generator().manual_seed(5))
    b = model.generate(prompt, 8, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    greedy = model.generate(prompt, 8, temperature=0)
    # An untrained model is near uniform over 256 tokens: sampling differs from greedy.
    assert not torch.equal(a, greedy)


def test_top_p_keeps_at_least_one_token() -> None:
    model = build(tiny("llama"))
    prompt = tokens(2, 4)
    greedy = model.generate(prompt, 5, temperature=0)
    # A tiny top_p keeps only the most likely token: sampling becomes greedy, never empty.
    g = torch.Generator().manual_seed(0)
    out = model.generate(prompt, 5, temperature=1.0, top_p=1e-6, generator=g)
    assert torch.equal(out, greedy)


def test_top_p_keeps_the_smallest_set_reaching_the_mass() -> None:
    from pipeline.model import _filter_logits

    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = torch.isfinite(_filter_logits(probs.log(), None, 0.7))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7 <= 0.5 + 0.3
    kept = torch.isfinite(_filter_logits(probs.log(), None, 0.5))
    assert kept.tolist() == [[True, False, False, False]]
    kept = torch.isfinite(_filter_logits(probs.log(), 2, 0.99))
    assert kept.tolist() == [[True, True, False, False]]


def test_generate_crops_context_longer_than_seq_len() -> None:
    seq_len = 8
    model = build(tiny("llama", seq_len=seq_len))
    prompt = tokens(1, 20)  # longer than the context already
    out = model.generate(prompt, 10, temperature=0)
    assert out.shape == (1, 30)
    # Each new token is the greedy choice given only the last seq_len tokens.
    with torch.no_grad():
        for t in range(20, 30):
            logits, _ = model(out[:, t - seq_len : t])
            assert out[0, t].item() == logits[0, -1].argmax().item()


def test_generate_restores_training_mode_and_rejects_bad_arguments() -> None:
    model = build(tiny("gpt")).train()
    model.generate(tokens(1, 3), 2)
    assert model.training
    with pytest.raises(ValueError, match="temperature"):
        model.generate(tokens(1, 3), 2, temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        model.generate(tokens(1, 3), 2, top_p=0.0)
