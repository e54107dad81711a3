"""Peak memory of one training step, from the model config alone (no model is built).

A run's peak is reached in the backward pass of a (micro-)batch: the fp32 weights, their
gradients and AdamW's two moments (4 + 4 + 8 bytes per parameter; bf16 autocast adds a 2-byte
copy of each weight it casts), plus the activations autograd keeps for the backward pass,
plus the logits (the largest single tensors of a small model at a large vocabulary: 67 GB
for 256 x 2048 tokens x 32k vocabulary in fp32).

Activations per layer and token, in values (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", Sec. 4.1, without dropout masks and with a fused
attention kernel that keeps no T x T scores, as torch's scaled_dot_product_attention):
  - the residual stream into each of the two norms: 2 d, kept in fp32 (4 bytes);
  - attention: the norm's output (the Q/K/V input) d, Q q_dim, K and V 2 kv_dim, the attention
    output (the W_o input) q_dim; with RoPE, Q and K once more (before the rotation);
  - MLP: the norm's output d, then GELU: the pre-activation and the activation (2 d_ff);
    SwiGLU: gate, up, silu(gate) and their product (4 d_ff).
These are at the activation precision (2 bytes under bf16 autocast, 4 in fp32). The logits
are kept at that precision, upcast to fp32 for the loss (4 bytes) and their gradient is fp32
(4 bytes). Measured against the peak resident memory of real training steps on the CPU in
tests/test_estimate.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.vocab import flops

if TYPE_CHECKING:
    from pipeline.vocab.families import ModelConfig

GIB = 2**30
HEADROOM = 0.9  # a run fits when its estimated peak is at most this share of the memory


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of one training step's peak, by what holds them."""

    weights: float  # fp32 parameters (+ the bf16 copies autocast makes)
    gradients: float  # fp32, one per parameter
    optimizer: float  # AdamW's exp_avg and exp_avg_sq, fp32
    activations: float  # what autograd keeps for the backward pass, all layers
    logits: float  # the head's output, its fp32 upcast for the loss and its gradient

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.logits


def _activation_values_per_token(cfg: ModelConfig) -> tuple[float, float]:
    """(values at the activation precision, fp32 values) one layer keeps per token."""
    d, hd = cfg.d_model, cfg.head_dim
    q_dim, kv_dim = cfg.n_heads * hd, cfg.n_kv_heads * hd
    attention = d + q_dim + 2 * kv_dim + q_dim
    if cfg.pos == "rope":  # the rotation keeps Q and K before it as well as after
        attention += q_dim + kv_dim
    mlp = d + (4 if cfg.mlp == "swiglu" else 2) * cfg.d_ff
    return attention + mlp, 2 * d


def training_memory(cfg: ModelConfig, micro_batch: int, bf16: bool) -> MemoryEstimate:
    """The peak of one optimizer step at `micro_batch` sequences of cfg.seq_len tokens per
    forward/backward pass (the whole batch without gradient accumulation)."""
    p = flops.params_total(cfg)
    act = 2 if bf16 else 4
    tokens = micro_batch * cfg.positions  # vit: every patch and [CLS] of every image
    low, fp32 = _activation_values_per_token(cfg)
    per_layer = tokens * (low * act + fp32 * 4)
    # + one layer's worth again: the gradients of the layer being back-propagated, alive
    # beside everything still kept for the layers below it; + the final norm's input.
    activations = (cfg.n_layer + 1) * per_layer + tokens * cfg.d_model * 4
    return MemoryEstimate(
        weights=p * (4 + (2 if bf16 else 0)), gradients=4 * p, optimizer=8 * p,
        activations=activations,
        # vit: one row of class logits per image (the [CLS] position's).
        logits=(micro_batch if cfg.is_image else tokens) * cfg.vocab_size
        * (act + 4 + 4 + 4 + (4 if bf16 else 0)),
    )


def micro_batch_to_fit(cfg: ModelConfig, batch: int, bf16: bool, memory: float) -> int:
    """The batch, halved while it divides evenly and the step's estimated peak is above
    HEADROOM x memory (bytes): the largest micro-batch that fits, or the smallest reachable
    (the plan's check then refuses the run and says why)."""
    micro = batch
    while micro % 2 == 0 and training_memory(cfg, micro, bf16).total > HEADROOM * memory:
        micro //= 2
    return micro
