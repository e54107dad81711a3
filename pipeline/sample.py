"""`python -m pipeline.sample --run-id ID --prompt TEXT`: text from a finished run's checkpoint.

The run is found in MLflow by its run_id tag (in any experiment); its resolved spec
(spec.json artifact) rebuilds the model and the tokenizer, and the checkpoint folder recorded
on the run (tag checkpoint_dir) provides the weights.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from pipeline import checkpoint, keys
from pipeline.data import load_data
from pipeline.families import objective
from pipeline.model import Transformer
from pipeline.spec import RunSpec
from pipeline.train import pick_device
from pipeline.train.passes import generate_text

TAG_CHECKPOINT_DIR = "checkpoint_dir"


class SampleError(RuntimeError):
    pass


def sample_text(spec: RunSpec, checkpoint_dir: str | Path, prompt: str, *,
                max_new_tokens: int = keys.SAMPLE_NEW_TOKENS,
                temperature: float = keys.SAMPLE_TEMPERATURE,
                top_k: int | None = keys.SAMPLE_TOP_K, top_p: float | None = None,
                seed: int = keys.SAMPLE_SEED, device: str = "cpu") -> str:
    """The prompt followed by max_new_tokens sampled tokens, decoded to text."""
    kind = objective(spec.model.family)
    if kind != "causal":
        what = ("a masked language model: it predicts masked tokens from both sides"
                if kind == "masked" else "an image classifier")
        raise SampleError(f"run {spec.run_id} is of family {spec.model.family!r}, {what}, and "
                          "does not generate text (sample a gpt or llama run)")
    state = checkpoint.load_latest(checkpoint_dir, map_location=device)
    if state is None:
        raise SampleError(f"no usable checkpoint in {checkpoint_dir}")
    torch.set_num_threads(spec.exec.threads)  # as the run had: its own tag's text, exactly
    data = load_data(spec.data)
    model = Transformer(spec.model).to(device)
    model.load_state_dict(state["model"])
    return generate_text(model, data.tokenizer(), prompt, max_new_tokens=max_new_tokens,
                         temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                         device=device)


def find_run(run_id: str, tracking_uri: str | None = None) -> tuple[RunSpec, str]:
    """(spec, checkpoint_dir) of the MLflow child run tagged run_id."""
    from mlflow import MlflowClient

    from pipeline.ledger.store import missing_store
    from pipeline.tracking import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    if problem := missing_store(uri):  # a read: never create a store
        raise SampleError(problem)
    client = MlflowClient(tracking_uri=uri)
    exp_ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exp_ids, f"tags.{keys.TAG_RUN_ID} = '{_quote(run_id)}'")
    if not runs:
        raise SampleError(f"no run with run_id {run_id!r} in {uri}")
    run = max(runs, key=lambda r: r.data.tags.get(keys.TAG_STATUS) == keys.STATUS_FINISHED)
    local = client.download_artifacts(run.info.run_id, keys.SPEC_ARTIFACT)
    spec = RunSpec.from_dict(json.loads(Path(local).read_text()))
    # Runs record their checkpoint folder; older ones used the default layout under cwd.
    ckpt = run.data.tags.get(TAG_CHECKPOINT_DIR) or str(
        Path("checkpoints") / spec.sweep / spec.run_id)
    return spec, ckpt


def _quote(value: str) -> str:
    if not value.isalnum():
        raise SampleError(f"run_id must be alphanumeric, got {value!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.sample", description=__doc__)
    p.add_argument("--run-id", required=True)
    p.add_argument("--prompt", default=keys.SAMPLE_PROMPT)
    p.add_argument("--max-new-tokens", type=int, default=keys.SAMPLE_NEW_TOKENS)
    p.add_argument("--temperature", type=float, default=keys.SAMPLE_TEMPERATURE)
    p.add_argument("--top-k", type=int, default=keys.SAMPLE_TOP_K)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=keys.SAMPLE_SEED)
    p.add_argument("--device", default="cpu")
    p.add_argument("--tracking-uri", default=None)
    args = p.parse_args(argv)
    try:
        spec, ckpt = find_run(args.run_id, args.tracking_uri)
        text = sample_text(spec, ckpt, args.prompt, max_new_tokens=args.max_new_tokens,
                           temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                           seed=args.seed, device=pick_device(args.device).type)
    except SampleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
