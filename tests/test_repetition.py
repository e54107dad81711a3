"""Issue 16: no repeated data unless a sweep allows it, the shuffled sampler, unique tokens and
epochs in every run, and a default study whose models look like language models."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import load_sweep
from pipeline.data import CACHE_ENV, load_corpus, load_data
from pipeline.data.batches import get_batch, unique_tokens_seen
from pipeline.data.repetition import repetition_problem
from pipeline.planner import expand
from pipeline.train import NullTracker, train
from pipeline.vocab import flops, keys
from pipeline.vocab.families import make_config
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

ROOT = Path(__file__).resolve().parents[1]
TOKENS = np.arange(5001, dtype=np.uint16) % 256


def _windows(sampling: str, steps: int, batch: int = 4, seq_len: int = 16, seed: int = 0):
    out = []
    for step in range(steps):
        x, _ = get_batch(TOKENS, batch, seq_len, seed, step, sampling=sampling)
        out.append(x.numpy())
    return np.concatenate(out)


def test_shuffled_windows_never_repeat_within_an_epoch_and_are_a_function_of_seed_and_step():
    n_windows = (len(TOKENS) - 1) // 16  # 312
    steps = n_windows // 4  # one epoch
    starts = []
    for step in range(steps):
        x, y = get_batch(np.arange(5001, dtype=np.int64), 4, 16, 7, step, sampling="shuffled")
        assert np.array_equal(y.numpy()[:, :-1], x.numpy()[:, 1:])
        starts += list(x.numpy()[:, 0])
    assert sorted(starts) == [16 * k for k in range(n_windows)]  # every window exactly once
    again = get_batch(np.arange(5001, dtype=np.int64), 4, 16, 7, 11, sampling="shuffled")[0]
    assert list(again.numpy()[:, 0]) == starts[44:48]  # resumable: (seed, step) alone
    other = _windows("shuffled", 3, seed=8)
    assert not np.array_equal(other, _windows("shuffled", 3, seed=7))


@pytest.mark.parametrize("sampling", ["random", "shuffled"])
@pytest.mark.parametrize("steps", [1, 20, 200])
def test_unique_tokens_seen_counts_the_covered_positions(sampling: str, steps: int):
    n, batch, seq_len = len(TOKENS), 4, 16
    covered = np.zeros(n, dtype=bool)
    for step in range(steps):  # brute force from the batches themselves
        x, _ = get_batch(np.arange(n, dtype=np.int64), batch, seq_len, 3, step, sampling=sampling)
        for s in x.numpy()[:, 0]:
            covered[s:s + seq_len + 1] = True
    assert unique_tokens_seen(n, batch, seq_len, 3, steps, sampling) == covered.sum()


def test_random_offsets_repeat_tokens_and_shuffled_ones_do_not():
    n, batch, seq_len, steps = len(TOKENS), 4, 16, 39  # ~0.5 epoch
    d = steps * batch * seq_len
    shuffled = unique_tokens_seen(n, batch, seq_len, 0, steps, "shuffled")
    random = unique_tokens_seen(n, batch, seq_len, 0, steps, "random")
    assert shuffled >= d and random < 0.85 * d


def test_sampling_enters_run_id_only_away_from_the_earlier_default():
    cfg = make_config("gpt", 1, 16, vocab_size=256, seq_len=16)
    spec = RunSpec(sweep="s", model=cfg, data=DataSpec(), train=TrainSpec(), steps=10)
    assert "sampling" not in spec.identity()["train"]  # earlier runs keep their ids
    shuffled = RunSpec(sweep="s", model=cfg, data=DataSpec(),
                       train=TrainSpec(sampling="shuffled"), steps=10)
    assert shuffled.run_id != spec.run_id


def test_a_run_records_its_unique_tokens_and_epochs(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    data_spec = DataSpec(max_bytes=60_000)
    data = load_data(data_spec, cache_dir=str(tmp_path))
    cfg = make_config("gpt", 1, 16, vocab_size=256, seq_len=32)
    spec = RunSpec(sweep="t", model=cfg, data=data_spec,
                   train=TrainSpec(batch_size=8, sampling="shuffled", evals_per_run=1),
                   steps=30, exec=ExecSpec(threads=1, device="cpu"))
    tracker = NullTracker()
    train(spec, tracker, data=data)
    s = tracker.summary
    assert s[keys.TRAIN_SPLIT_TOKENS] == len(data.train)
    assert s[keys.FINAL_EPOCHS] == pytest.approx(spec.tokens / len(data.train))
    assert spec.tokens <= s[keys.FINAL_UNIQUE_TOKENS] <= spec.tokens + 30 * 8


def test_the_planner_refuses_repetition_naming_the_run_its_d_and_the_corpus():
    cfg = make_config("gpt", 1, 16, vocab_size=256, seq_len=16)
    spec = RunSpec(sweep="s", model=cfg, data=DataSpec(), train=TrainSpec(batch_size=4),
                   steps=100, budget=1e9)
    assert repetition_problem([spec], 6400, 1.0, "x.yaml") == ""
    why = repetition_problem([spec], 3000, 1.0, "x.yaml")
    assert spec.run_id in why and "6,400" in why and "3,000 tokens" in why
    assert "'stdlib'" in why and "2.13 epochs" in why and "data.max_epochs" in why
    assert repetition_problem([spec], 3000, 2.5, "x.yaml") == ""


def _sweep(tmp_path: Path, max_epochs: float | None) -> Path:
    extra = f"  max_epochs: {max_epochs}\n" if max_epochs is not None else ""
    path = tmp_path / "rep.yaml"
    path.write_text(
        "name: rep\nkind: grid\nfamily: gpt\n"
        "data:\n  max_bytes: 40000\n  seq_len: 16\n" + extra +
        "train:\n  batch_size: 4\n  min_steps: 1\n"
        "grid:\n  sizes:\n    depths: [1]\n  tokens: [2000, 80000]\n")
    return path


def test_the_sweep_cli_refuses_a_plan_that_repeats_data_unless_allowed(tmp_path: Path):
    env = {"SCALING_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}

    def dry_run(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline.sweep", str(path), "--dry-run",
                               "--no-estimate"], capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=120)

    refused = dry_run(_sweep(tmp_path, None))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "1 run(s) would train past data.max_epochs = 1" in refused.stderr
    assert "D = 80,000 tokens" in refused.stderr and "rep.yaml" in refused.stderr
    allowed = dry_run(_sweep(tmp_path, 10.0))
    assert allowed.returncode == 0, allowed.stderr


def test_the_stdlib_with_tests_corpus_is_larger_and_utf8_only():
    small, full = load_corpus("stdlib"), load_corpus("stdlib+tests")
    size = sum(d.nbytes for d in full)
    assert size > 2 * sum(d.nbytes for d in small)
    assert any(d.name.startswith("test/") for d in full)
    assert not any(d.name.startswith("test/") for d in small)


def test_the_default_study_looks_like_language_modelling():
    """Issue 16: >= 2 layers, embeddings <= 1/3 of N, D/N <= 300, replicates at >= 2 budgets,
    and (checked by the driver against the corpus) no run past one epoch."""
    path = ROOT / "sweeps" / "chinchilla.yaml"
    cfg = load_sweep(path)
    plan = expand(cfg, path, 256)
    for s in plan.specs:
        n = flops.params_total(s.model)
        assert s.model.n_layer >= 2, s.run_id
        assert 1 - flops.params_non_embedding(s.model) / n <= 1 / 3 + 1e-3, s.run_id
        assert s.tokens / n <= 300, s.run_id
    seeds_at = {}
    for s in plan.specs:
        seeds_at.setdefault(s.budget, set()).add(s.train.seed)
    assert sum(len(v) > 1 for v in seeds_at.values()) >= 2
    assert cfg.data.max_epochs == 1.0 and cfg.train.sampling == "shuffled"
    assert cfg.data.corpus == "stdlib+tests"
    largest = max(s.tokens for s in plan.specs)
    assert largest < 29e6 and math.isfinite(largest)
