"""One readable Transformer; the families' differences are config switches.

  gpt    LayerNorm, fused QKV (+bias), learned positions, GELU MLP, tied head
  llama  RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, untied head
  bert   gpt's layers without the causal mask (a masked-LM encoder)
  vit    VisionTransformer: gpt's blocks without a mask over a [CLS] token and the image's
         patches, a classifier on [CLS] (build_model picks the class from the family)

The shape comes from pipeline.vocab.families.ModelConfig; parameter and FLOP counts live in
pipeline.vocab.flops (pure) and are tested against this module.

Unlike the llama seed this was derived from: the causal mask is applied (through
scaled_dot_product_attention's is_causal), the rotary table is sliced to the actual input
length, and normalisation is RMSNorm.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from pipeline.vocab.families import ModelConfig


class RMSNorm(nn.Module):
    """x / rms(x) * weight (Zhang & Sennrich 2019), the LLaMA normalisation; no mean, no bias."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32: under bf16 autocast the mean of squares loses precision.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


def make_norm(cfg: ModelConfig) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.d_model, cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)


def rotary_tables(head_dim: int, length: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables of shape (length, head_dim/2) for rotary embeddings (Su et al. 2021)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of x (B, H, T, hd) by position-dependent angles."""
    T = x.shape[-2]
    cos, sin = cos[:T], sin[:T]  # slice to the input length: any T <= seq_len works
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2).type_as(x)


class Attention(nn.Module):
    """Multi-head self-attention; grouped-query when n_kv_heads < n_heads."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.causal = cfg.causal
        self.dropout = cfg.dropout
        # One fused projection for Q, K and V: one matmul instead of three.
        qkv_out = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, qkv_out, bias=cfg.bias)
        self.proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=cfg.bias)
        self.proj.residual_scaled = True  # GPT-2 init: scaled by 1/sqrt(2 n_layer)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        B, T, _ = x.shape
        hd = self.head_dim
        q, k, v = self.qkv(x).split(
            [self.n_heads * hd, self.n_kv_heads * hd, self.n_kv_heads * hd], dim=-1
        )
        q = q.view(B, T, self.n_heads, hd).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(B, T, self.n_kv_heads, hd).transpose(1, 2)
        v = v.view(B, T, self.n_kv_heads, hd).transpose(1, 2)
        if rope is not None:
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        if self.n_kv_heads != self.n_heads:
            # Each group of n_heads / n_kv_heads query heads shares one K/V head.
            rep = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        dropout_p = self.dropout if self.training else 0.0
        if q.device.type == "cpu" and q.dtype == torch.bfloat16:
            # CPU flash attention's backward is 5-6x slower in bf16 than in fp32 at these head
            # sizes (BENCHMARKS.md): under CPU bf16 autocast, attend in fp32 (autocast would
            # cast the fp32 inputs back to bf16, hence disabled around the call).
            with torch.autocast("cpu", enabled=False):
                y = F.scaled_dot_product_attention(
                    q.float(), k.float(), v.float(), is_causal=self.causal, dropout_p=dropout_p
                ).to(q.dtype)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal,
                                               dropout_p=dropout_p)
        return self.proj(y.transpose(1, 2).reshape(B, T, self.n_heads * hd))


class MLP(nn.Module):
    """GELU MLP (GPT) or SwiGLU (LLaMA: w2(silu(w1 x) * w3 x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.swiglu = cfg.mlp == "swiglu"
        self.fc = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias) if self.swiglu else None
        self.proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.proj.residual_scaled = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            return self.proj(F.silu(self.gate(x)) * self.fc(x))
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm1, self.attn = make_norm(cfg), Attention(cfg)
        self.norm2, self.mlp = make_norm(cfg), MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x), rope))
        return x + self.drop(self.mlp(self.norm2(x)))


def output_head(norm: nn.Module, head: nn.Linear, x: torch.Tensor, fp32: bool) -> torch.Tensor:
    """head(norm(x)): the logits. With fp32 under an enabled autocast, both run in fp32, so
    the logits are not rounded to bf16 (8 bits of mantissa: ~0.02 on a logit of 5) before the
    fp32 cross-entropy; the head is ~2 d V of the ~2 N FLOPs per token (4% at d 128, V 256)."""
    if fp32 and torch.is_autocast_enabled(x.device.type):
        with torch.autocast(x.device.type, enabled=False):
            return head(norm(x.float()))
    return head(norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, fp32_head: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.fp32_head = fp32_head
        """Under autocast, the final norm and the head in fp32 (TrainSpec.head_precision)."""
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model) if cfg.pos == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = make_norm(cfg)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.head.weight = self.tok_emb.weight  # one matrix for input and output
        if cfg.pos == "rope":
            cos, sin = rotary_tables(cfg.head_dim, cfg.seq_len, cfg.rope_theta)
            # Buffers, not parameters; not saved (rebuilt from the config).
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        # GPT-2 init: N(0, 0.02) everywhere; residual output projections scaled by
        # 1/sqrt(2 n_layer) so the residual stream's variance does not grow with depth.
        if isinstance(module, nn.Linear):
            std = 0.02
            if getattr(module, "residual_scaled", False):
                std /= math.sqrt(2 * self.cfg.n_layer)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx (B, T) int64 -> logits (B, T, V), and the mean cross-entropy if targets given."""
        B, T = idx.shape
        if self.cfg.seq_len < T:
            raise ValueError(f"input length {T} exceeds the context length {self.cfg.seq_len}")
        x = self.tok_emb(idx)
        rope = None
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(T, device=idx.device))
        else:
            rope = (self.rope_cos, self.rope_sin)
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, rope)
        logits = output_head(self.norm_f, self.head, x, self.fp32_head)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample max_new_tokens continuations of idx (B, T); temperature 0 means greedy."""
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if top_p is not None and not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        was_training = self.training
        self.eval()
        for _ in range(max_new_tokens):
            context = idx[:, -self.cfg.seq_len :]  # crop to the context window
            logits = self._last_logits(context)
            if temperature == 0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                probs = F.softmax(_filter_logits(logits / temperature, top_k, top_p), dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        self.train(was_training)
        return idx

    def _last_logits(self, idx: torch.Tensor) -> torch.Tensor:
        logits, _ = self(idx)
        return logits[:, -1, :].float()


class VisionTransformer(nn.Module):
    """ViT (Dosovitskiy et al. 2021; the transformer guide's example): a strided convolution
    cuts the image into patch vectors, a learnable [CLS] token goes first, learned position
    embeddings are added, pre-norm blocks attend over all S = n_patches + 1 positions (no
    mask), and a linear classifier reads the final [CLS] state. Same blocks and GPT-2 init as
    Transformer, so N and FLOPs follow pipeline.vocab.flops's vit branch."""

    def __init__(self, cfg: ModelConfig, fp32_head: bool = False) -> None:
        super().__init__()
        if not cfg.is_image:
            raise ValueError(f"VisionTransformer needs an image shape (family vit), got "
                             f"family {cfg.family!r}")
        self.cfg = cfg
        self.fp32_head = fp32_head
        d = cfg.d_model
        self.patch = nn.Conv2d(cfg.channels, d, kernel_size=cfg.patch_size,
                               stride=cfg.patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_emb = nn.Parameter(torch.zeros(1, cfg.positions, d))
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = make_norm(cfg)
        self.head = nn.Linear(d, cfg.vocab_size)  # vocab_size: the number of classes
        self.apply(self._init_weights)
        for p in (self.cls, self.pos_emb):
            nn.init.normal_(p, mean=0.0, std=0.02)

    def _init_weights(self, module: nn.Module) -> None:
        Transformer._init_weights(self, module)  # type: ignore[arg-type]
        if isinstance(module, nn.Conv2d):  # the patch projection: a linear map of pixels
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            nn.init.zeros_(module.bias)

    def forward(self, images: torch.Tensor, targets: torch.Tensor | None = None):
        """images (B, C, H, W) float -> class logits (B, classes), and the mean
        cross-entropy (nats per image) if targets (B,) are given."""
        cfg = self.cfg
        want = (cfg.channels, cfg.image_size, cfg.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != want:
            raise ValueError(f"expected images of shape (B, {want[0]}, {want[1]}, {want[2]}), "
                             f"got {tuple(images.shape)}")
        x = self.patch(images).flatten(2).transpose(1, 2)  # (B, n_patches, d)
        x = torch.cat([self.cls.expand(len(x), -1, -1).to(x.dtype), x], dim=1)
        x = self.drop(x + self.pos_emb)
        for block in self.blocks:
            x = block(x, None)
        logits = output_head(self.norm_f, self.head, x[:, 0], self.fp32_head)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.float(), targets)


def build_model(cfg: ModelConfig, fp32_head: bool = False) -> nn.Module:
    """The model of a shape: VisionTransformer for vit, Transformer for the text families;
    fp32_head: the final norm and output head in fp32 under autocast (output_head)."""
    cls = VisionTransformer if cfg.is_image else Transformer
    return cls(cfg, fp32_head=fp32_head)


def _filter_logits(logits: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """Keep the top_k logits and/or the smallest set whose probability mass reaches top_p."""
    if top_k is not None and top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = F.softmax(sorted_logits, dim=-1).cumsum(-1)
        # Drop a token when the mass before it already reaches top_p (the first always stays).
        drop = (cum - F.softmax(sorted_logits, dim=-1)) >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits
