"""data_seed: the seeds of a cell reading one batch sequence (common random numbers).

A run's `seed` sets its initialisation and, by default, its batches; `train.data_seed` gives
every run of a sweep one batch sequence, so seeds differ only in their initialisation. Every
earlier run keeps its id, and a data_seed equal to the seed is the same run.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import yaml

import pipeline.planner as planner
from pipeline.config import SweepError, parse_sweep
from pipeline.data import TokenData, load_data
from pipeline.ledger.ui import run_name
from pipeline.train import NullTracker, train
from pipeline.train import objective as obj
from pipeline.vocab.families import make_config, model_vocab_size
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

DATA = DataSpec(corpus="stdlib", max_bytes=200_000)


def gpt_spec(**train_kw: object) -> RunSpec:
    cfg = make_config("gpt", 1, 32, vocab_size=256, seq_len=32, head_dim=16)
    return RunSpec(sweep="test", model=cfg, data=DATA,
                   train=TrainSpec(batch_size=4, lr=3e-3, sampling="shuffled", **train_kw),
                   steps=30, exec=ExecSpec(threads=1, device="cpu"))


@pytest.fixture(scope="module")
def data() -> TokenData:
    return load_data(DATA)  # in the test session's token cache (tests/conftest.py)


def test_the_default_and_a_data_seed_equal_to_the_seed_keep_the_run_id() -> None:
    plain = gpt_spec(seed=3)
    assert "data_seed" not in plain.identity()["train"]  # ids of earlier ledgers unchanged
    assert gpt_spec(seed=3, data_seed=3).run_id == plain.run_id  # the same computation
    assert gpt_spec(seed=3, data_seed=0).run_id != plain.run_id
    assert gpt_spec(seed=3, data_seed=0).run_id != gpt_spec(seed=0).run_id


def test_seeds_sharing_a_data_seed_read_the_same_batches_and_start_apart(
        data: TokenData) -> None:
    cpu = torch.device("cpu")
    a, b, own = gpt_spec(seed=0), gpt_spec(seed=5, data_seed=0), gpt_spec(seed=5)
    for step in (0, 7, 29):
        xa, ya = obj.train_batch(a, data, step, cpu)
        xb, yb = obj.train_batch(b, data, step, cpu)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(obj.train_batch(own, data, 0, cpu)[0],
                           obj.train_batch(a, data, 0, cpu)[0])
    ra = train(a, NullTracker(), data=data, resume=False)
    rb = train(b, NullTracker(), data=data, resume=False)
    assert ra.final_val_loss != rb.final_val_loss  # another initialisation
    again = train(replace(a, train=replace(a.train, data_seed=0)), NullTracker(), data=data,
                  resume=False)
    assert again.final_val_loss == ra.final_val_loss


def test_the_unique_tokens_counted_are_those_of_the_batch_seed(
        data: TokenData, monkeypatch: pytest.MonkeyPatch) -> None:
    import pipeline.train as trainer

    seen: list[int] = []
    count = trainer.unique_tokens_seen

    def spy(n: int, batch: int, seq: int, seed: int, *rest: object) -> int:
        seen.append(seed)
        return count(n, batch, seq, seed, *rest)

    monkeypatch.setattr(trainer, "unique_tokens_seen", spy)
    spec = gpt_spec(seed=5, data_seed=0)
    train(replace(spec, steps=2), NullTracker(), data=data, resume=False)
    assert seen == [0]


def test_masks_and_images_follow_the_data_seed(data: TokenData) -> None:
    cpu = torch.device("cpu")
    bert = make_config("bert", 1, 32, vocab_size=model_vocab_size("bert", 256), seq_len=32,
                       head_dim=16)

    def masked(**kw: object) -> RunSpec:
        return RunSpec(sweep="test", model=bert, data=DATA, train=TrainSpec(batch_size=4, **kw),
                       steps=10, exec=ExecSpec(threads=1, device="cpu"))

    for step in (0, 9):
        xa, ya = obj.train_batch(masked(seed=0), data, step, cpu)
        xb, yb = obj.train_batch(masked(seed=7, data_seed=0), data, step, cpu)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)  # windows and masks
    assert not torch.equal(obj.train_batch(masked(seed=7), data, 0, cpu)[1],
                           obj.train_batch(masked(seed=0), data, 0, cpu)[1])

    digits = DataSpec(corpus="images:digits", val_fraction=0.2)
    images = load_data(digits)
    vit = make_config("vit", 1, 16, vocab_size=10, seq_len=1, head_dim=8, image_size=8,
                      patch_size=4, channels=1)

    def image(**kw: object) -> RunSpec:
        return RunSpec(sweep="test", model=vit, data=digits, train=TrainSpec(batch_size=8, **kw),
                       steps=10, exec=ExecSpec(threads=1, device="cpu"))

    xa, ya = obj.train_batch(image(seed=0), images, 3, cpu)
    xb, yb = obj.train_batch(image(seed=7, data_seed=0), images, 3, cpu)
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(obj.train_batch(image(seed=7), images, 3, cpu)[0], xa)


SWEEP = {
    "name": "crn", "kind": "grid", "family": "gpt", "shape": {"head_dim": 16},
    "data": {"corpus": "stdlib", "tokenizer": "bytes", "seq_len": 32},
    "train": {"batch_size": 8, "lr": 3e-3, "seeds": [0, 1, 2]},
    "resources": {"num_cpus": 1, "num_gpus": 0},
    "grid": {"sizes": {"shapes": [{"n_layer": 1, "d_model": 32}]}, "tokens": [2e5]},
}


def test_the_planner_gives_every_seed_the_sweeps_data_seed() -> None:
    plain = planner.expand(parse_sweep(yaml.safe_dump(SWEEP), "crn.yaml")).specs
    doc = {**SWEEP, "train": {**SWEEP["train"], "data_seed": 0}}
    shared = planner.expand(parse_sweep(yaml.safe_dump(doc), "crn.yaml")).specs
    assert [s.train.seed for s in shared] == [0, 1, 2]
    assert {s.train.batch_seed for s in shared} == {0}
    assert [s.train.batch_seed for s in plain] == [0, 1, 2]
    # seed 0 reads its own batches either way: the same run (and spec); the others are new
    assert [p.run_id == s.run_id for p, s in zip(plain, shared, strict=True)] == [
        True, False, False]
    assert shared[0] == plain[0] and shared[1].train.data_seed == 0
    assert "data0" in run_name(shared[1]) and "data" not in run_name(shared[0])


@pytest.mark.parametrize("value", [-1, 1.5, "zero"])
def test_a_bad_data_seed_is_refused_naming_the_field(value: object) -> None:
    doc = {**SWEEP, "train": {**SWEEP["train"], "data_seed": value}}
    with pytest.raises(SweepError) as e:
        parse_sweep(yaml.safe_dump(doc), "crn.yaml")
    assert "crn.yaml" in str(e.value) and "train.data_seed" in str(e.value)
