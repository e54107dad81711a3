"""Issue 52, "When data runs out": runs at the same N and D on part of the train split
(DataSpec.train_fraction, planned by isoflop.repeats), so that their unique tokens U differ
and the decay of repeated data (R_D*, Muennighoff et al. 2023) is identifiable. Planning,
bad input, the repetition rule, the trainer's share of the split, and the shipped study."""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline.config import SweepError, load_sweep
from pipeline.data import CACHE_ENV, load_data
from pipeline.data import subset as subset_module
from pipeline.data.repetition import repetition_problem
from pipeline.data.subset import kept_count, kept_ranges, train_subset
from pipeline.ledger import ui
from pipeline.planner import expand
from pipeline.train import NullTracker, objective, train
from pipeline.vocab import flops, keys
from pipeline.vocab.families import make_config
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec, flatten

ROOT = Path(__file__).resolve().parents[1]

ISO = {
    "name": "iso", "kind": "isoflop", "family": "gpt",
    "shape": {"knob": "width", "head_dim": 8, "aspect_ratio": 16},
    "data": {"corpus": "stdlib", "max_bytes": 300_000, "seq_len": 32},
    "train": {"batch_size": 4, "lr": 3e-3},
    "isoflop": {"budgets": [3e9, 6e9], "sizes": {"widths": [1, 2]},
                "replicates": {"seeds": [1, 2], "budgets": [6e9]}},
}
REPEATS = {"fractions": [0.333, 0.5], "budgets": [6e9]}


def _write(tmp_path: Path, doc: dict, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _iso(max_epochs: float | None = None, **isoflop: object) -> dict:
    data = dict(ISO["data"], **({} if max_epochs is None else {"max_epochs": max_epochs}))
    return {**ISO, "data": data, "isoflop": {**ISO["isoflop"], **isoflop}}


# --- planning ------------------------------------------------------------------------------


def test_repeats_plan_variant_cells_beside_the_main_ones(tmp_path: Path) -> None:
    plain_path = _write(tmp_path, _iso(), "plain.yaml")
    plain = expand(load_sweep(plain_path), plain_path).specs
    path = _write(tmp_path, _iso(repeats=REPEATS))
    cfg = load_sweep(path)
    specs = expand(cfg, path).specs
    main = [s for s in specs if s.data.train_fraction == 1]
    variants = [s for s in specs if s.data.train_fraction < 1]
    # Adding repeats leaves every main run (and its order) as it was.
    assert [s.run_id for s in main] == [s.run_id for s in plain]
    # Each cell of 6e9 (2 widths) once per fraction, with the main seeds only (not the
    # replicates'), role main: other cells, never seeds of the main ones.
    assert sorted((s.model.d_model, s.data.train_fraction, s.train.seed) for s in variants) == [
        (8, 0.333, 0), (8, 0.5, 0), (16, 0.333, 0), (16, 0.5, 0)]
    assert {s.budget for s in variants} == {6e9}
    assert {s.role for s in variants} == {keys.ROLE_MAIN}
    ids = [s.run_id for s in specs]
    assert len(set(ids)) == len(ids) == cfg.planned_runs() == len(plain) + 4
    by_cell = {(s.model, s.train.seed): s for s in main}
    for v in variants:  # the same N, D and recipe as its cell; only the share differs
        cell = by_cell[(v.model, v.train.seed)]
        assert (v.tokens, v.steps, v.train) == (cell.tokens, cell.steps, cell.train)
        assert v.data == replace(cell.data, train_fraction=v.data.train_fraction)
        assert v.identity()["data"]["train_fraction"] == v.data.train_fraction
        # MLflow params are the flattened spec (pipeline.tracking): the share is one of them.
        assert flatten(v.to_dict())["data.train_fraction"] == v.data.train_fraction
        assert RunSpec.from_dict(json.loads(json.dumps(v.to_dict()))) == v
        assert "split" in ui.run_name(v) and "split" not in ui.run_name(cell)
        # MLflow keeps one dataset per (name, digest): the share's profile is its own.
        dataset, whole = (ui.dataset(s, "f" * 64, 10, 10, 10) for s in (v, cell))
        assert dataset["name"] != whole["name"] and "train_fraction" in dataset["source"]
    # Variants sit right after the main cells of their budget, in the file's budget order.
    first = ids.index(variants[0].run_id)
    assert all(s.data.train_fraction < 1 for s in specs[first:])
    assert all(s.budget == 6e9 for s in specs[first - 6:first])


def test_the_share_enters_run_id_only_below_one() -> None:
    cfg = make_config("gpt", 1, 16, vocab_size=256, seq_len=16)
    whole = RunSpec(sweep="s", model=cfg, data=DataSpec(), train=TrainSpec(), steps=10)
    assert "train_fraction" not in whole.identity()["data"]  # earlier runs keep their ids
    assert replace(whole, data=DataSpec(train_fraction=1.0)).run_id == whole.run_id
    half = replace(whole, data=DataSpec(train_fraction=0.5))
    assert half.run_id != whole.run_id
    assert replace(whole, data=DataSpec(train_fraction=0.333)).run_id not in (
        whole.run_id, half.run_id)


@pytest.mark.parametrize(("repeats", "where", "value"), [
    ({"fractions": [0, 0.5], "budgets": [6e9]},
     "isoflop.repeats.fractions[0]: Input should be greater than 0", "(got 0)"),
    ({"fractions": [1.5], "budgets": [6e9]},
     "isoflop.repeats.fractions[0]: Input should be less than 1", "(got 1.5)"),
    ({"fractions": [1.0], "budgets": [6e9]},
     "isoflop.repeats.fractions[0]: Input should be less than 1", "(got 1.0)"),
    ({"fractions": [0.5, 0.5], "budgets": [6e9]},
     "isoflop.repeats.fractions[1]: duplicate of fractions[0]", "(got 0.5)"),
    ({"fractions": [0.5], "budgets": [5e9]},
     "isoflop.repeats.budgets[0]: is not one of budgets [3000000000.0, 6000000000.0]",
     "(got 5000000000.0)"),
    ({"fractions": [0.5], "budgets": [6e9], "fraction": 0.5},
     "unknown key 'isoflop.repeats.fraction'; did you mean 'fractions'?", ""),
])
def test_bad_repeats_are_refused_in_one_line_naming_file_field_and_value(
        tmp_path: Path, repeats: dict, where: str, value: str) -> None:
    path = _write(tmp_path, _iso(repeats=repeats))
    with pytest.raises(SweepError) as err:
        load_sweep(path)
    lines = str(err.value).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{path}: ") and where in lines[0] and lines[0].endswith(
        value), lines[0]


# --- the repetition rule counts each run's own share -----------------------------------------


def test_the_repetition_rule_counts_passes_over_each_runs_share() -> None:
    cfg = make_config("gpt", 1, 16, vocab_size=256, seq_len=16)
    whole = RunSpec(sweep="s", model=cfg, data=DataSpec(), train=TrainSpec(batch_size=4),
                    steps=100, budget=1e9)  # D = 6,400 tokens
    third = replace(whole, data=DataSpec(train_fraction=1 / 3))
    assert repetition_problem([whole, third], 9000, 1.0, "x.yaml").count("\n  ") == 1
    why = repetition_problem([whole, third], 9000, 1.0, "x.yaml")
    # 6,400 tokens over its 3,000 (a third of 9,000): 2.13 passes, 3x the whole split's 0.71.
    assert third.run_id in why and whole.run_id not in why
    assert "2.13 epochs of its 0.333333 of the split (3,000 tokens)" in why
    assert repetition_problem([whole, third], 9000, 2.2, "x.yaml") == ""


def _cli(args: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env.update({CACHE_ENV: str(cache), "PYTHONPATH": str(ROOT)})
    return subprocess.run([sys.executable, "-m", "pipeline.sweep", *args, "--dry-run",
                           "--no-estimate"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_dry_run_shows_the_variants_and_refuses_them_past_max_epochs(
        tmp_path: Path) -> None:
    # The split holds 90,514 tokens; D is 184,320 (width 1) and 80,768 (width 2) at 6e9: the
    # main cells make 2.04 and 0.89 passes, the variants 6.12 and 2.68 over a third, 4.07 and
    # 1.78 over a half. At max_epochs 2.1 the three variants above it are refused, by name.
    cfg = load_sweep(_write(tmp_path, _iso(repeats=REPEATS)))
    over = {s.run_id for s in expand(cfg, tmp_path).specs
            if s.data.train_fraction < 1 and (s.data.train_fraction, s.model.d_model) != (0.5, 16)}
    refused = _cli([str(_write(tmp_path, _iso(2.1, repeats=REPEATS), "one.yaml"))],
                   tmp_path / "cache")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    assert "one.yaml: 3 run(s) would train past data.max_epochs = 2.1" in refused.stderr
    assert "6.12 epochs of its 0.333 of the split (30,141 tokens)" in refused.stderr
    assert all(run_id in refused.stderr for run_id in over)
    allowed = _cli([str(_write(tmp_path, _iso(7.0, repeats=REPEATS), "two.yaml"))],
                   tmp_path / "cache")
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.count("train_fraction 0.333") == 2
    assert allowed.stdout.count("train_fraction 0.5") == 2
    assert "total: 12 runs" in allowed.stdout


# --- the trainer reads its share only ---------------------------------------------------------


@pytest.fixture()
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    folder = str(tmp_path_factory.getbasetemp() / "fraction-token-cache")
    monkeypatch.setenv(CACHE_ENV, folder)
    return folder


def _spy(monkeypatch: pytest.MonkeyPatch, name: str) -> list[np.ndarray]:
    """The token arrays objective's `name` (get_batch, eval_batches) is called with."""
    seen: list[np.ndarray] = []
    real = getattr(objective, name)

    def spy(tokens, *args, **kwargs):
        seen.append(tokens)
        return real(tokens, *args, **kwargs)

    monkeypatch.setattr(objective, name, spy)
    return seen


def test_a_run_on_half_the_split_reads_only_that_half_and_counts_its_epochs_over_it(
        _cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data_spec = DataSpec(max_bytes=60_000, train_fraction=0.5)
    data = load_data(data_spec, cache_dir=_cache)  # the whole split: one cache per corpus
    n = len(data.train)
    assert load_data(replace(data_spec, train_fraction=1.0), cache_dir=_cache).cache_path == (
        data.cache_path)
    cfg = make_config("gpt", 1, 16, vocab_size=256, seq_len=32)  # 7,920 parameters
    spec = RunSpec(sweep="t", model=cfg, data=data_spec,
                   train=TrainSpec(batch_size=8, sampling="shuffled", evals_per_run=1),
                   steps=20, exec=ExecSpec(threads=1, device="cpu"))
    train_arrays, val_arrays = _spy(monkeypatch, "get_batch"), _spy(monkeypatch, "eval_batches")
    tracker = NullTracker()
    train(spec, tracker, data=data)
    half = kept_count(n, 0.5)
    assert half == n // 2 and len(train_arrays) == 20
    # A split under 2 x 65,536 tokens is one block: its share is its first half, and every
    # window is drawn from it (get_batch indexes only the array it is given).
    for tokens in train_arrays:
        assert np.array_equal(tokens, data.train[:half])
    assert all(np.array_equal(t, data.val) for t in val_arrays) and val_arrays  # uncut
    assert len(data.train) == n  # the caller's tokens are left whole
    s = tracker.summary
    assert s[keys.TRAIN_SPLIT_TOKENS] == half
    assert s[keys.FINAL_EPOCHS] == pytest.approx(spec.tokens / (0.5 * n), rel=1e-4)
    assert spec.tokens <= s[keys.FINAL_UNIQUE_TOKENS] <= half
    (record,) = tracker.datasets
    assert json.loads(record["profile"])["train_tokens"] == half


def test_a_share_spans_the_whole_split_in_blocks_and_travels_whole(
        _cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The split is in sorted document order: a share is the leading part of each block, so
    it reaches every part of the corpus; pickled (to a Ray worker), it stays the share."""
    data = load_data(DataSpec(max_bytes=60_000), cache_dir=_cache)
    n = len(data.train)
    monkeypatch.setattr(subset_module, "TEXT_MIN_BLOCK", 1_000)  # ~57 blocks of this split
    ranges = kept_ranges(n, 0.333, 1_000)
    assert len(ranges) == n // 1_000 and ranges[0][0] == 0 and ranges[-1][0] > n - 1_100
    assert sum(b - a for a, b in ranges) == kept_count(n, 0.333)
    share = train_subset(data, 0.333)
    assert np.array_equal(share.train, np.concatenate([data.train[a:b] for a, b in ranges]))
    assert share.val is data.val and share.fingerprint == data.fingerprint
    assert share.train_bytes == pytest.approx(data.train_bytes / 3, rel=0.01)
    again = pickle.loads(pickle.dumps(share))
    assert np.array_equal(again.train, share.train) and len(again.val) == len(data.val)
    assert again.tokenizer().decode([104, 105]) == "hi"
    assert train_subset(data, 1.0) is data  # every earlier run trains as it did


def test_an_image_run_keeps_its_share_of_the_images() -> None:
    pytest.importorskip("sklearn")
    from pipeline.vision.data import load_images

    data = load_images(DataSpec(corpus="images:digits"))
    share = train_subset(data, 0.333)
    index = np.concatenate([np.arange(a, b) for a, b in kept_ranges(len(data.train), 0.333)])
    assert len(share.train) == kept_count(len(data.train), 0.333) == len(index)
    assert np.array_equal(share.train, data.train[index])
    assert np.array_equal(share.train_labels, data.train_labels[index])  # pairs kept
    assert share.val is data.val and len(set(share.train_labels.tolist())) == 10


# --- the shipped study ------------------------------------------------------------------------


EPOCHS = ROOT / "sweeps" / "chinchilla_epochs.yaml"
CHINCHILLA = ROOT / "sweeps" / "chinchilla.yaml"


def test_chinchilla_epochs_extends_the_default_study_with_repeated_data() -> None:
    cfg, base = load_sweep(EPOCHS), load_sweep(CHINCHILLA)
    for section in ("family", "shape", "train", "resources", "flops_convention"):
        assert getattr(cfg, section) == getattr(base, section), section
    assert cfg.data == base.data.model_copy(update={"max_epochs": 12.0})
    specs = expand(cfg, EPOCHS, 256).specs
    own = [s.run_id for s in expand(base, CHINCHILLA, 256).specs]
    # Its cells at chinchilla.yaml's budgets are reports/chinchilla's runs (same ids, order).
    assert [s.run_id for s in specs
            if s.budget in base.isoflop.budgets and s.data.train_fraction == 1] == own
    budgets = cfg.isoflop.budgets
    assert budgets[0] == 3.2e12 and math.log10(budgets[-1] / budgets[0]) >= 1.2
    variants = [s for s in specs if s.data.train_fraction < 1]
    assert {(s.budget, s.data.train_fraction) for s in variants} == {
        (b, f) for b in (1.26e13, 5.1e13) for f in (0.1, 0.333)}
    assert len(specs) == cfg.planned_runs() == 75
    # Against the 29,920,784-token train split of stdlib+tests (reports/chinchilla's
    # D / epochs): 12 passes allow the 5.1e13 cells on a tenth of it (11.49), 10 do not.
    split = 29_920_784
    assert repetition_problem(specs, split, cfg.data.max_epochs, "f") == ""
    tight = repetition_problem(specs, split, 10.0, "f")
    assert "1 run(s)" in tight and "11.49 epochs of its 0.1 of the split" in tight
    smallest = min((s for s in variants if s.budget == 5.1e13),
                   key=lambda s: flops.params_total(s.model))
    assert smallest.run_id in tight


def test_chinchilla_epochs_dry_runs(tmp_path_factory: pytest.TempPathFactory) -> None:
    done = _cli([str(EPOCHS)], tmp_path_factory.getbasetemp() / "epochs-cache")
    assert done.returncode == 0, done.stderr
    assert "total: 75 runs" in done.stdout and "warning" not in done.stdout
    assert done.stdout.count("train_fraction 0.333") == 10
