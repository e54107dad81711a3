"""Shared helpers of the benchmarks: machine facts, timing, the matmul peak, the model ladder,
and timing the real trainer (pipeline.train.train) on a NullTracker.

How training throughput is measured everywhere: pipeline.train.train() runs with evaluation
pushed past the end of the run (eval_interval > steps: no mid-run eval), and its own
per-window throughput metric (keys.THROUGHPUT, one value per log interval, measured by the
trainer around its inner loop) is read back from the NullTracker. The first window (warm-up:
allocator, first-call kernel selection) is dropped; the median of the others is the figure.
So setup (data, model, optimizer) and the final eval are excluded, and what is timed is
exactly the trainer's step: get_batch, forward, backward, clip, AdamW, the per-window sync.

Variants (bf16 with fp32 attention, exact GELU, fused AdamW, ...) are prototyped by patching
pipeline.model / pipeline.train attributes for the duration of one measurement (`patched`),
never by editing those files.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch

from pipeline.data import load_data
from pipeline.train import NullTracker, train
from pipeline.vocab import flops, keys
from pipeline.vocab.families import ModelConfig, family_names, make_config, model_vocab_size
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

# The ladder: about 20k, 100k, 500k and 2M parameters, head_dim 16 (the shape rule's),
# the same (n_layer, d_model) for both families.
LADDER: tuple[tuple[str, int, int], ...] = (
    ("20k", 1, 32),
    ("100k", 3, 48),
    ("500k", 4, 96),
    ("2M", 8, 144),
)
FAMILIES = ("gpt", "llama")
SEQ_LEN = 128  # as the shipped CPU sweeps
BATCH = 16  # sequences per step, as the shipped CPU sweeps (2,048 tokens per step)


# --------------------------------------------------------------------------------------
# Machine and reporting
# --------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def loadavg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def machine_header(title: str) -> str:
    flags = cpu_flags()
    isa = ",".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags)
    return (
        f"# {title}\n"
        f"date {datetime.datetime.now().isoformat(timespec='seconds')}; nproc {os.cpu_count()}; "
        f"CPU {cpu_model()} ({isa}); torch {torch.__version__}; "
        f"python {platform.python_version()}; load average {loadavg()}"
    )


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def spread(xs: list[float]) -> str:
    """'min-max' of a list, for the reader to see the noise."""
    return f"{min(xs):,.0f}-{max(xs):,.0f}" if xs else "-"


def table(rows: list[dict], columns: list[str]) -> str:
    """A markdown table of dict rows."""
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(out)


# --------------------------------------------------------------------------------------
# Matmul peak
# --------------------------------------------------------------------------------------


def matmul_gflops(dtype: torch.dtype, n: int = 2048, reps: int = 7) -> list[float]:
    """GFLOP/s per CPU-second of an n x n x n matmul, one thread, after 2 warm-up calls."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        out = torch.empty(n, n, dtype=dtype)
        for _ in range(2):
            torch.mm(a, b, out=out)
        rates = []
        for _ in range(reps):
            t = time.process_time()
            torch.mm(a, b, out=out)
            rates.append(2.0 * n**3 / max(time.process_time() - t, 1e-9) / 1e9)
        return rates
    finally:
        torch.set_num_threads(old)


def onednn_fp32_gflops(n: int = 2048, reps: int = 5) -> list[float]:
    """The same fp32 matmul through oneDNN (mkldnn_linear on mkldnn tensors), one thread.

    torch.mm uses MKL's sgemm for fp32; on AMD CPUs MKL does not take its AVX-512 path, so
    this shows what the hardware's fp32 units can do (a reference, not the MFU denominator).
    """
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, w = torch.randn(n, n).to_mkldnn(), torch.randn(n, n).to_mkldnn()
        torch._C._nn.mkldnn_linear(a, w, None)
        rates = []
        for _ in range(reps):
            t = time.process_time()
            torch._C._nn.mkldnn_linear(a, w, None)
            rates.append(2.0 * n**3 / max(time.process_time() - t, 1e-9) / 1e9)
        return rates
    except (RuntimeError, AttributeError):
        return []
    finally:
        torch.set_num_threads(old)


@dataclass
class Peak:
    fp32: list[float]
    bf16: list[float]

    def add(self, other: Peak) -> None:
        self.fp32 += other.fp32
        self.bf16 += other.bf16

    def get(self, dtype: str) -> float:
        """Median GFLOP/s of all samples (the MFU denominator)."""
        return median(self.fp32 if dtype == "fp32" else self.bf16)

    def describe(self) -> str:
        return (f"matmul peak, 1 thread, 2048^3: fp32 median {median(self.fp32):.1f} GFLOP/s "
                f"(best {max(self.fp32):.1f}), bf16 median {median(self.bf16):.1f} GFLOP/s "
                f"(best {max(self.bf16):.1f}); {len(self.fp32)} samples each")


def measure_peak(reps: int = 5) -> Peak:
    return Peak(matmul_gflops(torch.float32, reps=reps), matmul_gflops(torch.bfloat16, reps=reps))


# --------------------------------------------------------------------------------------
# Models, specs, data
# --------------------------------------------------------------------------------------


def ladder_config(family: str, n_layer: int, d_model: int, seq_len: int = SEQ_LEN) -> ModelConfig:
    """A text family's shape on byte tokens (bert: + [MASK]); vit has no token ladder."""
    if family not in (text := family_names(images=False)):
        raise SystemExit(f"error: the benchmarks train on text; family {family!r} is not one "
                         f"of {', '.join(text)}")
    return make_config(family, n_layer, d_model, vocab_size=model_vocab_size(family, 256),
                       seq_len=seq_len, head_dim=16)


def make_spec(cfg: ModelConfig, steps: int, *, batch: int = BATCH, precision: str = "fp32",
              seed: int = 0, log_interval: int = 10, eval_interval: int | None = None,
              eval_batches: int = 1, threads: int = 1, lr: float = 3e-3,
              warmup_steps: int = 0) -> RunSpec:
    """A run of the pipeline's recipe (AdamW, cosine, clip 1.0); no mid-run eval by default."""
    return RunSpec(
        sweep="bench", model=cfg, data=DataSpec(),
        train=TrainSpec(batch_size=batch, precision=precision, seed=seed, lr=lr,
                        warmup_steps=warmup_steps, eval_batches=eval_batches,
                        eval_interval=eval_interval if eval_interval else steps + 1),
        steps=steps, exec=ExecSpec(threads=threads, device="cpu", log_interval=log_interval),
    )


_DATA = None


def bench_data():
    """The default corpus (stdlib, bytes), from the token cache ($SCALING_CACHE_DIR honoured)."""
    global _DATA
    if _DATA is None:
        _DATA = load_data(DataSpec())
    return _DATA


# --------------------------------------------------------------------------------------
# Patching (prototype variants without editing pipeline/)
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def patched(*patches: tuple[object, str, object]) -> Iterator[None]:
    """Set obj.name = value for each (obj, name, value) inside the block, then restore."""
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


# --------------------------------------------------------------------------------------
# Timing the real trainer
# --------------------------------------------------------------------------------------


@dataclass
class TrainTiming:
    """Throughput of one train() call in two clocks.

    wall: perf_counter. cpu: process_time, the CPU seconds this process got. On a shared
    machine (other jobs running: load average above the core count) the wall clock also
    counts time spent waiting for a core; CPU time does not, so it measures the code.
    """

    cpu: list[float]  # tokens per CPU-second of every timed window
    wall: list[float]  # tokens per wall-clock second of every timed window
    trainer: list[float]  # the trainer's own metric (keys.THROUGHPUT, wall clock), per window
    setup_s: float  # wall seconds from the call to the first step's end (data, model, step 1)
    result: object  # the RunResult

    @property
    def tokens_per_s(self) -> float:
        """Median tokens per CPU-second (the figure the benchmarks report)."""
        return median(self.cpu)

    @property
    def wall_tokens_per_s(self) -> float:
        return median(self.wall)


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def time_train(spec: RunSpec, *, windows: int = 3, data=None, patches: tuple = (),
               window_steps: int | None = None) -> TrainTiming:
    """Run train(spec) for `windows`+1 timing windows (the first is warm-up, dropped).

    Each step's end is stamped in both clocks through train()'s on_step hook. A window is
    window_steps steps, by default log_interval (aligned with the trainer's log windows and
    their one host sync each).
    """
    log = window_steps or spec.exec.log_interval
    spec = replace(spec, steps=log * (windows + 1))
    spec = replace(spec, train=replace(spec.train, eval_interval=spec.steps + 1))
    tracker = NullTracker()
    stamps: dict[int, tuple[float, float]] = {}

    def on_step(done: int) -> None:
        stamps[done] = (time.process_time(), time.perf_counter())

    t0 = time.perf_counter()
    with patched(*patches):
        result = train(spec, tracker, data=data or bench_data(), on_step=on_step)
    tokens = log * spec.train.batch_size * spec.model.seq_len
    cpu, wall = [], []
    for w in range(1, windows + 1):
        (c0, w0), (c1, w1) = stamps[w * log], stamps[(w + 1) * log]
        cpu.append(tokens / max(c1 - c0, 1e-9))
        wall.append(tokens / max(w1 - w0, 1e-9))
    rates = [m[keys.THROUGHPUT] for _, m in tracker.metrics if keys.THROUGHPUT in m]
    return TrainTiming(cpu, wall, rates[1:], stamps[1][1] - t0, result)


def seconds_per_step(spec: RunSpec, data=None, patches: tuple = ()) -> float:
    """A quick estimate (2 steps after 1 warm-up step) used to size the timing windows."""
    t = time_train(replace(spec, exec=replace(spec.exec, log_interval=1)), windows=2,
                   data=data, patches=patches)
    return spec.train.batch_size * spec.model.seq_len / t.tokens_per_s


def log_interval_for(step_s: float, window_s: float) -> int:
    """Steps per log window so that a window lasts about window_s seconds."""
    return max(1, round(window_s / max(step_s, 1e-6)))


def mfu(cfg: ModelConfig, tokens_per_s: float, peak_gflops: float, convention: str) -> float:
    """Model FLOPs utilisation: training FLOPs per second / the measured matmul peak."""
    return flops.flops_per_token(cfg, convention) * tokens_per_s / (peak_gflops * 1e9)


def interleave(variants: dict[str, Callable[[], float]], reps: int) -> dict[str, list[float]]:
    """Call every variant once per round (side by side), the order rotated each round
    (A B C, B C A, C A B, ...) so that no variant always runs first or last."""
    out: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(reps):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(variants[name]())
    return out
