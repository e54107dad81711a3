"""Tests of the trainer (pipeline.train) and its checkpoints (pipeline.checkpoint).

Tiny models (8k-35k parameters), <= 150 steps, on a 300 KB slice of the standard library
(tokenised once per module into a tmp cache). Every checkpoint folder is under tmp_path and
$SCALING_CACHE_DIR points to a tmp folder, so nothing is written outside pytest's tmp dirs.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from pipeline import checkpoint
from pipeline.data import TokenData
from pipeline.model import Transformer
from pipeline.train import NullTracker, RunResult, Stopped, make_optimizer, train
from pipeline.vocab import keys
from pipeline.vocab.families import family_names, make_config, model_vocab_size
from pipeline.vocab.flops import flops_per_token, params_non_embedding, params_total
from pipeline.vocab.recipe import lr_at, trained_precision
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

TEXT_FAMILIES = family_names(images=False)

DATA = DataSpec(max_bytes=300_000)
LN_VOCAB = math.log(256)


@pytest.fixture(autouse=True)
def _cache_env(module_cache: Path) -> None:
    """Every test of this module builds its tokens in the module's cache (conftest)."""


@pytest.fixture(scope="module")
def data(small_text: TokenData) -> TokenData:
    return small_text


def make_spec(family: str = "gpt", *, steps: int = 40, n_layer: int = 1, d_model: int = 32,
              seq_len: int = 32, checkpoint_interval: int = 0, log_interval: int = 10,
              **train_kw: object) -> RunSpec:
    cfg = make_config(family, n_layer, d_model, vocab_size=model_vocab_size(family, 256),
                      seq_len=seq_len)
    train_kw.setdefault("batch_size", 8)
    return RunSpec(
        sweep="test", model=cfg, data=DATA, train=TrainSpec(**train_kw), steps=steps,
        exec=ExecSpec(threads=1, device="cpu", checkpoint_interval=checkpoint_interval,
                      log_interval=log_interval),
    )


def metric_points(tracker: NullTracker, key: str) -> list[tuple[int, float]]:
    return [(step, m[key]) for step, m in tracker.metrics if key in m]


def ckpt_steps(folder: Path) -> list[int]:
    return sorted(int(p.name[5:13]) for p in folder.glob("step_*.pt"))


# --- learning-rate schedule ------------------------------------------------------------------


def test_warmup_is_linear_from_zero_to_peak() -> None:
    spec = make_spec(steps=100, lr=1e-3, warmup_steps=10)
    lrs = [lr_at(s, spec) for s in range(10)]
    assert lrs == pytest.approx([1e-3 * (s + 1) / 10 for s in range(10)], rel=1e-12)
    assert lr_at(9, spec) == pytest.approx(1e-3)  # the last warmup step reaches the peak


@pytest.mark.parametrize("warmup", [0, 7])
def test_cosine_decays_from_peak_to_exactly_min_ratio_at_the_last_step(warmup: int) -> None:
    spec = make_spec(steps=50, lr=2e-3, min_lr_ratio=0.1, warmup_steps=warmup)
    lrs = [lr_at(s, spec) for s in range(50)]
    assert lrs[warmup] == pytest.approx(2e-3)
    assert lrs[-1] == 2e-3 * 0.1  # exactly: cos(pi) == -1.0 in floating point
    after = lrs[warmup:]
    assert all(a >= b for a, b in zip(after, after[1:], strict=False))  # non-increasing
    # Halfway through the decay it is the midpoint of peak and floor (cosine shape).
    mid = warmup + (50 - 1 - warmup) / 2
    if mid.is_integer():
        assert lrs[int(mid)] == pytest.approx((2e-3 + 2e-4) / 2)
    assert min(lrs) >= 2e-4 * (1 - 1e-12)


def test_wsd_is_stable_then_decays_linearly_to_the_floor() -> None:
    spec = make_spec(steps=100, lr=1e-3, min_lr_ratio=0.1, warmup_steps=5, schedule="wsd",
                     decay_fraction=0.2)
    lrs = [lr_at(s, spec) for s in range(100)]
    assert lrs[:5] == pytest.approx([1e-3 * (s + 1) / 5 for s in range(5)])
    assert all(lr == 1e-3 for lr in lrs[5:80])  # stable phase
    decay = lrs[80:]
    steps = [b - a for a, b in zip(decay, decay[1:], strict=False)]
    assert steps == pytest.approx([steps[0]] * len(steps))  # linear: constant decrement
    assert steps[0] < 0
    assert decay[-1] == pytest.approx(1e-4, rel=1e-12)


def test_constant_schedule_stays_at_peak_after_warmup() -> None:
    spec = make_spec(steps=30, lr=5e-4, warmup_steps=3, schedule="constant")
    lrs = [lr_at(s, spec) for s in range(30)]
    assert lrs[:3] == pytest.approx([5e-4 / 3, 1e-3 / 3, 5e-4])
    assert all(lr == 5e-4 for lr in lrs[2:])


def test_trainer_applies_the_schedule(data: TokenData) -> None:
    spec = make_spec(steps=20, log_interval=1, lr=1e-3, warmup_steps=4)
    tracker = NullTracker()
    train(spec, tracker, data=data)
    logged = metric_points(tracker, keys.TRAIN_LR)
    assert [s for s, _ in logged] == list(range(1, 21))
    assert [v for _, v in logged] == pytest.approx([lr_at(s - 1, spec) for s, _ in logged])


# --- optimizer -------------------------------------------------------------------------------


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_weight_decay_only_on_matrices(family: str) -> None:
    spec = make_spec(family, weight_decay=0.1)
    model = Transformer(spec.model)
    opt = make_optimizer(model, spec, torch.device("cpu"))
    decayed = [p for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]]
    plain = [p for g in opt.param_groups if g["weight_decay"] == 0 for p in g["params"]]
    assert decayed and plain
    assert all(p.dim() >= 2 for p in decayed)
    assert all(p.dim() < 2 for p in plain)  # norms and biases
    assert {g["weight_decay"] for g in opt.param_groups} == {0.0, 0.1}
    # Every parameter exactly once (gpt's tied embedding/head is one parameter).
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))


# --- training --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_training_reduces_validation_loss(family: str, data: TokenData) -> None:
    spec = make_spec(family, steps=150, warmup_steps=5)  # ~22k (gpt) / ~29k (llama) params
    assert params_total(spec.model) < 30_000
    tracker = NullTracker()
    result = train(spec, tracker, data=data)
    assert result.status == keys.STATUS_FINISHED
    # Uniform over bytes is ln 256 = 5.55; bigram statistics of Python source alone give ~3.
    assert result.final_val_loss < LN_VOCAB - 2.0, result.curve["val_loss"]
    curve = result.curve["val_loss"]
    assert curve[-1] == result.final_val_loss and curve[-1] < curve[0]
    assert result.final_train_loss < LN_VOCAB - 2.0
    assert result.final_val_bpb == pytest.approx(
        data.bits_per_byte(result.final_val_loss), rel=1e-9)


def test_result_accounting(data: TokenData) -> None:
    spec = make_spec(steps=24, evals_per_run=4, log_interval=5)
    tracker = NullTracker()
    result = train(spec, tracker, data=data)
    assert (result.steps, result.tokens) == (24, 24 * 8 * 32) and result.tokens == spec.tokens
    assert result.params_total == params_total(spec.model)
    assert result.params_non_embedding == params_non_embedding(spec.model)
    assert result.flops["exact"] == pytest.approx(flops_per_token(spec.model, "exact") * spec.tokens)
    assert result.flops["6nd"] == pytest.approx(6 * result.params_total * spec.tokens)
    # Evals every 24 // 4 = 6 steps and at the end: one val/loss point per curve entry.
    assert result.curve["step"] == [6, 12, 18, 24]
    assert metric_points(tracker, keys.VAL_LOSS) == list(
        zip(result.curve["step"], result.curve["val_loss"], strict=True))
    # Training loss every log_interval steps, plus the last partial window.
    assert [s for s, _ in metric_points(tracker, keys.TRAIN_LOSS)] == [5, 10, 15, 20, 24]
    assert tracker.summary[keys.FINAL_VAL_LOSS] == result.final_val_loss
    assert tracker.summary[keys.FINAL_TOKENS] == spec.tokens
    assert tracker.summary[keys.flops_key("exact")] == result.flops["exact"]
    assert result.tokens_per_s > 0 and result.wall_s > 0


class _NoTruthValue(Transformer):
    """A model without a truth value, as torch.compile's wrapper is (its __len__ raises):
    benchmarks/gpu/gpu_throughput.py trains such a model, and the step once asked `forward or
    model` (TypeError on the H200, 2026-12-04)."""

    def __len__(self) -> int:
        raise TypeError("no len()")


def test_a_model_without_a_truth_value_trains(data: TokenData,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import pipeline.train as train_module

    monkeypatch.setattr(train_module, "build_model", _NoTruthValue)
    result = train(make_spec(steps=4, evals_per_run=1), NullTracker(), data=data)
    assert result.status == keys.STATUS_FINISHED and result.steps == 4


def test_vocab_mismatch_is_rejected(data: TokenData) -> None:
    cfg = make_config("gpt", 1, 16, vocab_size=300, seq_len=16)
    spec = RunSpec(sweep="t", model=cfg, data=DATA, train=TrainSpec(), steps=1)
    with pytest.raises(ValueError, match="vocab_size=300 does not match the tokenizer's 256"):
        train(spec, data=data)


# --- resume ----------------------------------------------------------------------------------


class Interrupt(Exception):
    pass


def interrupt_at(k: int):
    def hook(done: int) -> None:
        if done == k:
            raise Interrupt(f"stopped at {k}")
    return hook


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_interrupted_and_resumed_run_equals_an_uninterrupted_one(
    family: str, data: TokenData, tmp_path: Path
) -> None:
    spec = make_spec(family, steps=60, warmup_steps=5, checkpoint_interval=10)
    reference = train(spec, data=data)  # no checkpoints at all

    folder = tmp_path / "ckpt"
    with pytest.raises(Interrupt):
        train(spec, data=data, checkpoint_dir=folder, on_step=interrupt_at(30))
    # The checkpoint due at the interrupted step was written before the hook ran.
    assert ckpt_steps(folder) == [20, 30]
    resumed = train(spec, data=data, checkpoint_dir=folder)
    assert resumed.resumed_from == 30 and resumed.steps == 60
    # Tolerance: none. On CPU the resumed run is bit-identical: batches are a pure function of
    # (seed, step), the LR a pure function of the step, model and AdamW state (incl. its step
    # count) round-trip exactly through torch.save, and the same kernels with the same thread
    # count reduce in the same order. (On GPUs non-deterministic kernels may break this.)
    assert resumed.final_val_loss == reference.final_val_loss
    assert resumed.curve == reference.curve
    assert resumed.final_train_loss == reference.final_train_loss


def test_a_stop_request_checkpoints_the_current_step_and_resumes_from_it(
    data: TokenData, tmp_path: Path
) -> None:
    """A preempted run (pipeline.trial.stop_on_sigint) stops after the step it is on, between
    the periodic checkpoints, with a checkpoint of that step: nothing is trained twice, and
    the resumed run equals the uninterrupted one exactly."""
    spec = make_spec(steps=60, warmup_steps=5, checkpoint_interval=10)
    reference = train(spec, data=data)
    folder = tmp_path / "ckpt"
    done = {"steps": 0}

    def count(step: int) -> None:
        done["steps"] = step

    with pytest.raises(Stopped) as stopped:
        train(spec, data=data, checkpoint_dir=folder, on_step=count,
              stop_requested=lambda: done["steps"] >= 37)
    assert stopped.value.step == 37 and stopped.value.checkpointed
    assert ckpt_steps(folder) == [30, 37]
    resumed = train(spec, data=data, checkpoint_dir=folder)
    assert resumed.resumed_from == 37
    assert resumed.final_val_loss == reference.final_val_loss
    assert resumed.curve == reference.curve


def test_resume_from_the_final_checkpoint_repeats_nothing(data: TokenData, tmp_path: Path) -> None:
    """A run killed after its final checkpoint (before MLflow heard of it) is re-run."""
    spec = make_spec(steps=20, evals_per_run=2)
    first = train(spec, data=data, checkpoint_dir=tmp_path)
    assert ckpt_steps(tmp_path) == [20]
    tracker = NullTracker()
    again = train(spec, tracker, data=data, checkpoint_dir=tmp_path)
    assert again.resumed_from == 20
    assert again.curve == first.curve  # no duplicated final eval point
    assert again.curve["step"] == [10, 20]
    assert again.final_val_loss == first.final_val_loss
    assert again.final_train_loss == first.final_train_loss
    assert keys.FINAL_TRAIN_LOSS in tracker.summary
    assert again.tokens_per_s > 0  # throughput of the attempt chain, not 0 tokens / 0 s


def test_resume_false_ignores_checkpoints(data: TokenData, tmp_path: Path) -> None:
    spec = make_spec(steps=20)
    train(spec, data=data, checkpoint_dir=tmp_path)
    fresh = train(spec, data=data, checkpoint_dir=tmp_path, resume=False)
    assert fresh.resumed_from is None


def test_no_checkpoint_means_from_scratch(data: TokenData, tmp_path: Path) -> None:
    assert checkpoint.load_latest(tmp_path / "missing") is None
    assert checkpoint.load_latest(tmp_path) is None
    result = train(make_spec(steps=10), data=data, checkpoint_dir=tmp_path / "new")
    assert result.resumed_from is None and result.status == keys.STATUS_FINISHED


def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(
    data: TokenData, tmp_path: Path
) -> None:
    spec = make_spec(steps=40, checkpoint_interval=10)
    reference = train(spec, data=data)
    with pytest.raises(Interrupt):
        train(spec, data=data, checkpoint_dir=tmp_path, on_step=interrupt_at(30))
    newest = tmp_path / "step_00000030.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # truncated
    with pytest.warns(UserWarning, match="step_00000030.pt fails its sha256 check"):
        resumed = train(spec, data=data, checkpoint_dir=tmp_path)
    assert resumed.resumed_from == 20
    assert resumed.final_val_loss == reference.final_val_loss  # bit-exact, as above


# --- divergence ------------------------------------------------------------------------------


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_huge_learning_rate_diverges_without_crashing(family: str, data: TokenData) -> None:
    spec = make_spec(family, steps=60, lr=1e6, log_interval=10)
    tracker = NullTracker()
    result = train(spec, tracker, data=data)
    assert result.status == keys.STATUS_DIVERGED
    assert result.diverged_step is not None and 0 <= result.diverged_step < 60
    assert result.steps == result.diverged_step
    assert result.tokens == result.diverged_step * 8 * 32
    assert math.isnan(result.final_val_loss) and math.isnan(result.final_val_bpb)
    assert keys.FINAL_VAL_LOSS not in tracker.summary
    assert keys.FINAL_VAL_BPB not in tracker.summary
    assert tracker.tags[keys.TAG_DIVERGED_STEP] == str(result.diverged_step)
    assert tracker.summary[keys.FINAL_STEPS] == result.diverged_step


@pytest.fixture
def nan_at_step(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The trainer's model returns a NaN training loss at optimizer step 7 (0-based)."""
    bad_step = 7

    class NaNModel(Transformer):
        def __init__(self, cfg, **kw) -> None:
            super().__init__(cfg, **kw)
            self.train_calls = 0

        def forward(self, idx, targets=None):
            logits, loss = super().forward(idx, targets)
            if self.training and loss is not None:
                if self.train_calls == bad_step:
                    loss = loss * float("nan")
                self.train_calls += 1
            return logits, loss

    monkeypatch.setattr("pipeline.train.build_model", NaNModel)
    yield bad_step


def test_injected_nan_diverges_at_that_step(
    nan_at_step: int, data: TokenData, tmp_path: Path
) -> None:
    # The NaN (step 7) is in the log window 5..9; an eval and a checkpoint are due at step 8.
    spec = make_spec(steps=30, log_interval=5, eval_interval=4, checkpoint_interval=4)
    tracker = NullTracker()
    result = train(spec, tracker, data=data, checkpoint_dir=tmp_path)
    assert result.status == keys.STATUS_DIVERGED
    assert result.diverged_step == nan_at_step
    assert math.isnan(result.final_val_loss)
    assert keys.FINAL_VAL_LOSS not in tracker.summary
    assert tracker.summary[keys.FINAL_TRAIN_LOSS] == metric_points(tracker, keys.TRAIN_LOSS)[-1][1]
    # Nothing after the NaN is evaluated or checkpointed: a diverged model is never saved.
    vals = metric_points(tracker, keys.VAL_LOSS)
    assert [s for s, _ in vals] == [4] and all(math.isfinite(v) for _, v in vals)
    assert ckpt_steps(tmp_path) == [4]
    state = checkpoint.load_latest(tmp_path)
    assert state is not None
    assert all(torch.isfinite(t).all() for t in state["model"].values())


# --- checkpoints -----------------------------------------------------------------------------


def payload(step: int) -> dict:
    return {"step": step, "w": torch.full((3,), float(step)), "curve": {"step": [step]}}


def test_checkpoint_roundtrip_and_only_the_two_newest_are_kept(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40, 50):
        checkpoint.save(tmp_path, step, payload(step))
    assert ckpt_steps(tmp_path) == [40, 50]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step_00000040.pt", "step_00000040.pt.sha256", "step_00000050.pt", "step_00000050.pt.sha256",
    ]
    state = checkpoint.load_latest(tmp_path)
    assert state is not None and state["step"] == 50 and torch.equal(state["w"], torch.full((3,), 50.0))


def test_trainer_checkpoint_loads_with_weights_only(data: TokenData, tmp_path: Path) -> None:
    spec = make_spec("llama", steps=10)
    train(spec, data=data, checkpoint_dir=tmp_path)
    # Plain torch.load with weights_only=True: a checkpoint is data, never code.
    state = torch.load(tmp_path / "step_00000010.pt", weights_only=True)
    assert {"model", "optimizer", "rng", "step", "curve", "wall_s", "run_id"} <= set(state)
    assert state["step"] == 10 and state["run_id"] == spec.run_id
    assert state["rng"].dtype == torch.uint8 and state["rng"].device.type == "cpu"
    Transformer(spec.model).load_state_dict(state["model"])  # strict: every key matches


@pytest.mark.parametrize("damage", ["truncate", "flip", "bad_digest", "binary_digest", "no_digest"])
def test_damaged_newest_checkpoint_is_skipped_with_a_warning(tmp_path: Path, damage: str) -> None:
    checkpoint.save(tmp_path, 10, payload(10))
    newest = checkpoint.save(tmp_path, 20, payload(20))
    digest = newest.with_name(newest.name + ".sha256")
    raw = newest.read_bytes()
    if damage == "truncate":
        newest.write_bytes(raw[: len(raw) // 2])
    elif damage == "flip":
        newest.write_bytes(raw[:100] + bytes([raw[100] ^ 0xFF]) + raw[101:])
    elif damage == "bad_digest":
        digest.write_text("0" * 64)
    elif damage == "binary_digest":
        digest.write_bytes(b"\xff\xfe\x00garbage")
    else:
        digest.unlink()
    with pytest.warns(UserWarning, match="step_00000020.pt"):
        state = checkpoint.load_latest(tmp_path)
    assert state is not None and state["step"] == 10
    assert newest.exists()  # kept as evidence


def test_consistent_but_unloadable_checkpoint_is_skipped(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, 10, payload(10))
    newest = checkpoint.save(tmp_path, 20, payload(20))
    newest.write_bytes(b"not a torch file")
    import hashlib

    digest = hashlib.sha256(b"not a torch file").hexdigest()
    newest.with_name(newest.name + ".sha256").write_text(digest)
    with pytest.warns(UserWarning, match="does not load"):
        state = checkpoint.load_latest(tmp_path)
    assert state is not None and state["step"] == 10


def test_all_checkpoints_damaged_means_from_scratch(tmp_path: Path) -> None:
    path = checkpoint.save(tmp_path, 10, payload(10))
    path.write_bytes(b"")
    with pytest.warns(UserWarning, match="sha256"):
        assert checkpoint.load_latest(tmp_path) is None


def test_a_failed_write_leaves_the_previous_checkpoint_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint.save(tmp_path, 10, payload(10))

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(checkpoint.CheckpointError, match="step 20"):
        checkpoint.save(tmp_path, 20, payload(20))
    monkeypatch.undo()
    # No partial file under a checkpoint name, no temporary left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000010.pt",
                                                          "step_00000010.pt.sha256"]
    state = checkpoint.load_latest(tmp_path)
    assert state is not None and state["step"] == 10


def test_a_killed_writer_leaves_only_an_ignored_temporary(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, 10, payload(10))
    (tmp_path / ".step_00000020.pt.abc123.tmp").write_bytes(b"half a checkp")
    state = checkpoint.load_latest(tmp_path)
    assert state is not None and state["step"] == 10


def test_a_new_timeline_replaces_stale_later_checkpoints(tmp_path: Path) -> None:
    """Checkpoints newer than the one being written belong to an abandoned timeline (e.g.
    both were corrupt and the run restarted from scratch): saving must never prune the
    checkpoint it has just written in their favour."""
    checkpoint.save(tmp_path, 90, payload(90))
    checkpoint.save(tmp_path, 100, payload(100))
    checkpoint.save(tmp_path, 10, payload(10))
    assert ckpt_steps(tmp_path) == [10]
    checkpoint.save(tmp_path, 20, payload(20))
    assert ckpt_steps(tmp_path) == [10, 20]
    state = checkpoint.load_latest(tmp_path)
    assert state is not None and state["step"] == 20


def test_a_checkpoint_of_another_run_or_other_tokens_is_refused(
    data: TokenData, tmp_path: Path
) -> None:
    spec = make_spec(steps=20, checkpoint_interval=10)
    with pytest.raises(Interrupt):
        train(spec, data=data, checkpoint_dir=tmp_path, on_step=interrupt_at(15))
    other = make_spec(steps=20, checkpoint_interval=10, seed=1)
    assert other.run_id != spec.run_id
    with pytest.raises(checkpoint.CheckpointError,
                       match=f"is of run {spec.run_id}, not {other.run_id}: refusing"):
        train(other, data=data, checkpoint_dir=tmp_path)
    retokenised = dataclasses.replace(data, fingerprint="0" * 64)
    with pytest.raises(checkpoint.CheckpointError,
                       match=f"trained on tokens {data.fingerprint[:12]}, this run's are "
                             "000000000000: refusing"):
        train(spec, data=retokenised, checkpoint_dir=tmp_path)
    assert train(spec, data=data, checkpoint_dir=tmp_path).resumed_from == 10  # its own: fine


def test_checkpoint_into_an_unwritable_place_raises_checkpoint_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(checkpoint.CheckpointError, match="cannot write checkpoint for step 5"):
        checkpoint.save(blocker / "sub", 5, payload(5))


def test_run_result_defaults() -> None:
    r = RunResult("x", keys.STATUS_FINISHED, 1, 1, 1, 1, {})
    assert math.isnan(r.final_val_loss) and r.diverged_step is None and r.curve == {}


@pytest.mark.parametrize("precision, device_type, trained", [
    ("auto", "cpu", "fp32"), ("auto", "cuda", "bf16"), ("auto", "mps", "fp32"),
    ("fp32", "cuda", "fp32"), ("bf16", "cpu", "bf16"), ("bf16", "cuda", "bf16"),
])
def test_one_rule_says_what_a_precision_trains_in(precision: str, device_type: str,
                                                  trained: str) -> None:
    assert trained_precision(precision, device_type) == trained


@pytest.mark.parametrize("precision, tag", [("bf16", "bf16"), ("auto", "fp32")])
def test_a_cpu_run_tags_the_precision_it_trains_in(precision: str, tag: str) -> None:
    tracker = NullTracker()
    result = train(make_spec(steps=6, precision=precision, eval_batches=1), tracker, data=None)
    assert tracker.tags[keys.TAG_PRECISION] == tag
    assert result.status == keys.STATUS_FINISHED and math.isfinite(result.final_val_loss)


def test_a_finished_run_records_the_sample_its_checkpoint_gives(tmp_path: Path) -> None:
    """The report's text sample of a run comes from the run itself (keys.TAG_SAMPLE), not a
    `pipeline.sample` process: the same text that process makes from the final checkpoint,
    and recording it changes nothing trained (it is drawn after the final evaluation, from a
    generator of its own)."""
    from pipeline.sample import sample_text

    spec = make_spec(steps=12, eval_batches=1)
    tracker = NullTracker()
    result = train(spec, tracker, checkpoint_dir=tmp_path)
    text = tracker.tags[keys.TAG_SAMPLE]
    assert tracker.tags[keys.TAG_SAMPLE_PROMPT] == keys.SAMPLE_PROMPT
    assert text.startswith(keys.SAMPLE_PROMPT) and len(text) > len(keys.SAMPLE_PROMPT)
    assert sample_text(spec, tmp_path, keys.SAMPLE_PROMPT) == text
    again = train(spec, NullTracker())  # no checkpoints: the same run, the same loss
    assert again.final_val_loss == result.final_val_loss


@pytest.mark.parametrize("family", ["bert", "vit"])
def test_models_that_do_not_generate_record_no_sample(family: str) -> None:
    from pipeline.train.passes import sample_tags

    cfg = (make_config("vit", 1, 16, vocab_size=10, seq_len=0, image_size=8, patch_size=4,
                       channels=1) if family == "vit" else make_spec("bert").model)
    spec = dataclasses.replace(make_spec(), model=cfg)
    # Never reaches the model or the data: both would fail if it did.
    assert sample_tags(spec, None, None, torch.device("cpu"), 1) == {}
    assert sample_tags(make_spec(), None, None, torch.device("cpu"), 2) == {}  # sharded
