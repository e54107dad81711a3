"""The device a plan is for: its memory and its throughput, measured or assumed (and said so).

A dry run answers for the machine the runs will train on, which is often not the one it runs
on (a GPU sweep planned on a laptop). Where the runs' device is here (the CPU for a CPU sweep,
a CUDA GPU for a GPU sweep on a GPU machine) the time per step is measured
(pipeline.estimate.calibration); elsewhere it is the run's FLOPs over an assumed sustained
throughput, peak x MFU, stated in the plan. The memory the plan checks runs against is the
sweep's resources.device_memory_gb where given, else this machine's when the runs train here.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

# Assumed when the sweep's device is not on this machine and --device-peak is not given.
# H100 SXM: 989 TFLOP/s dense bf16 (NVIDIA's datasheet; 1979 is with 2:4 sparsity).
GPU_PEAK_FLOPS = 989e12
# Small models reach a low share of it: MFU 0.3 is in the range reported for 0.1-1B models.
GPU_MFU = 0.3
# This project's CPU machines: fp32 matmul ~100 GFLOP/s per core (measured, DEVELOPERS.md).
CPU_PEAK_FLOPS_PER_THREAD = 100e9
CPU_MFU = 0.5


@dataclass(frozen=True)
class Target:
    """Where the plan's runs train, and what is known of it."""

    kind: str  # "cuda" or "cpu"
    memory: float | None  # bytes a run may use; None: unknown, not checked
    memory_source: str  # "declared", "this machine" or "unknown"
    flops_per_s: float | None  # assumed sustained FLOP/s; None: measured by calibration
    assumption: str  # one line for the plan

    @property
    def measured(self) -> bool:
        return self.flops_per_s is None


NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""x86 CPU flags (Linux /proc/cpuinfo) of bf16 arithmetic in hardware: without one, oneDNN
emulates bf16 and it is slower than fp32."""


@functools.cache
def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this machine's CPU computes bf16 natively (what precision auto needs on a CPU,
    pipeline.vocab.recipe.resolve_auto). Read from the flags once per process (the planner asks for
    every run), without importing torch; False where there is no /proc/cpuinfo (not Linux) or
    it names none of NATIVE_BF16_FLAGS."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return any(flag in line.split() for flag in NATIVE_BF16_FLAGS)
    except OSError:
        return False
    return False


def ram_bytes() -> float:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _cuda_here() -> bool:
    # torch is imported only for a GPU sweep: a CPU sweep's driver never needs it (1.5 s of
    # its start, measured: python -X importtime, 2026-12-04).
    import torch

    return torch.cuda.is_available()


def target_for(num_gpus: float, threads: int, slots: int, declared_gb: float | None,
               device_peak: float | None, mfu: float | None) -> Target:
    """The target of a sweep with these resources, planned on this machine."""
    kind = "cuda" if num_gpus > 0 else "cpu"
    here = kind == "cpu" or _cuda_here()
    memory, source = None, "unknown"
    if declared_gb is not None:
        memory, source = declared_gb * 2**30, "declared"
    elif kind == "cpu":
        memory, source = ram_bytes() / max(slots, 1), "this machine"
    elif here:
        import torch

        total = torch.cuda.get_device_properties(0).total_memory
        memory, source = total * min(num_gpus, 1.0), "this machine"
    if device_peak is None and here:
        return Target(kind, memory, source, None, f"time measured on this machine's {kind}")
    if kind == "cuda":
        peak = device_peak if device_peak is not None else GPU_PEAK_FLOPS
        share = mfu if mfu is not None else GPU_MFU
        name = "given" if device_peak is not None else "H100 SXM dense bf16, assumed"
    else:
        peak = device_peak if device_peak is not None else CPU_PEAK_FLOPS_PER_THREAD * threads
        share = mfu if mfu is not None else CPU_MFU
        name = "given" if device_peak is not None else f"{threads} CPU thread(s), assumed"
    return Target(kind, memory, source, peak * share,
                  f"time = exact FLOPs / ({peak / 1e12:.3g} TFLOP/s peak ({name}) x MFU "
                  f"{share:g}); not measured: no {'CUDA device' if kind == 'cuda' else kind} here"
                  if not here else
                  f"time = exact FLOPs / ({peak / 1e12:.3g} TFLOP/s peak ({name}) x MFU "
                  f"{share:g})")
