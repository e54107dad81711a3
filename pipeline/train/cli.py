"""The single-run CLI (`python -m pipeline.train`): train one model and log it to MLflow.

Why a module of its own: the CLI runs the model through ``pipeline.trial`` (the same code a
sweep worker runs), and the trial imports the training loop, so the loop cannot import the
CLI back.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from pipeline import flops, keys
from pipeline.data import load_data
from pipeline.data.masking import DEFAULT_RATE, check_rate
from pipeline.estimate.device import planned_cpu_bf16
from pipeline.families import FAMILIES, data_unit, make_config, model_vocab_size, objective
from pipeline.recipe import (
    AUTO_BF16_MIN_D_MODEL,
    ScalingRecipe,
    precision_label,
    resolve_auto,
)
from pipeline.spec import DataSpec, ExecSpec, RunSpec, TrainSpec
from pipeline.tracking import Ledger, default_tracking_uri
from pipeline.train import pick_device
from pipeline.trial import execute_trial
from pipeline.vision.sources import is_image_corpus

TEXT_TOKENS, IMAGES = 2e6, 2e4
"""Default D of a run: tokens (text), images (vit: ~14 passes over the digits' 1,438)."""
DESCRIPTION = "Single-run CLI: train one model on the default corpus and log it to MLflow."


def build_parser() -> argparse.ArgumentParser:
    """The CLI's options; --family offers the family registry's names."""
    p = argparse.ArgumentParser(prog="python -m pipeline.train", description=DESCRIPTION)
    p.add_argument("--family", choices=FAMILIES, default="gpt")
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--tokens", type=float, default=None,
                   help=f"training tokens D (default {TEXT_TOKENS:g}); for vit, training "
                        f"images (default {IMAGES:g})")
    p.add_argument("--seq-len", type=int, default=None, help="text families (default 128)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per step")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=None, help="default: 5%% of steps")
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
                        f"{AUTO_BF16_MIN_D_MODEL} on a CPU with native bf16: pipeline/recipe.py)")
    p.add_argument("--head-precision", default="autocast", choices=["autocast", "fp32"],
                   help="under bf16: the final norm and output head in bf16 (autocast) or fp32")
    p.add_argument("--experiment", default="single-runs", help="MLflow experiment name")
    p.add_argument("--checkpoint-dir", default="checkpoints")
    p.add_argument("--checkpoint-interval", type=int, default=0)
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                   help="continue from the run's latest checkpoint if there is one")
    return p


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    """The run the options describe (builds the token cache once; the trial reloads it)."""
    mask_rate = _mask_rate(args)
    _check_evals(args)
    data_spec = _data_spec(args)
    data = load_data(data_spec)
    image = {}
    if objective(args.family) == "classify":
        image = {"image_size": data.image_size, "channels": data.channels,
                 "patch_size": args.patch_size}
    cfg = make_config(args.family, args.n_layer, args.d_model,
                      vocab_size=model_vocab_size(args.family, data.vocab_size),
                      seq_len=args.seq_len or 128, head_dim=args.head_dim, **image)
    units = args.tokens or (IMAGES if image else TEXT_TOKENS)
    steps = max(1, round(units / (args.batch_size * cfg.seq_len)))
    warmup = steps // 20 if args.warmup_steps is None else args.warmup_steps
    eval_batches = TrainSpec().eval_batches
    budget = ScalingRecipe.eval_budget if args.eval_budget is None else args.eval_budget
    evals = (args.evals if image else ScalingRecipe(eval_budget=budget)
             .evals_per_run(args.evals, steps, eval_batches))
    kind = pick_device(args.device).type
    precision, head = resolve_auto(args.precision, args.head_precision, kind, cfg.family,
                                   cfg.d_model, cpu_bf16=kind == "cpu" and planned_cpu_bf16())
    return RunSpec(
        sweep=args.experiment, model=cfg, data=data_spec,
        train=TrainSpec(batch_size=args.batch_size, lr=args.lr, warmup_steps=warmup,
                        schedule=args.schedule, seed=args.seed, precision=precision,
                        head_precision=head, mask_rate=mask_rate, evals_per_run=evals,
                        eval_batches=eval_batches),
        steps=steps,
        exec=ExecSpec(threads=args.threads, device=args.device,
                      checkpoint_interval=args.checkpoint_interval),
    )


def _check_evals(args: argparse.Namespace) -> None:
    if args.evals < 0:
        raise ValueError(f"--evals must be >= 0, got {args.evals}")
    if args.eval_budget is None:
        return
    if not 0.0 < args.eval_budget <= 1.0:
        raise ValueError(f"--eval-budget must be in (0, 1], got {args.eval_budget}")
    if objective(args.family) == "classify":
        raise ValueError(f"--eval-budget: family {args.family!r} scores its whole validation "
                         "split at each evaluation; set --evals instead")


def _data_spec(args: argparse.Namespace) -> DataSpec:
    """The data options, checked against the family: vit reads images, the others text."""
    images = objective(args.family) == "classify"
    corpus = args.corpus or ("images:digits" if images else DataSpec().corpus)
    if images != is_image_corpus(corpus):
        raise ValueError(f"--corpus {corpus!r}: family {args.family!r} reads "
                         f"{'an image corpus (images:...)' if images else 'text'}")
    if images and args.patch_size is None:
        raise ValueError("--patch-size is required by family 'vit'")
    if not images and (args.patch_size is not None or args.image_size is not None):
        raise ValueError(f"--patch-size and --image-size are for family 'vit', not "
                         f"{args.family!r}")
    if images and (given := [f for f, v in (("--tokenizer", args.tokenizer),
                                             ("--seq-len", args.seq_len)) if v is not None]):
        raise ValueError(f"{' and '.join(given)}: family 'vit' reads images, not text")
    if images and corpus == "images:digits" and args.image_size is not None:
        raise ValueError("--image-size: images:digits are 8x8 and not resized")
    if not 0.0 < args.val_fraction < 1.0:
        raise ValueError(f"--val-fraction must be in (0, 1), got {args.val_fraction}")
    return DataSpec(corpus=corpus, tokenizer=args.tokenizer or DataSpec().tokenizer,
                    val_fraction=args.val_fraction,
                    image_size=args.image_size)


def _mask_rate(args: argparse.Namespace) -> float:
    """--mask-rate, checked: in (0, 1), and only for a masked-LM family."""
    if args.mask_rate is None:
        return DEFAULT_RATE
    if objective(args.family) != "masked":
        raise ValueError(f"--mask-rate {args.mask_rate} is for masked-LM families; family "
                         f"{args.family!r} predicts every next token")
    check_rate(args.mask_rate)
    return args.mask_rate


def main(argv: list[str] | None = None) -> int:
    """Single-run CLI: train one model on the default corpus and log it to MLflow."""
    args = build_parser().parse_args(argv)
    try:
        spec = spec_from_args(args)
    except ValueError as e:  # ShapeError, DataError, a bad --mask-rate: one line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    cfg, steps, t = spec.model, spec.steps, spec.train
    uri = default_tracking_uri()
    ledger = Ledger(uri, args.experiment)
    existing = ledger.trials().get(spec.run_id)
    if existing is not None and existing.status == keys.STATUS_FINISHED:
        print(f"run {spec.run_id} already finished in experiment {args.experiment!r} ({uri}); "
              "nothing to do")
        return 0
    record = existing or ledger.create_trial(spec, parent_run_id=None)
    print(f"run {spec.run_id}: {cfg.family} n_layer={cfg.n_layer} d_model={cfg.d_model} "
          f"N={flops.params_total(cfg):,} (non-emb {flops.params_non_embedding(cfg):,}) "
          f"D={spec.tokens:,} {data_unit(cfg.family)} in {steps} steps, "
          f"{precision_label(t.precision, t.head_precision, pick_device(args.device).type)}, "
          f"{(steps - 1) // spec.train.resolved_eval_interval(steps) + 1} evaluations; "
          f"tracking at {uri}")
    ckpt = str(Path(args.checkpoint_dir).resolve() / args.experiment / spec.run_id)
    if not args.resume and Path(ckpt).exists():
        print(f"--no-resume: removing the run's checkpoints in {ckpt}; training from scratch")
        shutil.rmtree(ckpt)
    out = execute_trial(spec, uri, record.mlflow_run_id, ckpt)
    print(json.dumps(out, indent=2, default=str))
    return 0 if out["status"] == keys.STATUS_FINISHED else 1

