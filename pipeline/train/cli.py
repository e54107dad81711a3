"""The single-run CLI (`python -m pipeline.train`): train one model and log it to MLflow.

Why a module of its own: the CLI runs the model through ``pipeline.trial`` (the same code a
sweep worker runs), and the trial imports the training loop, so the loop cannot import the
CLI back. Every option is checked before the corpus is read, a model is built or MLflow is
touched (check_options, with pipeline/train/checks.py); a run stopped by Ctrl-C or SIGTERM
ends KILLED in MLflow (main).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import torch

from pipeline.config import TrainSection
from pipeline.data import load_data
from pipeline.data.masking import DEFAULT_RATE, check_rate
from pipeline.estimate.device import cpu_has_native_bf16
from pipeline.train import pick_device
from pipeline.train.checks import (
    OneLineParser,
    OptionError,
    check_device,
    check_experiment,
    check_memory,
    check_schema_bounds,
    check_steps,
    check_threads,
)
from pipeline.vision.sources import declared_classes, declared_geometry, is_image_corpus
from pipeline.vocab import flops, keys
from pipeline.vocab.families import (
    DEFAULT_FAMILY,
    ModelConfig,
    ShapeError,
    data_unit,
    family_names,
    get_family,
    make_config,
    model_vocab_size,
)
from pipeline.vocab.recipe import (
    AUTO_BF16_MIN_D_MODEL,
    ScalingRecipe,
    precision_label,
    resolve_auto,
    trained_precision,
)
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

if TYPE_CHECKING:
    from pipeline.tracking import Ledger, TrialRecord

RECIPE = TrainSection().scaling_recipe()
"""A sweep's default recipe (the schema's train section): the CLI's batch, LR and warmup."""
TEXT_TOKENS, IMAGES = 2e6, 2e4
"""Default D of a run: tokens (text), images (vit: ~14 passes over the digits' 1,438)."""
TEXT_SEQ_LEN = 128
"""Default context of the text families, tokens."""
DESCRIPTION = "Single-run CLI: train one model on the default corpus and log it to MLflow."


def build_parser() -> argparse.ArgumentParser:
    """The CLI's options; --family offers the family registry's names."""
    p = OneLineParser(prog="python -m pipeline.train", description=DESCRIPTION)
    p.add_argument("--family", choices=family_names(), default=DEFAULT_FAMILY)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--tokens", type=float, default=None,
                   help=f"training tokens D (default {TEXT_TOKENS:g}); for vit, training "
                        f"images (default {IMAGES:g})")
    p.add_argument("--seq-len", type=int, default=None,
                   help=f"text families (default {TEXT_SEQ_LEN})")
    p.add_argument("--batch-size", type=int, default=RECIPE.batch_size,
                   help="sequences per step (default %(default)s: a sweep's)")
    p.add_argument("--lr", type=float, default=TrainSection.model_fields["lr"].default,
                   help="peak learning rate (default %(default)s: a sweep's)")
    p.add_argument("--warmup-steps", type=int, default=None,
                   help=f"default: a sweep's rule, {RECIPE.warmup_fraction * 100:g}%% of the steps")
    p.add_argument("--schedule", choices=["cosine", "wsd", "constant"], default="cosine")
    p.add_argument("--mask-rate", type=float, default=None,
                   help=f"masked-LM families (bert): share of positions predicted "
                        f"(default {DEFAULT_RATE})")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus", default=None,
                   help="default: stdlib (text families), images:digits (vit)")
    p.add_argument("--val-fraction", type=float, default=DataSpec().val_fraction,
                   help="held-out share of the corpus (default %(default)s; documents for "
                        "text, images per class for an image corpus)")
    p.add_argument("--patch-size", type=int, default=None,
                   help="vit (required): patch side in pixels, dividing the image side")
    p.add_argument("--image-size", type=int, default=None,
                   help="vit with a folder or Hugging Face corpus: resize images to this side")
    p.add_argument("--tokenizer", default=None, choices=["bytes", "chars", "bpe"],
                   help="text families (default bytes)")
    p.add_argument("--evals", type=int, default=TrainSpec().evals_per_run,
                   help="evaluations along the run besides the final one (default "
                        "%(default)s), fewer where --eval-budget binds")
    p.add_argument("--eval-budget", type=float, default=None,
                   help="text families: evaluations cost at most this share of the training "
                        f"compute (default {ScalingRecipe.eval_budget}; 1 keeps every "
                        "evaluation of a run of more than 3 steps)")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"],
                   help="auto: bf16 autocast on CUDA; on a CPU fp32, or bf16 with the head in "
                        "fp32 where it was measured faster and at parity (GPT from d_model "
                        f"{AUTO_BF16_MIN_D_MODEL} on a CPU with native bf16: pipeline/vocab/recipe.py)")
    p.add_argument("--head-precision", default="autocast", choices=["autocast", "fp32"],
                   help="under bf16: the final norm and output head in bf16 (autocast) or fp32")
    p.add_argument("--experiment", default="single-runs",
                   help="MLflow experiment name, and the run's folder in --checkpoint-dir: a "
                        "name (letters, digits, _ . -), not a path")
    p.add_argument("--checkpoint-dir", default="checkpoints")
    p.add_argument("--checkpoint-interval", type=int, default=0)
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                   help="continue from the run's latest checkpoint if there is one")
    return p


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    """The run the options describe, every option checked first (pipeline/train/checks.py);
    then the token cache is built once (the trial reloads it)."""
    plan = check_options(args)
    data = load_data(plan.data)
    image = {}
    if plan.images:
        image = {"image_size": data.image_size, "channels": data.channels,
                 "patch_size": args.patch_size}
    cfg = make_config(args.family, args.n_layer, args.d_model,
                      vocab_size=model_vocab_size(args.family, data.vocab_size),
                      seq_len=plan.seq_len, head_dim=args.head_dim, **image)
    # Again with the data's own vocabulary and images (a chars or folder corpus's are only
    # known now), still before any model is built.
    check_memory(cfg, args.batch_size, plan.bf16, plan.device, plan.memory_options)
    warmup = RECIPE.warmup_steps(plan.steps) if args.warmup_steps is None else args.warmup_steps
    eval_batches = TrainSpec().eval_batches
    budget = ScalingRecipe.eval_budget if args.eval_budget is None else args.eval_budget
    evals = (args.evals if image else ScalingRecipe(eval_budget=budget)
             .evals_per_run(args.evals, plan.steps, eval_batches))
    return RunSpec(
        sweep=args.experiment, model=cfg, data=plan.data,
        train=TrainSpec(batch_size=args.batch_size, lr=args.lr, warmup_steps=warmup,
                        schedule=args.schedule, seed=args.seed, precision=plan.precision,
                        head_precision=plan.head_precision, mask_rate=plan.mask_rate,
                        evals_per_run=evals, eval_batches=eval_batches),
        steps=plan.steps,
        exec=ExecSpec(threads=args.threads, device=args.device,
                      checkpoint_interval=args.checkpoint_interval),
    )


@dataclass(frozen=True)
class Checked:
    """What check_options resolved from the options, without reading any data."""

    data: DataSpec
    images: bool
    seq_len: int
    steps: int
    mask_rate: float
    device: torch.device
    precision: str
    head_precision: str
    bf16: bool
    memory_options: str
    """The options the run's memory follows, for the memory check's message."""


def check_options(args: argparse.Namespace) -> Checked:
    """Every option, before anything heavy (no data read, no model, no MLflow): the sweep
    schema's bounds, the data settings against the family, the shape (make_config, with the
    vocabulary and images the settings imply), the steps, the name, the device and the
    estimated peak memory. OptionError (a ValueError) naming the option otherwise."""
    mask_rate = _mask_rate(args)
    _check_evals(args)
    check_schema_bounds(args)
    check_threads(args.threads)
    check_experiment(args.experiment, args.checkpoint_dir)
    data_spec = _data_spec(args)
    images = get_family(args.family).objective.images
    seq_len = 1 if images else (TEXT_SEQ_LEN if args.seq_len is None else args.seq_len)
    units = args.tokens if args.tokens is not None else (IMAGES if images else TEXT_TOKENS)
    steps = check_steps(units, args.batch_size * seq_len, data_unit(args.family),
                        args.warmup_steps)
    device = check_device(args.device)
    precision, head = resolve_auto(args.precision, args.head_precision, device.type,
                                   args.family, args.d_model,
                                   cpu_bf16=device.type == "cpu" and cpu_has_native_bf16())
    bf16 = trained_precision(precision, device.type) == "bf16"
    options = (f"--n-layer {args.n_layer} --d-model {args.d_model} --batch-size "
               f"{args.batch_size} " + (f"--patch-size {args.patch_size}" if images
                                        else f"--seq-len {seq_len}"))
    try:
        cfg = _provisional_config(args, data_spec, seq_len)
    except ShapeError as e:
        shape = f"--n-layer {args.n_layer} --d-model {args.d_model} --head-dim {args.head_dim}"
        raise OptionError(shape + (f" --patch-size {args.patch_size}" if images else "")
                          + f": {e}") from None
    if cfg is not None:
        check_memory(cfg, args.batch_size, bf16, device, options)
    return Checked(data_spec, images, seq_len, steps, mask_rate, device, precision, head,
                   bf16, options)


def _provisional_config(args: argparse.Namespace, data: DataSpec,
                        seq_len: int) -> ModelConfig | None:
    """The run's shape before the data is read (ShapeError where it cannot be built), with
    the vocabulary and image geometry the settings imply, or a lower bound of them where only
    the data says (a chars vocabulary, a folder's classes); None where the image geometry
    is not known before the data (a folder or dataset without --image-size)."""
    image = {}
    if get_family(args.family).objective.images:
        geometry = declared_geometry(data.corpus, data.image_size)
        if geometry is None:
            return None
        image = {"image_size": geometry[0], "channels": geometry[1],
                 "patch_size": args.patch_size}
        vocab = declared_classes(data.corpus) or 2  # at least two classes
    else:
        # bytes: 256; bpe: its vocabulary; chars: unknown before the corpus is read, so a
        # lower bound (one character and <unk>): the check after loading has the real one.
        vocab = {"bytes": 256, "bpe": data.bpe_vocab_size}.get(data.tokenizer, 2)
    return make_config(args.family, args.n_layer, args.d_model,
                       vocab_size=model_vocab_size(args.family, vocab), seq_len=seq_len,
                       head_dim=args.head_dim, **image)


def _check_evals(args: argparse.Namespace) -> None:
    if args.evals < 0:
        raise ValueError(f"--evals must be >= 0, got {args.evals}")
    if args.eval_budget is None:
        return
    if not 0.0 < args.eval_budget <= 1.0:
        raise ValueError(f"--eval-budget must be in (0, 1], got {args.eval_budget}")
    if get_family(args.family).objective.images:
        raise ValueError(f"--eval-budget: family {args.family!r} scores its whole validation "
                         "split at each evaluation; set --evals instead")


def _data_spec(args: argparse.Namespace) -> DataSpec:
    """The data options, checked against the family: vit reads images, the others text."""
    images = get_family(args.family).objective.images
    corpus = args.corpus or ("images:digits" if images else DataSpec().corpus)
    if images != is_image_corpus(corpus):
        raise ValueError(f"--corpus {corpus!r}: family {args.family!r} reads "
                         f"{'an image corpus (images:...)' if images else 'text'}")
    if images and args.patch_size is None:
        raise ValueError(f"--patch-size is required by family {args.family!r}")
    if not images and (args.patch_size is not None or args.image_size is not None):
        raise ValueError(f"--patch-size and --image-size are for image families "
                         f"({', '.join(family_names(images=True))}), not {args.family!r}")
    if images and (given := [f for f, v in (("--tokenizer", args.tokenizer),
                                             ("--seq-len", args.seq_len)) if v is not None]):
        raise ValueError(f"{' and '.join(given)}: family {args.family!r} reads images, "
                         "not text")
    if images and corpus == "images:digits" and args.image_size is not None:
        raise ValueError("--image-size: images:digits are 8x8 and not resized")
    return DataSpec(corpus=corpus, tokenizer=args.tokenizer or DataSpec().tokenizer,
                    val_fraction=args.val_fraction,
                    image_size=args.image_size)


def _mask_rate(args: argparse.Namespace) -> float:
    """--mask-rate, checked: in (0, 1), and only for a masked-LM family."""
    if args.mask_rate is None:
        return DEFAULT_RATE
    if "mask_rate" not in get_family(args.family).objective.train_keys:
        raise ValueError(f"--mask-rate {args.mask_rate} is for masked-LM families; family "
                         f"{args.family!r} predicts every next token")
    check_rate(args.mask_rate)
    return args.mask_rate


def main(argv: list[str] | None = None) -> int:
    """Single-run CLI: train one model on the default corpus and log it to MLflow."""
    args = build_parser().parse_args(argv)
    try:
        spec = spec_from_args(args)
    except ValueError as e:  # OptionError, ShapeError, DataError: one line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # while the token cache was built: no run exists yet
        print("stopped before the run was created", file=sys.stderr)
        return 130
    # MLflow (pipeline.tracking, pipeline.trial) only now: a refused option is spared its
    # import, which was 2.2 s of the 5.5 s of CPU a refusal took (3.3 s without it).
    from pipeline.tracking import Ledger, TrackingError, default_tracking_uri

    uri = default_tracking_uri()
    ledger: Ledger | None = None
    record: TrialRecord | None = None
    try:
        with sigterm_as_sigint():
            ledger = Ledger(uri, args.experiment)
            existing = ledger.trials().get(spec.run_id)
            if existing is not None and existing.status == keys.STATUS_FINISHED:
                print(f"run {spec.run_id} already finished in experiment {args.experiment!r} "
                      f"({uri}); nothing to do")
                return 0
            record = existing or ledger.create_trial(spec, parent_run_id=None)
            out = _train(args, spec, uri, record)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (sigterm_as_sigint)
        with signals_ignored():  # a second signal must not leave the run half-closed
            if record is None and ledger is not None:  # stopped inside create_trial?
                record = ledger.trials().get(spec.run_id)
            if record is not None:
                close_if_running(uri, record.mlflow_run_id)
        print(f"stopped: run {spec.run_id} is not running"
              + (" (killed in MLflow)" if record is not None else "")
              + "; the same command resumes it from its last checkpoint", file=sys.stderr)
        return 130
    except TrackingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2, default=str))
    return 0 if out["status"] == keys.STATUS_FINISHED else 1


def _train(args: argparse.Namespace, spec: RunSpec, uri: str, record: TrialRecord) -> dict:
    """Train the run into its MLflow run (pipeline.trial, as a sweep worker does)."""
    from pipeline.trial import execute_trial

    cfg, steps, t = spec.model, spec.steps, spec.train
    print(f"run {spec.run_id}: {cfg.family} n_layer={cfg.n_layer} d_model={cfg.d_model} "
          f"N={flops.params_total(cfg):,} (non-emb {flops.params_non_embedding(cfg):,}) "
          f"D={spec.tokens:,} {data_unit(cfg.family)} in {steps} steps, "
          f"{precision_label(t.precision, t.head_precision, pick_device(args.device).type)}, "
          f"{(steps - 1) // spec.train.resolved_eval_interval(steps) + 1} evaluations; "
          f"tracking at {uri}")
    # The experiment is a checked name (checks.check_experiment): this stays inside the
    # checkpoint folder.
    ckpt = str(Path(args.checkpoint_dir).resolve() / args.experiment / spec.run_id)
    if not args.resume and Path(ckpt).exists():
        print(f"--no-resume: removing the run's checkpoints in {ckpt}; training from scratch")
        shutil.rmtree(ckpt)
    return execute_trial(spec, uri, record.mlflow_run_id, ckpt)


@contextlib.contextmanager
def sigterm_as_sigint() -> Iterator[None]:
    """While the run is made and trained, SIGTERM (kill, timeout, a scheduler's stop) does
    what Ctrl-C does: in training, a stop at the next step boundary with a checkpoint
    (pipeline.trial.stop_on_sigint; a second signal stops at once); elsewhere a
    KeyboardInterrupt. Either way the run ends KILLED, not RUNNING (Python's default
    SIGTERM ends the process with no cleanup at all). Only the main thread can set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):  # stop_on_sigint's, or Python's default_int_handler
            handler(signal.SIGINT, frame)
        else:  # SIGINT ignored (a background job): stop all the same
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM ignored for the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def close_if_running(uri: str, mlflow_run_id: str) -> bool:
    """End the MLflow run KILLED (tag status killed) if it is still RUNNING: an interrupt
    that came before pipeline.trial recorded it (while the run was created, or before its
    training began). True if it was closed here."""
    from mlflow import MlflowClient

    from pipeline.tracking import MLflowTracker

    if MlflowClient(tracking_uri=uri).get_run(mlflow_run_id).info.status != "RUNNING":
        return False
    MLflowTracker(uri, mlflow_run_id).end(keys.STATUS_KILLED)
    return True
