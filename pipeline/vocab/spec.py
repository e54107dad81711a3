"""RunSpec: everything one training run needs, fully resolved, and its stable run_id.

The planner (pipeline.planner) produces RunSpecs; the trainer (pipeline.train) consumes them;
the tracker logs them flattened as MLflow params. run_id is a hash of the resolved values
that change what is trained (not of the YAML text, and not of where or how fast it runs),
so re-running a sweep finds what is already done.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from pipeline.vocab.families import ModelConfig

STDLIB_CORPORA = ("stdlib", "stdlib+tests", "site-packages")
"""The offline corpora of the running interpreter: its standard library's .py sources without
(~12 MB on CPython 3.11) or with its test suites (~31.5 MB: room for runs of ~30M byte tokens
that never see a token twice), and the .py sources of the packages installed in its
site-packages (what is installed decides the text: ~320 MB beside this project's
dependencies, more beside CUDA stacks; the fingerprint names exactly which files)."""


@dataclass(frozen=True)
class DataSpec:
    """Which tokens a run trains on: the one definition of the data settings and their
    defaults. pipeline.data.DataConfig extends it with the cache folder; the sweep schema's
    data section (pipeline.config.DataSection) takes its defaults from it. Part of run_id."""

    corpus: str = "stdlib"
    """"stdlib" | "stdlib+tests" | "site-packages" | a file, directory or glob (optionally prefixed "path:") |
    "hf:<dataset>[:<split>][:<text_field>]" (split defaults to train, field to text) |
    an image corpus for vit: "images:digits", "images:folder:<path>" or
    "images:hf:<dataset>[:<split>]" (pipeline.vision.images)."""
    tokenizer: str = "bytes"
    """"bytes" (vocab 256) | "chars" (train-split characters + <unk>) | "bpe" (byte-level,
    trained locally on the train split)."""
    bpe_vocab_size: int = 1024
    """Vocabulary of the BPE tokenizer (>= 257); ignored by the other tokenizers."""
    val_fraction: float = 0.05
    """Share of corpus bytes held out for validation, in whole documents (at least one)."""
    max_bytes: int | None = None
    """Cap on corpus UTF-8 bytes: documents are taken in sorted order while they fit. For
    quick tests, and required in practice for large streamed HF datasets."""
    image_size: int | None = None
    """Image corpora ("images:..."): the side every image is resized to, in pixels; None
    keeps the source's own size (the digits are 8x8). Unused by text corpora."""
    train_fraction: float = 1.0
    """Share of the train split this run may read, in (0, 1]: its unique tokens (images) U
    are kept_count(split, train_fraction) of them, taken as the leading train_fraction of
    each of up to 256 equal blocks of the split (pipeline.data.subset: spread over the
    whole split, which is in sorted document order, so a third of it is not just its first
    third of files), so a run of D tokens makes D / U passes over them. 1.0: the whole split.
    The token cache is the split's (one per corpus and tokenizer); the validation split is
    never cut. A share, not a count: the same sweep means the same thing on any corpus.
    In run_id only when below 1 (runs from before it existed keep their ids)."""


@dataclass(frozen=True)
class TrainSpec:
    """The training recipe of one run. Steps follow from the token budget (see RunSpec)."""

    batch_size: int = 32
    """Sequences per optimizer step."""
    lr: float = 3e-3
    """Peak learning rate (AdamW)."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a fraction of the peak (Chinchilla decays 10x)."""
    warmup_steps: int = 0
    """Linear warmup steps from 0 to the peak."""
    schedule: Literal["cosine", "wsd", "constant"] = "cosine"
    """cosine: decay over exactly the planned steps (Chinchilla: the cosine length matches D).
    wsd: warmup-stable-decay, linear decay over the last decay_fraction of steps."""
    decay_fraction: float = 0.2
    """wsd only: fraction of steps spent in the final decay."""
    weight_decay: float = 0.1
    """Decoupled weight decay, applied to matrices only (not to norms or biases)."""
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value (0 disables)."""
    seed: int = 0
    """Seeds initialisation and, unless data_seed is set, the batch sequence (batches are a
    function of (seed, step))."""
    data_seed: int | None = None
    """Seeds the batch sequence (the windows or images drawn at each step, and a masked
    family's masks) instead of `seed`: runs with one data_seed and different seeds read the
    same batches and differ in the stream of `seed` only (initialisation, and dropout where
    it is on): common random numbers across seeds. None: `seed`."""
    eval_interval: int = 0
    """Evaluate every this many steps; 0 means steps // evals_per_run (at least 1)."""
    evals_per_run: int = 8
    """Evaluations along the run when eval_interval is 0: one every steps // evals_per_run
    steps before the last, then one at the end (evals_per_run + 1 in all, or evals_per_run
    where the interval divides the steps: its last one is the final one)."""
    eval_batches: int = 8
    """Fixed validation batches per evaluation (of batch_size sequences each)."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """auto: bf16 autocast on CUDA; on a CPU fp32, except where the planner resolves it to
    bf16 with the head in fp32 (pipeline.vocab.recipe.resolve_auto: GPT from d_model 128 on a CPU
    with native bf16)."""
    head_precision: Literal["autocast", "fp32"] = "autocast"
    """Under bf16 autocast, the final norm and the output head (the logits) in the autocast
    precision ("autocast": the logits are rounded to bf16 before the fp32 loss) or in fp32
    (~4% of a step's FLOPs at vocab 256, d 128). Unused by fp32 runs."""
    mask_rate: float = 0.15
    """Masked-LM families (bert) only: share of each window's positions chosen for prediction
    (pipeline.data.masking; BERT's 15%). Causal families keep the default (unused)."""
    sampling: Literal["random", "shuffled"] = "random"
    """How training windows are drawn (pipeline.data.batches): "random" offsets with
    replacement (in a run of half an epoch ~21% of the tokens trained are repeats), or
    "shuffled": non-overlapping windows in a fresh permutation each epoch, so no token is
    seen twice before the split is used up."""

    @property
    def batch_seed(self) -> int:
        """The seed of the batch sequence: data_seed, or seed where it is None."""
        return self.seed if self.data_seed is None else self.data_seed

    def decay_start(self, steps: int) -> int:
        """wsd: the first step of the final decay of a run of `steps` steps."""
        return steps - max(1, round(self.decay_fraction * steps))

    def resolved_eval_interval(self, steps: int) -> int:
        if self.eval_interval > 0:
            return self.eval_interval
        return max(1, steps // max(1, self.evals_per_run))


@dataclass(frozen=True)
class ExecSpec:
    """How and where a run executes. Not part of run_id: it does not change what is learned."""

    threads: int = 1
    """torch intra-op threads (one per CPU the run is given)."""
    device: str = "auto"
    """auto (cuda > mps > cpu), cpu, cuda, cuda:N or mps."""
    checkpoint_interval: int = 0
    """Save a checkpoint every this many steps (0: only at the end)."""
    log_interval: int = 10
    """Log training loss every this many steps (one host sync per interval)."""
    branch_steps: tuple[int, ...] = ()
    """WSD reuse, on a trunk: also keep its state at these stable-phase steps, for branches."""
    branch_from: str = ""
    """WSD reuse, on a branch: run_id of the trunk whose state at branch_step this run starts
    from. The result equals training from scratch bit for bit (same schedule up to that step,
    batches a function of (seed, step)); only the compute differs."""
    branch_step: int = 0
    """WSD reuse, on a branch: the trunk step it starts from (where its own decay begins)."""
    micro_batch_size: int = 0
    """Sequences per forward/backward pass (0: the whole batch). A smaller divisor of the
    batch accumulates gradients over batch / micro_batch_size passes: the same tokens and the
    same update up to floating-point rounding, at a fraction of the activation memory."""
    workers: int = 1
    """Data-parallel workers (a Ray Train job with DDP when > 1), each training batch /
    workers rows of every global batch: the same update up to floating-point rounding
    (pipeline.train.parallel). With micro_batch_size, that divides each worker's rows."""
    sharding: str = "ddp"
    """With workers > 1: "ddp" (every worker holds the whole model and optimizer state) or
    "fsdp" (FSDP2: parameters, gradients and AdamW state sharded across the workers)."""


@dataclass(frozen=True)
class RunSpec:
    sweep: str
    """Sweep (MLflow experiment) name."""
    model: ModelConfig
    data: DataSpec
    train: TrainSpec
    steps: int
    """Optimizer steps; tokens = steps * batch_size * seq_len."""
    budget: float | None = None
    """Planned compute budget C in FLOPs for an isoflop cell (None otherwise)."""
    flops_convention: str = "exact"
    """The FLOP convention used to turn the budget into tokens."""
    exec: ExecSpec = field(default_factory=ExecSpec)
    role: str = "main"
    """"main" (fitted) or "holdout" (kept out of every fit, to check its prediction). Not part
    of run_id: the same run is the same run whatever it is used for."""

    @property
    def tokens(self) -> int:
        """D: tokens the optimizer consumes."""
        return self.steps * self.train.batch_size * self.model.seq_len

    def identity(self) -> dict:
        """The values that define what is trained: the input of run_id."""
        d = asdict(self)
        d.pop("exec")
        d.pop("sweep")  # the same run in two sweeps is the same run
        d.pop("role")
        # Fields added after ledgers existed enter run_id only away from the value every
        # earlier run had, so those runs keep their ids (tests/test_snapshots.py pins them).
        for section, name, legacy in _ADDED_LATER:
            if d[section].get(name) == legacy:
                del d[section][name]
        if d["train"].get("data_seed") == self.train.seed:  # one computation, one id
            del d["train"]["data_seed"]
        return d

    @property
    def run_id(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return {"run_id": self.run_id, **asdict(self)}

    @staticmethod
    def from_dict(d: dict) -> RunSpec:
        d = {k: v for k, v in d.items() if k != "run_id"}
        return RunSpec(
            sweep=d["sweep"], model=ModelConfig(**d["model"]), data=DataSpec(**d["data"]),
            train=TrainSpec(**d["train"]), steps=d["steps"], budget=d.get("budget"),
            flops_convention=d.get("flops_convention", "exact"),
            exec=_exec_spec(d.get("exec", {})), role=d.get("role", "main"),
        )


_ADDED_LATER = (("train", "sampling", "random"), ("train", "mask_rate", 0.15),
                ("train", "head_precision", "autocast"), ("train", "data_seed", None),
                ("model", "image_size", 0), ("model", "patch_size", 0), ("model", "channels", 0),
                ("data", "image_size", None), ("data", "train_fraction", 1.0))
"""(section, field, value every run had before the field existed)."""


def _exec_spec(d: dict) -> ExecSpec:
    d = dict(d)
    d["branch_steps"] = tuple(d.get("branch_steps", ()))  # JSON gives a list
    return ExecSpec(**d)


def branch_folder(trunk_checkpoint_dir: str | Path, step: int) -> Path:
    """Where a WSD trunk keeps its state at `step` for the branches that start there (a
    folder of its own: the rolling pruning of the trunk's checkpoints never touches it)."""
    return Path(trunk_checkpoint_dir) / f"branch_{step:08d}"


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    """{"a": {"b": 1}} -> {"a.b": 1}: the MLflow params of a spec."""
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
