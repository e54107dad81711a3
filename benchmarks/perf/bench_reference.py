"""The trainer against a plain reference loop, side by side, at the same GPT shapes.

    python benchmarks/perf/bench_reference.py             # ~2-3 minutes on 2 cores

The reference is written here in the straightforward style of nanoGPT's block (Karpathy's
model.py, GPT-2 style): attention as an explicit matmul, a causal mask built with
torch.tril and masked_fill(-inf), softmax, matmul with V; GELU MLP 4x; pre-norm LayerNorm;
learned positions; tied head. Its loop is the plain one: AdamW with default flags, gradient
clipping, loss.item() every step. Same parameter count, batch, sequence length, tokens and
one thread as the trainer (pipeline.train.train, fp32). Ratio = trainer / reference tokens/s
(per CPU-second; wall clock alongside).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from pipeline.vocab import flops

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import benchlib as bl  # noqa: E402


class RefAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, self.d_head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        causal = torch.tril(torch.ones(T, T, device=x.device)).view(1, 1, T, T)
        scores = scores.masked_fill(causal == 0, float("-inf"))
        context = F.softmax(scores, dim=-1) @ v
        return self.out(context.transpose(1, 2).contiguous().view(B, T, C))


class RefBlock(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = RefAttention(d_model, n_heads)
        self.fc1, self.fc2 = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class RefGPT(nn.Module):
    def __init__(self, vocab: int, seq_len: int, n_layer: int, d_model: int, n_heads: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(RefBlock(d_model, n_heads) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def time_reference(cfg, tokens: np.ndarray, batch: int, log: int, windows: int,
                   seed: int = 0) -> tuple[float, float]:
    """(tokens per CPU-second, tokens per wall second): median of windows after a warm-up one."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = RefGPT(cfg.vocab_size, cfg.seq_len, cfg.n_layer, cfg.d_model, cfg.n_heads)
    assert sum(p.numel() for p in model.parameters()) == flops.params_total(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    data = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    T = cfg.seq_len
    offsets = torch.arange(T + 1)
    gen = torch.Generator().manual_seed(seed)
    stamps = []
    for step in range(log * (windows + 1)):
        starts = torch.randint(0, len(data) - T - 1, (batch,), generator=gen)
        chunk = data[starts[:, None] + offsets]
        x, y = chunk[:, :-1], chunk[:, 1:]
        loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        if (step + 1) % log == 0:
            stamps.append((time.process_time(), time.perf_counter()))
    n = log * batch * T
    cpu = [n / (b[0] - a[0]) for a, b in zip(stamps, stamps[1:], strict=False)]
    wall = [n / (b[1] - a[1]) for a, b in zip(stamps, stamps[1:], strict=False)]
    return bl.median(cpu), bl.median(wall)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="interleaved rounds per size")
    p.add_argument("--window-s", type=float, default=1.0)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--sizes", default=",".join(s for s, _, _ in bl.LADDER))
    args = p.parse_args(argv)

    print(bl.machine_header("Trainer vs plain reference loop (gpt, fp32, 1 thread)"))
    data = bl.bench_data()
    rows = []
    for label, n_layer, d_model in bl.LADDER:
        if label not in args.sizes.split(","):
            continue
        cfg = bl.ladder_config("gpt", n_layer, d_model)
        log = bl.log_interval_for(bl.seconds_per_step(bl.make_spec(cfg, 3), data=data),
                                  args.window_s)

        def ours(cfg=cfg, log=log):
            t = bl.time_train(bl.make_spec(cfg, 1, log_interval=log), windows=args.windows,
                              data=data)
            return t.tokens_per_s, t.wall_tokens_per_s

        def ref(cfg=cfg, log=log):
            return time_reference(cfg, data.train, bl.BATCH, log, args.windows)

        res = bl.interleave({"ours": ours, "ref": ref}, args.reps)
        o, r = [a for a, _ in res["ours"]], [a for a, _ in res["ref"]]
        ratios = [a / b for a, b in zip(o, r, strict=True)]
        ow, rw = [b for _, b in res["ours"]], [b for _, b in res["ref"]]
        row = {"size": label, "L/d": f"{n_layer}/{d_model}",
               "N": f"{flops.params_total(cfg):,}",
               "trainer tok/s": f"{bl.median(o):,.0f} ({bl.spread(o)})",
               "reference tok/s": f"{bl.median(r):,.0f} ({bl.spread(r)})",
               "ratio (per round)": f"{bl.median(ratios):.2f}x ("
                                    + ", ".join(f"{x:.2f}" for x in ratios) + ")",
               "ratio, wall clock": f"{bl.median(ow) / bl.median(rw):.2f}x"}
        rows.append(row)
        print("  " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    print()
    print(bl.table(rows, list(rows[0])))
    worst = min(float(r["ratio (per round)"].split("x")[0]) for r in rows)
    print(f"\ntrainer faster than the reference at every size: {'yes' if worst > 1 else 'NO'} "
          f"(smallest ratio {worst:.2f}x); load average {bl.loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
