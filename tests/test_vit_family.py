"""The image family (vit): its shape, parameter and FLOP accounting against the built model
and torch's FlopCounterMode, the digits corpus and its split, image batches, training,
resuming, and the refusals around it.

Tiny models (<= 90k parameters) on scikit-learn's digits; the file runs in ~20 s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from pipeline.config import SweepError, parse_sweep
from pipeline.data import CACHE_ENV, DataError, load_data
from pipeline.model import VisionTransformer, build_model
from pipeline.sample import SampleError, sample_text
from pipeline.train import NullTracker, Stopped, train
from pipeline.train.cli import main as train_cli
from pipeline.vision.data import batch_indices, image_batch, images_seen, load_images
from pipeline.vision.sources import image_source_problem, parse_image_source
from pipeline.vocab import flops, keys
from pipeline.vocab.families import ModelConfig, ShapeError, data_unit, make_config
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

DIGITS = DataSpec(corpus="images:digits", val_fraction=0.2)


def vit(n_layer: int = 2, d_model: int = 32, *, image_size: int = 8, patch_size: int = 2,
        channels: int = 1, classes: int = 10) -> ModelConfig:
    return make_config("vit", n_layer, d_model, vocab_size=classes, seq_len=1, head_dim=8,
                       image_size=image_size, patch_size=patch_size, channels=channels)


def vit_spec(steps: int = 60, **train_kw: object) -> RunSpec:
    train_kw.setdefault("batch_size", 32)
    train_kw.setdefault("warmup_steps", 5)
    return RunSpec(sweep="test", model=vit(), data=DIGITS, train=TrainSpec(**train_kw),
                   steps=steps, exec=ExecSpec(threads=1, device="cpu", checkpoint_interval=20))


SHAPES = [vit(), vit(1, 16, patch_size=4), vit(3, 48, patch_size=1),
          vit(2, 24, image_size=12, patch_size=3, channels=3, classes=7)]


# --- shape and accounting ----------------------------------------------------------------------


def test_the_unit_of_data_is_the_image() -> None:
    cfg = vit()
    assert cfg.seq_len == 1 and cfg.positions == 17 and cfg.n_patches == 16
    assert not cfg.causal and data_unit("vit") == "images" and data_unit("gpt") == "tokens"
    # 6ND per image is 6·N per token times the image's 17 tokens.
    assert flops.flops_per_token(cfg, "6nd") == 6 * flops.params_total(cfg) * 17


@pytest.mark.parametrize("cfg", SHAPES, ids=lambda c: f"L{c.n_layer}d{c.d_model}p{c.patch_size}")
def test_parameter_groups_match_the_built_model(cfg: ModelConfig) -> None:
    model = VisionTransformer(cfg)
    assert flops.params_total(cfg) == sum(p.numel() for p in model.parameters())
    groups = flops.param_groups(cfg)
    assert groups["token_embedding"] == sum(p.numel() for p in model.patch.parameters()) + \
        model.cls.numel()
    assert groups["position_embedding"] == model.pos_emb.numel()
    assert groups["output_head"] == sum(p.numel() for p in model.head.parameters())


@pytest.mark.parametrize("cfg", SHAPES, ids=lambda c: f"L{c.n_layer}d{c.d_model}p{c.patch_size}")
def test_flops_match_torch_flop_counter(cfg: ModelConfig) -> None:
    """Forward: every group but the softmax (FlopCounterMode counts matmuls, convolutions and
    SDPA's math path). Backward: twice the forward, less the patch convolution's input
    gradient, which is never computed (images need no gradient). No tolerance."""
    torch.manual_seed(0)
    model = VisionTransformer(cfg)
    images = torch.rand(3, cfg.channels, cfg.image_size, cfg.image_size)
    with sdpa_kernel(SDPBackend.MATH):
        with FlopCounterMode(display=False) as fwd:
            logits, _ = model(images)
        with FlopCounterMode(display=False) as bwd:
            logits.pow(2).mean().backward()
    f = flops.forward_flops_per_sequence(cfg)
    forward = 3 * (sum(f.values()) - f["attention_softmax"])
    assert fwd.get_total_flops() == forward
    assert bwd.get_total_flops() == 2 * forward - 3 * f["embeddings"]


def test_the_output_does_not_depend_on_the_batch_order() -> None:
    torch.manual_seed(0)
    model = VisionTransformer(vit()).eval()
    images = torch.rand(6, 1, 8, 8)
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    with torch.no_grad():
        out, _ = model(images)
        permuted, _ = model(images[order])
    torch.testing.assert_close(permuted, out[order], rtol=0, atol=1e-5)


def test_bad_shapes_and_inputs_are_refused_by_name() -> None:
    with pytest.raises(ShapeError, match="patch_size=3 does not divide image_size=8"):
        vit(patch_size=3)
    with pytest.raises(ShapeError, match="family 'gpt' takes text, not images"):
        make_config("gpt", 1, 16, vocab_size=256, seq_len=8, image_size=8, patch_size=2,
                    channels=1)
    with pytest.raises(ValueError, match=r"expected images of shape \(B, 1, 8, 8\)"):
        VisionTransformer(vit())(torch.rand(2, 3, 8, 8))
    assert isinstance(build_model(vit()), VisionTransformer)


# --- the corpus --------------------------------------------------------------------------------


def test_digits_load_split_by_class_and_deterministically() -> None:
    data = load_data(DIGITS)
    assert len(data.train) + len(data.val) == 1797 and data.vocab_size == 10
    assert data.train.shape[1:] == (1, 8, 8) and data.train.dtype == np.float32
    assert data.train.min() >= 0.0 and data.train.max() <= 1.0
    counts = np.bincount(data.val_labels, minlength=10) / np.bincount(
        np.concatenate([data.train_labels, data.val_labels]), minlength=10)
    assert np.allclose(counts, 0.2, atol=0.01)  # every class held out at 20%
    again = load_images(DIGITS)
    assert again.fingerprint == data.fingerprint
    assert load_images(DataSpec(corpus="images:digits", val_fraction=0.3)).fingerprint != \
        data.fingerprint


def test_a_class_per_folder_corpus_loads_resized_rgb(tmp_path: Path) -> None:
    Image = pytest.importorskip("PIL.Image")
    for name, colour in (("cats", (255, 0, 0)), ("dogs", (0, 0, 255))):
        (tmp_path / name).mkdir()
        for i in range(3):
            Image.new("L" if i == 0 else "RGB", (10 + i, 10), colour[0]).save(
                tmp_path / name / f"{i}.png")
    data = load_images(DataSpec(corpus=f"images:folder:{tmp_path}", image_size=6,
                                val_fraction=0.3))
    assert data.classes == ("cats", "dogs") and data.vocab_size == 2
    assert data.train.shape[1:] == (3, 6, 6)  # grey and odd sizes: RGB, resized
    assert data.train.dtype == np.uint8  # pixels kept as bytes; a batch is scaled to [0, 1]
    images, labels = image_batch(data, 4, 0, 0)
    assert images.dtype == torch.float32 and float(images.min()) >= 0.0
    assert float(images.max()) <= 1.0 and float(images.max()) > 0.5 and labels.dtype == torch.int64
    assert len(data.train) + len(data.val) == 6 and len(data.val) == 2


def test_a_hugging_face_image_dataset_loads_through_the_datasets_library(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """images:hf: through the real library, offline: a local folder is an "imagefolder"
    dataset (an `image` and a `label` column), as cifar10 from the Hub would be read."""
    pytest.importorskip("datasets")
    Image = pytest.importorskip("PIL.Image")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # never the network
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # nothing in the home folder
    for name, grey in (("ants", 20), ("bees", 220)):
        (tmp_path / "set" / "train" / name).mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (9, 9), (grey, grey, grey)).save(
                tmp_path / "set" / "train" / name / f"{i}.png")
    data = load_images(DataSpec(corpus=f"images:hf:{tmp_path / 'set'}:train", image_size=4,
                                val_fraction=0.25))
    assert data.classes == ("ants", "bees") and data.train.shape[1:] == (3, 4, 4)
    assert len(data.val) == 2 and sorted(data.val_labels) == [0, 1]
    with pytest.raises(DataError, match="could not be loaded"):
        load_images(DataSpec(corpus=f"images:hf:{tmp_path / 'none'}", image_size=4))


@pytest.mark.parametrize(("corpus", "message"), [
    ("images:mnist", "unknown image corpus 'images:mnist'"),
    ("images:folder:", "unknown image corpus"),
    ("images:hf:", "unknown image corpus"),
])
def test_unknown_image_corpora_are_refused(corpus: str, message: str) -> None:
    assert message in (image_source_problem(corpus) or "")
    with pytest.raises(DataError, match=message):
        load_images(DataSpec(corpus=corpus))


def test_a_missing_folder_and_a_one_class_folder_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_images(DataSpec(corpus=f"images:folder:{tmp_path / 'none'}", image_size=8))
    (tmp_path / "only").mkdir()
    with pytest.raises(DataError, match="1 class folder"):
        load_images(DataSpec(corpus=f"images:folder:{tmp_path}", image_size=8))
    assert parse_image_source("images:hf:cifar10:test").split == "test"


def test_batches_are_a_pure_function_of_seed_and_step_and_cover_each_epoch() -> None:
    n, b = 50, 8
    first = np.concatenate([batch_indices(n, b, 3, k) for k in range(7)])[:n]  # epoch 0: 50
    assert sorted(first) == list(range(n))  # every image once before any twice
    assert np.array_equal(batch_indices(n, b, 3, 4), batch_indices(n, b, 3, 4))
    assert not np.array_equal(batch_indices(n, b, 3, 4), batch_indices(n, b, 4, 4))
    assert images_seen(n, b, 3) == 24 and images_seen(n, b, 100) == n


# --- training ----------------------------------------------------------------------------------


def test_a_tiny_vit_learns_the_digits() -> None:
    tracker = NullTracker()
    result = train(vit_spec(steps=150, lr=3e-3), tracker)
    assert result.status == keys.STATUS_FINISHED and result.tokens == 150 * 32  # images
    assert result.final_val_accuracy > 0.5, result.curve  # chance is 0.1
    assert result.final_val_loss < np.log(10) - 1.0
    assert tracker.summary[keys.FINAL_VAL_ACCURACY] == result.final_val_accuracy
    assert keys.FINAL_VAL_BPB not in tracker.summary
    assert any(keys.VAL_ACCURACY in m for _, m in tracker.metrics)
    assert result.unique_tokens == min(1438, 150 * 32)
    assert tracker.summary[keys.FINAL_PATCH_TOKENS] == 150 * 32 * 17  # 16 patches + [CLS]


def test_an_interrupted_vit_run_resumes_to_the_same_result(tmp_path: Path) -> None:
    spec = vit_spec(steps=60)
    reference = train(spec)
    seen = {"step": 0}
    with pytest.raises(Stopped):
        train(spec, checkpoint_dir=tmp_path, on_step=lambda s: seen.update(step=s),
              stop_requested=lambda: seen["step"] >= 33)
    resumed = train(spec, checkpoint_dir=tmp_path)
    assert resumed.resumed_from == 33
    assert resumed.final_val_loss == reference.final_val_loss
    assert resumed.final_val_accuracy == reference.final_val_accuracy
    assert resumed.curve == reference.curve


def test_sampling_refuses_an_image_classifier(tmp_path: Path) -> None:
    with pytest.raises(SampleError, match="image classifier, and does not generate"):
        sample_text(vit_spec(), tmp_path, "def ")


# --- sweep files and the CLI --------------------------------------------------------------------


SWEEP = """
name: v
kind: runs
family: {family}
shape: {shape}
data: {data}
runs: [{{depth: 1, tokens: 1e4}}]
"""


@pytest.mark.parametrize(("family", "shape", "data", "message"), [
    ("vit", "{patch_size: 3}", "{corpus: 'images:digits'}",
     "shape.patch_size: does not divide the image side 8 pixels (got 3)"),
    ("vit", "{}", "{corpus: 'images:digits'}", "shape.patch_size: is required by family 'vit'"),
    ("vit", "{patch_size: 2}", "{corpus: stdlib}", "data.corpus: family 'vit' needs an image"),
    ("vit", "{patch_size: 2}", "{corpus: 'images:digits', seq_len: 64}",
     "data.seq_len: is ignored by family 'vit'"),
    ("vit", "{patch_size: 2}", "{corpus: 'images:hf:cifar10'}",
     "data.image_size: is required with a folder or Hugging Face image corpus"),
    ("gpt", "{}", "{corpus: 'images:digits'}", "data.corpus: is an image corpus; family 'gpt'"),
    ("gpt", "{patch_size: 2}", "{}", "shape.patch_size: is ignored by family 'gpt'"),
])
def test_sweep_files_refuse_bad_image_settings(family: str, shape: str, data: str,
                                               message: str) -> None:
    with pytest.raises(SweepError) as err:
        parse_sweep(SWEEP.format(family=family, shape=shape, data=data), "x.yaml")
    assert message in str(err.value)


@pytest.mark.parametrize(("argv", "message"), [
    (["--family", "vit"], "--patch-size is required by family 'vit'"),
    (["--family", "vit", "--patch-size", "3"], "patch_size=3 does not divide image_size=8"),
    (["--family", "vit", "--patch-size", "2", "--corpus", "stdlib"],
     "family 'vit' reads an image corpus"),
    (["--family", "gpt", "--patch-size", "2"], "--patch-size and --image-size are for image families (vit)"),
    (["--family", "vit", "--patch-size", "2", "--tokenizer", "bpe", "--seq-len", "64"],
     "--tokenizer and --seq-len: family 'vit' reads images, not text"),
    (["--family", "vit", "--patch-size", "2", "--image-size", "8"],
     "--image-size: images:digits are 8x8 and not resized"),
])
def test_the_single_run_cli_refuses_bad_image_settings_in_one_line(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    assert train_cli(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "checkpoints").exists()


def test_the_analysis_counts_images_and_nats_per_image_for_vit() -> None:
    from analysis.runs.table import runs_from_arrays

    runs = runs_from_arrays([1e4, 2e4, 4e4], [1e5, 5e4, 2.5e4], [0.3, 0.25, 0.28],
                            extra={"image_size": [8] * 3, "patch_size": [2] * 3})
    assert (runs.data_unit, runs.loss_unit) == ("tokens", "nats/token")
    assert runs.generates and runs.tokens_per_unit == 1.0
    for family, units in (("vit", ("images", "nats/image")),
                          ("bert", ("tokens", "nats/masked token"))):
        runs.frame["family"] = family
        assert (runs.data_unit, runs.loss_unit) == units and not runs.generates
    assert runs.tokens_per_unit == 1.0  # bert
    runs.frame["family"] = "vit"
    assert runs.tokens_per_unit == 17.0  # C = 6·N·17·D on vit's iso-compute lines


def test_vit_refuses_a_window_sampling_and_data_parallel_runs() -> None:
    base = ("name: v\nkind: runs\nfamily: vit\nshape: {patch_size: 2}\n"
            "data: {corpus: 'images:digits'}\nruns: [{depth: 1, tokens: 1e4}]\n")
    with pytest.raises(SweepError, match=r"train\.sampling: is ignored by family 'vit'"):
        parse_sweep(base + "train: {sampling: shuffled}\n", "x.yaml")
    with pytest.raises(SweepError, match=r"resources\.workers_per_run: must be 1"):
        parse_sweep(base + "resources: {workers_per_run: 2}\n", "x.yaml")
    with pytest.raises(SweepError, match=r"train\.eval_batches: is ignored by family 'vit'"):
        parse_sweep(base + "train: {eval_batches: 3}\n", "x.yaml")
    with pytest.raises(SweepError, match=r"train\.eval_budget: is ignored by family 'vit'"):
        parse_sweep(base + "train: {eval_budget: 0.1}\n", "x.yaml")
    with pytest.raises(SweepError, match=r"train\.variants\[0\]\.sampling: is ignored"):
        parse_sweep(base + "train: {variants: [{sampling: shuffled}]}\n", "x.yaml")


def test_prepare_checks_an_image_corpus_without_caching_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline.data.__main__ import main as data_main

    sweep = tmp_path / "v.yaml"
    sweep.write_text("name: v\nkind: runs\nfamily: vit\nshape: {patch_size: 2}\n"
                     "data: {corpus: 'images:digits'}\nruns: [{depth: 1, tokens: 1e4}]\n")
    assert data_main(["prepare", str(sweep), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "1,707 train and 90 validation images" in capsys.readouterr().out  # 5% held out
    assert not (tmp_path / "cache").exists()


def test_predict_names_a_runnable_vit_run_and_centres_the_next_sweep(tmp_path: Path) -> None:
    """analysis.predict on vit runs: the nearest shape keeps the runs' image geometry and
    corpus, counts D in images (C / (6 N S)) and allows the repetition it needs; --write
    centres the next sweep's sizes on the predicted N (an image is S tokens)."""
    from analysis.runs.shapes import nearest_shape
    from analysis.runs.table import runs_from_arrays
    from pipeline.next_sweep import next_sweep_text
    from pipeline.planner import expand, vocab_size_for

    extra = {"family": ["vit"] * 3, "vocab_size": [10] * 3, "seq_len": [1] * 3,
             "d_model": [32] * 3, "n_heads": [4] * 3, "image_size": [8] * 3,
             "patch_size": [2] * 3, "channels": [1] * 3, "data_corpus": ["images:digits"] * 3,
             "epochs": [10.0] * 3}
    runs = runs_from_arrays([1e4, 2e4, 4e4], [14380.0] * 3, [0.3, 0.2, 0.25], extra=extra)
    shape = nearest_shape(3e4, 1e12, runs)
    assert not isinstance(shape, str), shape
    cfg = make_config("vit", shape.n_layer, shape.d_model, vocab_size=10, seq_len=1,
                      head_dim=8, image_size=8, patch_size=2, channels=1)
    assert shape.tokens == pytest.approx(1e12 / (6 * flops.params_total(cfg) * 17))
    snippet = shape.sweep_snippet("vit-next", 1e12)
    assert "corpus: 'images:digits'" in snippet and "patch_size: 2" in snippet
    parsed = parse_sweep(snippet, "vit-next.yaml")
    assert parsed.data.max_epochs >= shape.tokens / 1438  # the repetition it needs, allowed
    text = next_sweep_text(Path("sweeps/vit_digits.yaml"), tmp_path / "vit_next.yaml",
                           flops=3e12, n_opt=2e4, d_opt=1e5, approach="3", convention="exact")
    nxt = parse_sweep(text, "vit_next.yaml")
    assert nxt.data.corpus == "images:digits"
    sizes = sorted(flops.params_total(s.model) for s in expand(nxt, ".", vocab_size_for(nxt)).specs)
    middle = sizes[len(sizes) // 2]
    assert 2e4 / 2.5 < middle < 2e4 * 2.5, sizes  # centred on N_opt, not N_opt / sqrt(17)
