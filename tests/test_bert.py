"""The masked-LM family (bert): BERT's masking rule, bidirectional attention, the loss in
nats per masked token, the [MASK] id in the vocabulary, and the refusals around it.

Tiny models (<= 40k parameters) on 300 KB of the stdlib corpus; the file runs in ~15 s.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.config import SweepError, parse_sweep
from pipeline.data import TokenData
from pipeline.data.masking import (
    IGNORE,
    check_rate,
    choose,
    eval_rng,
    mask_windows,
    train_rng,
)
from pipeline.model import Transformer
from pipeline.sample import SampleError, sample_text
from pipeline.train import NullTracker, evaluate, micro_batches, train
from pipeline.train import objective as obj
from pipeline.train.cli import main as train_cli
from pipeline.vocab import keys
from pipeline.vocab.families import (
    FAMILY_REGISTRY,
    MASKED,
    ShapeError,
    family_names,
    make_config,
    model_vocab_size,
    with_overrides,
)
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

TEXT_FAMILIES = family_names(images=False)

DATA = DataSpec(max_bytes=300_000)


@pytest.fixture(autouse=True)
def _cache_env(module_cache: Path) -> None:
    """Every test of this module builds its tokens in the module's cache (conftest)."""


@pytest.fixture(scope="module")
def data(small_text: TokenData) -> TokenData:
    return small_text


def bert_spec(*, steps: int = 40, mask_rate: float = 0.15, micro: int = 0,
              **train_kw: object) -> RunSpec:
    cfg = make_config("bert", 1, 32, vocab_size=model_vocab_size("bert", 256), seq_len=32)
    train_kw.setdefault("batch_size", 8)
    return RunSpec(sweep="test", model=cfg, data=DATA,
                   train=TrainSpec(mask_rate=mask_rate, **train_kw), steps=steps,
                   exec=ExecSpec(threads=1, device="cpu", micro_batch_size=micro))


# --- the family ------------------------------------------------------------------------------


def test_every_family_has_an_objective_and_bert_adds_the_mask_token() -> None:
    assert FAMILY_REGISTRY["bert"].objective is MASKED
    assert model_vocab_size("bert", 256) == 257
    assert model_vocab_size("gpt", 256) == model_vocab_size("llama", 256) == 256
    cfg = make_config("bert", 2, 32, vocab_size=257, seq_len=16)
    assert not cfg.causal and cfg.norm == "layernorm" and cfg.pos == "learned"
    assert cfg.mlp == "gelu" and cfg.tied_embeddings and cfg.bias
    with pytest.raises(ShapeError, match="masked-LM encoder: causal must be False"):
        with_overrides(cfg, causal=True)


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_the_encoder_sees_later_tokens_and_the_decoders_do_not(family: str) -> None:
    cfg = make_config(family, 2, 32, vocab_size=model_vocab_size(family, 256), seq_len=16)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    changed = x.clone()
    changed[:, 10] = (changed[:, 10] + 1) % 256
    with torch.no_grad():
        before, after = model(x)[0], model(changed)[0]
    earlier = (after[:, :10] - before[:, :10]).abs().amax(dim=-1)  # (B, 10)
    if family == "bert":
        assert (earlier > 1e-6).all(), earlier  # every earlier position sees position 10
    else:
        assert torch.equal(after[:, :10], before[:, :10])


# --- the masking rule ------------------------------------------------------------------------


def test_masking_proportions_hold() -> None:
    """15% chosen; of them 80% [MASK], 10% random, 10% kept. 2M positions: the binomial
    standard errors are 0.03% (chosen) and 0.07% (of the chosen), so the bands are > 5 sigma."""
    chosen, to_mask, to_random, repl = choose((2000, 1000), 0.15, np.random.default_rng(0), 256)
    assert chosen.mean() == pytest.approx(0.15, abs=0.002)
    n = chosen.sum()
    assert to_mask.sum() / n == pytest.approx(0.8, abs=0.004)
    assert to_random.sum() / n == pytest.approx(0.1, abs=0.004)
    kept = chosen & ~to_mask & ~to_random
    assert kept.sum() / n == pytest.approx(0.1, abs=0.004)
    assert not (to_mask & to_random).any() and not (to_mask & ~chosen).any()
    assert repl.min() >= 0 and repl.max() < 256  # random replacements are never [MASK]


def test_masked_windows_hide_only_the_chosen_positions() -> None:
    x = torch.randint(0, 256, (64, 32), generator=torch.Generator().manual_seed(0))
    inputs, targets = mask_windows(x, 0.15, 256, train_rng(0, 3))
    chosen = targets != IGNORE
    assert torch.equal(targets[chosen], x[chosen])  # targets are the original ids
    assert torch.equal(inputs[~chosen], x[~chosen])  # the rest is shown unchanged
    assert (inputs[chosen] == 256).float().mean() == pytest.approx(0.8, abs=0.1)
    assert (inputs[~chosen] < 256).all()
    assert chosen.any(dim=1).all()  # every window has a target


def test_a_short_window_always_gets_a_target() -> None:
    x = torch.zeros((500, 2), dtype=torch.long)
    _, targets = mask_windows(x, 0.01, 256, np.random.default_rng(0))
    assert ((targets != IGNORE).sum(dim=1) >= 1).all()


def test_masking_is_a_pure_function_of_seed_and_step() -> None:
    x = torch.randint(0, 256, (8, 32), generator=torch.Generator().manual_seed(0))
    a = mask_windows(x, 0.15, 256, train_rng(5, 7))
    b = mask_windows(x, 0.15, 256, train_rng(5, 7))
    c = mask_windows(x, 0.15, 256, train_rng(5, 8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])
    assert not torch.equal(mask_windows(x, 0.15, 256, eval_rng(0))[1],
                           mask_windows(x, 0.15, 256, eval_rng(1))[1])


@pytest.mark.parametrize("rate", [0.0, 1.0, -0.1, 1.5, math.nan, True])
def test_a_rate_outside_the_open_interval_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="mask_rate must be in \\(0, 1\\)"):
        check_rate(rate)


def test_validation_is_masked_the_same_way_for_every_run(data: TokenData) -> None:
    """Other seeds, other batch sizes: the same 64 windows with the same masked positions."""
    one = obj.validation_batches(bert_spec(seed=0), data, 8, 8, torch.device("cpu"))
    two = obj.validation_batches(bert_spec(seed=3, batch_size=16), data, 16, 4,
                                 torch.device("cpu"))
    for a, b in zip(zip(*one, strict=True), zip(*two, strict=True), strict=True):
        torch.testing.assert_close(torch.cat(a), torch.cat(b), rtol=0, atol=0)
    # Training batches do depend on the seed.
    t0 = obj.train_batch(bert_spec(seed=0), data, 0, torch.device("cpu"))
    t1 = obj.train_batch(bert_spec(seed=1), data, 0, torch.device("cpu"))
    assert not torch.equal(t0[1], t1[1])


# --- loss in nats per masked token -----------------------------------------------------------


def test_evaluation_averages_over_masked_tokens_and_micro_batches_keep_the_mean(
        data: TokenData) -> None:
    spec = bert_spec()
    torch.manual_seed(0)
    model = Transformer(spec.model)
    batches = obj.validation_batches(spec, data, 8, 4, torch.device("cpu"))
    total = count = 0.0
    with torch.no_grad():
        for x, y in batches:
            logits, _ = model(x)
            chosen = y != IGNORE
            total += torch.nn.functional.cross_entropy(
                logits[chosen].float(), y[chosen], reduction="sum").item()
            count += chosen.sum().item()
    assert evaluate(model, batches, spec, torch.device("cpu")) == pytest.approx(
        total / count, rel=1e-5)
    # An untrained model predicts ~uniformly over the 257 ids.
    assert total / count == pytest.approx(math.log(257), abs=0.2)
    # Micro-batches: shares are the passes' shares of the masked tokens, summing to 1.
    x, y = batches[0]
    passes = micro_batches(x, y, bert_spec(micro=2))
    assert len(passes) == 4 and sum(s for *_, s in passes) == pytest.approx(1.0)
    with torch.no_grad():
        whole = model(x, y)[1]
        parts = sum(model(xs, ys)[1] * share for xs, ys, share in passes)
    torch.testing.assert_close(parts, whole, rtol=1e-5, atol=1e-6)


def test_bert_trains_below_the_unigram_loss_and_logs_no_bits_per_byte(data: TokenData) -> None:
    spec = bert_spec(steps=120, warmup_steps=5)
    tracker = NullTracker()
    result = train(spec, tracker, data=data)
    assert result.status == keys.STATUS_FINISHED
    # Uniform over 257 ids is 5.55 nats; the byte unigram of Python source ~3.6 (measured
    # 3.55 on this split); a model that reads both sides of a masked byte does better.
    assert result.final_val_loss < 3.3, result.curve["val_loss"]
    assert result.curve["val_loss"][-1] < result.curve["val_loss"][0]
    assert math.isnan(result.final_val_bpb)
    assert keys.FINAL_VAL_BPB not in tracker.summary
    assert not any(keys.VAL_BPB in m for _, m in tracker.metrics)
    assert tracker.summary[keys.FINAL_VAL_LOSS] == result.final_val_loss


def test_the_mask_rate_is_part_of_the_run_id() -> None:
    assert bert_spec(mask_rate=0.15).run_id != bert_spec(mask_rate=0.3).run_id
    assert bert_spec().run_id == bert_spec(mask_rate=0.15).run_id


# --- refusals --------------------------------------------------------------------------------


def test_sampling_refuses_a_masked_lm(tmp_path: Path) -> None:
    with pytest.raises(SampleError, match="masked language model.*does not generate"):
        sample_text(bert_spec(), tmp_path, "def ")


SWEEP = """
name: s
kind: runs
family: {family}
train: {{mask_rate: {rate}}}
runs: [{{depth: 1, tokens: 1e5}}]
"""


@pytest.mark.parametrize(("family", "rate", "message"), [
    ("gpt", 0.15, "train.mask_rate: is ignored by family 'gpt'"),
    ("llama", 0.2, "train.mask_rate: is ignored by family 'llama'"),
    ("bert", 1.0, "train.mask_rate: Input should be less than 1"),
    ("bert", 0, "train.mask_rate: Input should be greater than 0"),
    ("gpt", "0.15, variants: [{mask_rate: 0.3}]", "train.variants[0].mask_rate: is ignored"),
])
def test_sweep_files_refuse_a_bad_or_misplaced_mask_rate(family: str, rate: float,
                                                         message: str) -> None:
    with pytest.raises(SweepError, match=re.escape(message)):
        parse_sweep(SWEEP.format(family=family, rate=rate), "x.yaml")


@pytest.mark.parametrize(("argv", "message"), [
    (["--family", "bert", "--mask-rate", "1.5"], "mask_rate must be in (0, 1), got 1.5"),
    (["--family", "gpt", "--mask-rate", "0.2"], "--mask-rate 0.2 is for masked-LM families"),
    (["--family", "bert", "--d-model", "30"], "d_model=30 is not divisible by head_dim=16"),
])
def test_the_single_run_cli_refuses_bad_settings_in_one_line(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert train_cli([*argv, "--corpus", "stdlib"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # no store, no checkpoints


def test_data_parallel_workers_weigh_the_masked_loss_as_one_worker() -> None:
    """Each of 2 workers (as pipeline.train.parallel splits a batch) weighs its passes by its
    masked tokens over the global batch's: DDP's mean of their gradients is the one-worker
    gradient (a mean of per-worker means differed by 18% at B=4, T=8)."""
    from pipeline.train.parallel import World, local_rows

    spec = bert_spec(batch_size=4, micro=1)
    cfg = make_config("bert", 1, 16, vocab_size=257, seq_len=8, head_dim=8)
    torch.manual_seed(0)
    model = Transformer(cfg)
    x = torch.randint(0, 256, (4, 8), generator=torch.Generator().manual_seed(0))
    inputs, targets = mask_windows(x, 0.3, 256, train_rng(0, 3))

    def grad(loss: torch.Tensor) -> torch.Tensor:
        model.zero_grad()
        loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    one = grad(model(inputs, targets)[1])
    total = int((targets != IGNORE).sum())
    per_worker = []
    for rank in range(2):
        xs, ys = local_rows(inputs, targets, World(rank=rank, size=2))
        parts = micro_batches(xs, ys, spec, global_targets=total, workers=2)
        per_worker.append(grad(sum(model(a, b)[1] * share for a, b, share in parts)))
    torch.testing.assert_close((per_worker[0] + per_worker[1]) / 2, one, rtol=1e-4, atol=1e-6)
