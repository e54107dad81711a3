"""The checks of the single-run CLI's options, made before anything heavy: before the corpus
is read, a model is built or MLflow is touched. A refused option is one line that names it
and its value (OptionError), never a traceback, a half-made run or a folder outside the
checkpoint folder.

The bounds are the sweep schema's (pipeline/config/sections.py): each option is checked by
constructing the schema section that holds the same setting in a sweep file (--n-layer by
runs[].n_layer, --lr by train.lr, ...), so a run the CLI accepts is one a sweep file could
plan, and the message cites the field. What a sweep file has no field for is checked here:
the step count, the warmup, the experiment name, the device and the memory of the run.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import NoReturn

import torch
from pydantic import BaseModel, ValidationError

from pipeline.config.schema import SWEEP_NAME
from pipeline.config.sections import (
    DataSection,
    ResourcesSection,
    RunEntry,
    ShapeSection,
    TrainSection,
)
from pipeline.estimate.device import ram_bytes
from pipeline.estimate.memory import GIB, HEADROOM, training_memory
from pipeline.train import pick_device
from pipeline.vocab import flops
from pipeline.vocab.families import ModelConfig
from pipeline.vocab.store import folder_problem


class OptionError(ValueError):
    """An option the CLI refuses; the message names the option and its value (one line)."""


class OneLineParser(argparse.ArgumentParser):
    """argparse with its refusals (a bad int, an unknown option) in the CLI's form: one
    `error: ...` line, exit status 2, in place of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} ({self.prog} --help lists the options)\n")


MAX_STEPS = 10_000_000
"""Most optimizer steps one run may plan. 20x the longest published LLM pre-trainings (LLaMA
2: 2T tokens in 4M-token batches, ~5e5 steps; Chinchilla and GPT-3 fewer). A step of the
smallest model this CLI trains took 4.9 ms (1 layer, width 16, 4 x 32 tokens, one CPU
thread, 2,000 steps on a 2-core machine), so 1e7 steps are ~14 hours even there and weeks at
the usual sizes. More is a typo (--tokens 1e15 for 1e5: 488 billion steps, a run that never
ends and whose schedule and evaluation plan are nonsense), not a run."""

_SECTION_PREFIX = {RunEntry: "runs[]", ShapeSection: "shape", DataSection: "data",
                   TrainSection: "train", ResourcesSection: "resources"}


def show(value: object) -> str:
    """An option's value as the user wrote it: numbers plainly (1e+15, nan), text quoted."""
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value) if isinstance(value, str) else str(value)


def schema_check(option: str, value: object, section: type[BaseModel], field: str,
                 **others: object) -> None:
    """Construct `section` with field=value (and valid `others`: the fields its validators
    need); OptionError citing the sweep file's field when the schema refuses the value."""
    try:
        section(**{field: value, **others})
    except ValidationError as e:
        err = e.errors()[0]
        cause = (err.get("ctx") or {}).get("error")
        if problems := getattr(cause, "problems", None):  # a section's own validator
            why = problems[0][1]
        else:
            why = err["msg"].removeprefix("Value error, ")
        where = f"{_SECTION_PREFIX.get(section, section.__name__)}.{field}"
        raise OptionError(f"{option} {show(value)}: {why[:1].lower()}{why[1:]} (as {where} "
                          "of a sweep file, pipeline/config/sections.py)") from None


def check_schema_bounds(args: argparse.Namespace) -> None:
    """Every option that a sweep file also sets, against the bounds of its field there."""
    # (option, value, section, field, the other fields the section needs); None: not given.
    checks: list[tuple[str, object, type[BaseModel], str, dict[str, object]]] = [
        ("--n-layer", args.n_layer, RunEntry, "n_layer", {"d_model": 1, "tokens": 1.0}),
        ("--d-model", args.d_model, RunEntry, "d_model", {"n_layer": 1, "tokens": 1.0}),
        ("--tokens", args.tokens, RunEntry, "tokens", {"n_layer": 1, "d_model": 1}),
        ("--head-dim", args.head_dim, ShapeSection, "head_dim", {}),
        ("--patch-size", args.patch_size, ShapeSection, "patch_size", {}),
        ("--corpus", args.corpus, DataSection, "corpus", {}),
        ("--seq-len", args.seq_len, DataSection, "seq_len", {}),
        ("--val-fraction", args.val_fraction, DataSection, "val_fraction", {}),
        ("--image-size", args.image_size, DataSection, "image_size", {}),
        ("--batch-size", args.batch_size, TrainSection, "batch_size", {}),
        ("--lr", args.lr, TrainSection, "lr", {}),
        ("--threads", args.threads, ResourcesSection, "num_cpus", {}),
        ("--checkpoint-interval", args.checkpoint_interval, ResourcesSection,
         "checkpoint_interval", {}),
    ]
    for option, value, section, field, others in checks:
        if value is not None:
            schema_check(option, value, section, field, **others)
    try:  # one seed of train.seeds
        TrainSection(seeds=[args.seed])
    except ValidationError:
        raise OptionError(f"--seed {args.seed}: must be in [0, 2**32 - 1] (as train.seeds "
                          "of a sweep file, pipeline/config/sections.py)") from None


def check_steps(units: float, per_step: int, unit: str, warmup: int | None) -> int:
    """The run's optimizer steps, D / (batch x seq_len) rounded: at least 1, at most
    MAX_STEPS; and --warmup-steps, which must leave at least one step after the warmup."""
    steps = round(units / per_step)
    what = f"{per_step:,} {unit} a step (--batch-size{'' if unit == 'images' else ' x --seq-len'})"
    if steps < 1:
        raise OptionError(f"--tokens {show(units)}: rounds to 0 steps of {what}; give at "
                          f"least {per_step:,}")
    if steps > MAX_STEPS:
        raise OptionError(f"--tokens {show(units)}: {steps:,} steps of {what}, more than "
                          f"{MAX_STEPS:,} (pipeline/train/checks.py: MAX_STEPS)")
    if warmup is not None and not 0 <= warmup < steps:
        raise OptionError(f"--warmup-steps {warmup}: must be in [0, {steps}) for a run of "
                          f"{steps:,} steps")
    return steps


def check_experiment(name: str, checkpoint_dir: str) -> None:
    """--experiment is a name, the folder of the run's checkpoints inside --checkpoint-dir:
    never a path (no '/', '..', leading '.', NUL). The sweep schema's rule for sweep names."""
    if not SWEEP_NAME.fullmatch(name):
        raise OptionError(f"--experiment {name!r}: must be a name, not a path: a letter or "
                          "digit, then letters, digits, '_', '.', '-' (at most 100 "
                          "characters), as a sweep's name")
    if "\0" in checkpoint_dir:
        raise OptionError(f"--checkpoint-dir {checkpoint_dir!r}: contains a NUL character")
    if problem := folder_problem(Path(checkpoint_dir) / name):  # creates nothing
        raise OptionError(f"--checkpoint-dir {checkpoint_dir!r}: {problem}")


_DEVICE = re.compile(r"auto|cpu|mps|cuda(?::(\d{1,4}))?")


def check_threads(threads: int) -> None:
    """At most this machine's CPUs, as a sweep's resources.num_cpus is (pipeline/driver/
    capacity.py): torch's thread pools oversubscribed past them crawl (4,096 threads on 2
    cores had not done 10 steps in 120 s) and 100,000 crashed the process in its forward
    pass (SIGSEGV), leaving the MLflow run RUNNING."""
    cpus = os.cpu_count() or 1
    if threads > cpus:
        raise OptionError(f"--threads {threads}: more than this machine's {cpus} CPUs")


def check_device(name: str, option: str = "--device") -> torch.device:
    """auto, cpu, cuda, cuda:N or mps, and present on this machine."""
    match = _DEVICE.fullmatch(name)
    if match is None:
        raise OptionError(f"{option} {name!r}: expected auto, cpu, cuda, cuda:N or mps")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            build = "" if torch.version.cuda else ", a build without CUDA"
            raise OptionError(f"{option} {name}: no CUDA device here (torch "
                              f"{torch.__version__}{build}); use --device cpu or auto")
        count = torch.cuda.device_count()
        if int(match.group(1) or 0) >= count:
            raise OptionError(f"{option} {name}: this machine has {count} CUDA device(s), "
                              f"cuda:0 to cuda:{count - 1}")
    if name == "mps" and not (getattr(torch.backends, "mps", None) is not None
                              and torch.backends.mps.is_available()):
        raise OptionError(f"{option} mps: no Apple GPU (MPS) here; use --device cpu or auto")
    return pick_device(name)


def device_memory(device: torch.device) -> tuple[float, str]:
    """(bytes, what they are) of the memory a run on `device` has: a GPU's own, else RAM."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device.index or 0)
        return float(props.total_memory), f"GPU {device} ({props.name})"
    # The CPU and Apple's GPU (unified memory) use the machine's physical RAM; os.sysconf,
    # as the sweep's dry run (pipeline/estimate/device.py).
    return ram_bytes(), "this machine's RAM"


def check_memory(cfg: ModelConfig, batch: int, bf16: bool, device: torch.device,
                 options: str) -> None:
    """Refuse a run whose estimated peak (pipeline/estimate/memory.py: fp32 weights, gradients
    and AdamW's two moments, 16 bytes a parameter, plus activations and logits) exceeds
    HEADROOM (90%) of the device's memory: the sweep's dry-run rule, before allocating."""
    est = training_memory(cfg, batch, bf16)
    have, what = device_memory(device)
    if est.total <= HEADROOM * have:
        return
    state = est.weights + est.gradients + est.optimizer
    raise OptionError(
        f"{options}: the run needs ~{est.total / GIB:,.1f} GiB at its peak (N="
        f"{flops.params_total(cfg):,} parameters: weights, gradients and AdamW "
        f"{state / GIB:,.1f} GiB, activations {est.activations / GIB:,.1f} GiB, logits "
        f"{est.logits / GIB:,.1f} GiB; pipeline/estimate/memory.py), more than "
        f"{HEADROOM:.0%} of the {have / GIB:,.1f} GiB of {what}")
