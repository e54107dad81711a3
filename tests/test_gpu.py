"""GPU paths: bf16 autocast training on CUDA. Skipped (reported as skipped) without a GPU;
benchmarks/gpu/gpu_check.sh and benchmarks/gpu/gpu_throughput.py exercise the rest on a GPU
machine."""

from __future__ import annotations

import math

import pytest
import torch

from pipeline.train import NullTracker, pick_device, train
from pipeline.vocab.families import make_config
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_auto_device_is_cuda_and_bf16_training_learns() -> None:
    assert pick_device("auto").type == "cuda"
    spec = RunSpec(
        sweep="gpu-test", model=make_config("llama", 2, 32, vocab_size=256, seq_len=64),
        data=DataSpec(max_bytes=300_000), train=TrainSpec(batch_size=8, lr=1e-2, eval_batches=2),
        steps=100, exec=ExecSpec(device="auto"),
    )
    result = train(spec, NullTracker())
    assert result.status == "finished"
    assert math.isfinite(result.final_val_loss) and result.final_val_loss < math.log(256) - 1
