"""Prototype optimisations of the trainer, as patches for benchlib.time_train(patches=...).

Each is a tuple of (object, attribute, value) patches applied for one measurement. They
change one thing of pipeline.model / pipeline.train and leave the rest as the files have it:
the functional-module proxies below swap one function of `torch.nn.functional` as seen from
pipeline.model, so the model code itself is whatever model.py holds at the time.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

import pipeline.model as model_module
import pipeline.train as train_module


class _Functional:
    """torch.nn.functional with some functions replaced (what pipeline.model sees as F)."""

    def __init__(self, **overrides) -> None:
        self._overrides = overrides

    def __getattr__(self, name: str):
        if name in self._overrides:
            return self._overrides[name]
        return getattr(F, name)


def _sdpa_fp32(q, k, v, *args, **kwargs):
    """SDPA in fp32 with autocast off: the CPU flash-attention backward is slow in bf16."""
    if q.device.type == "cpu" and q.dtype == torch.bfloat16:
        with torch.autocast("cpu", enabled=False):
            return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), *args, **kwargs)
    return F.scaled_dot_product_attention(q, k, v, *args, **kwargs)


def _gelu_exact(x, approximate: str = "none"):
    """GELU with erf (nn.GELU's default) instead of the tanh approximation."""
    return F.gelu(x, approximate="none")


def _make_optimizer(**adamw_kwargs):
    """pipeline.train.make_optimizer's groups and hyperparameters, other AdamW kernel flags."""
    original = train_module.make_optimizer

    def make(model, spec, device):
        groups = [{k: v for k, v in g.items() if k not in ("foreach", "fused")}
                  for g in original(model, spec, device).param_groups]
        return torch.optim.AdamW(groups, **adamw_kwargs)

    return make


_clip = torch.nn.utils.clip_grad_norm_

FP32_ATTENTION = ((model_module, "F", _Functional(scaled_dot_product_attention=_sdpa_fp32)),)
EXACT_GELU = ((model_module, "F", _Functional(gelu=_gelu_exact)),)
BOTH = ((model_module, "F", _Functional(scaled_dot_product_attention=_sdpa_fp32,
                                        gelu=_gelu_exact)),)
ADAMW_FUSED = ((train_module, "make_optimizer", _make_optimizer(fused=True)),)
ADAMW_FORLOOP = ((train_module, "make_optimizer", _make_optimizer(foreach=False)),)
CLIP_FOREACH = ((torch.nn.utils, "clip_grad_norm_", functools.partial(_clip, foreach=True)),)
FUSED_AND_CLIP = ADAMW_FUSED + CLIP_FOREACH
# fp32 matmuls through oneDNN instead of MKL: on this AMD CPU oneDNN's fp32 GEMM runs its
# AVX-512 kernels (2048^3: ~2x MKL's rate, fp32-level error, as the flag is only a hint where
# the CPU has no AMX); torch routes fp32 mm/addmm to oneDNN when this flag is "bf16".
FP32_MATMUL_ONEDNN = ((torch.backends.mkldnn.matmul, "fp32_precision", "bf16"),)
