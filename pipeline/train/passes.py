"""The forward passes of a step and of an evaluation: bf16 autocast, micro-batches, and the
validation loss (and vit's accuracy), each batch weighted by its count of targets
(pipeline.train.objective); and the text a finished model writes. Kept apart from the loop
(pipeline.train) so that the estimate (pipeline.estimate.calibration) and the benchmarks time
exactly the trainer's passes."""

from __future__ import annotations

import torch

from pipeline.train.objective import eval_weights, is_masked, target_count
from pipeline.vocab import keys
from pipeline.vocab.families import get_family
from pipeline.vocab.recipe import trained_precision
from pipeline.vocab.spec import RunSpec


def autocast_for(spec: RunSpec, device: torch.device):
    """bf16 autocast when the recipe asks for it, or for precision auto on a CUDA device."""
    use_bf16 = trained_precision(spec.train.precision, device.type) == "bf16"
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches, spec: RunSpec, device: torch.device) -> float:
    """Mean validation cross-entropy over the fixed eval batches: nats per token (causal), per
    masked token (masked) or per image (classify), each batch weighted by its count."""
    model.eval()
    total = torch.zeros((), device=device)
    weights = eval_weights(spec, batches)
    for (x, y), weight in zip(batches, weights, strict=True):
        for xs, ys, share in micro_batches(x, y, spec):
            with autocast_for(spec, device):
                _, loss = model(xs, ys)
            total += loss.float() * (share * weight)
    model.train()
    return (total / sum(weights)).item()


@torch.no_grad()
def accuracy(model: torch.nn.Module, batches, spec: RunSpec, device: torch.device) -> float:
    """classify: the share of validation images whose most likely class is the label."""
    model.eval()
    right = torch.zeros((), device=device)
    for x, y in batches:
        with autocast_for(spec, device):
            logits, _ = model(x)
        right += (logits.argmax(-1) == y).sum()
    model.train()
    return right.item() / sum(len(y) for _, y in batches)


def micro_batches(x: torch.Tensor, y: torch.Tensor, spec: RunSpec, *,
                  global_targets: int | None = None, workers: int = 1):
    """(x, y, share) per forward/backward pass: the whole batch, or exec.micro_batch_size
    rows at a time with share = rows / batch (causal: equal-length sequences) or the pass's
    share of the batch's targets (masked), so that the shares' weighted mean of the passes'
    mean losses is the batch's mean loss.

    Masked, on one of `workers` data-parallel workers holding these rows of a global batch
    with `global_targets` masked tokens: share = the pass's targets x workers /
    global_targets, so that DDP's mean over workers is the global batch's mean per masked
    token (not a mean of the workers' means)."""
    micro = spec.exec.micro_batch_size or len(x)
    passes = list(zip(x.split(micro), y.split(micro), strict=True))
    if is_masked(spec):
        counts = [target_count(ys) for _, ys in passes]
        total = sum(counts) if global_targets is None else global_targets / workers
        return [(xs, ys, c / total) for (xs, ys), c in zip(passes, counts, strict=True)]
    if micro >= len(x):
        return [(x, y, 1.0)]
    return [(xs, ys, len(xs) / len(x)) for xs, ys in passes]


@torch.no_grad()
def generate_text(model: torch.nn.Module, tokenizer, prompt: str, *, max_new_tokens: int,
                  temperature: float = keys.SAMPLE_TEMPERATURE,
                  top_k: int | None = keys.SAMPLE_TOP_K, top_p: float | None = None,
                  seed: int = keys.SAMPLE_SEED, device: torch.device | str = "cpu") -> str:
    """The prompt followed by max_new_tokens sampled tokens, decoded: what `python -m
    pipeline.sample` prints for a checkpoint and what a finished run tags (sample_tags)."""
    ids = tokenizer.encode(prompt) or [0]
    idx = torch.tensor([ids], dtype=torch.long, device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    out = model.generate(idx, max_new_tokens, temperature=temperature, top_k=top_k,
                         top_p=top_p, generator=gen)
    return tokenizer.decode(out[0].tolist())


def sample_tags(spec: RunSpec, model: torch.nn.Module, data, device: torch.device,
                workers: int) -> dict[str, str]:
    """The tags of a finished run's text (keys.TAG_SAMPLE): a causal model's continuation
    of keys.SAMPLE_PROMPT, sampled as `pipeline.sample` does by default. {} for a masked LM
    or a classifier (they do not generate) and for a data-parallel run (its weights may be
    sharded; the report samples its checkpoint instead). ~0.1-1 s at this project's CPU
    sizes: 200 forward passes of at most seq_len tokens."""
    if not get_family(spec.model.family).objective.generates or workers > 1:
        return {}
    text = generate_text(model, data.tokenizer(), keys.SAMPLE_PROMPT,
                         max_new_tokens=keys.SAMPLE_NEW_TOKENS, device=device)
    return {keys.TAG_SAMPLE: text[: keys.CURVE_TAG_MAX_CHARS],
            keys.TAG_SAMPLE_PROMPT: keys.SAMPLE_PROMPT}
