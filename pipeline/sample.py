"""`python -m pipeline.sample --run-id ID --prompt TEXT`: text from a finished run's checkpoint.

The run is found in MLflow by its run_id tag (in any experiment); its resolved spec
(spec.json artifact) rebuilds the model and the tokenizer, and the checkpoint folder recorded
on the run (tag checkpoint_dir) provides the weights.

A ledger may come from someone else (pipeline.ledger unpack), so what its spec says is not
trusted as the user's word: the byte tokenizer needs no data, and the others are rebuilt
from the run's corpus only when that is one of this machine's built-in corpora (stdlib,
stdlib+tests, site-packages, images:digits) or the user names it too (--corpus, equal to the
recorded one). A recorded path or dataset is never read on the ledger's word alone.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from pathlib import Path

import torch

from pipeline import checkpoint
from pipeline.data import DataError, load_data
from pipeline.data.tokenizers import ByteTokenizer, Tokenizer
from pipeline.estimate.memory import GIB, HEADROOM
from pipeline.model import Transformer
from pipeline.train.checks import OneLineParser, OptionError, check_device, device_memory
from pipeline.train.passes import generate_text
from pipeline.vocab import flops, keys
from pipeline.vocab.families import FAMILY_REGISTRY, get_family
from pipeline.vocab.spec import STDLIB_CORPORA, RunSpec

TAG_CHECKPOINT_DIR = "checkpoint_dir"
BUILT_IN_CORPORA = (*STDLIB_CORPORA, "images:digits")
"""Corpora that name no path or download: this interpreter's sources, scikit-learn's digits."""
MAX_NEW_TOKENS = 10_000
"""50x the report's 200 (keys.SAMPLE_NEW_TOKENS), which take 0.1-1 s at this project's CPU
sizes (pipeline.train.passes.sample_tags): under a minute of forward passes. The text is for
a person to read; more is a typo."""
MAX_THREADS = 1024
"""Most torch threads a recorded run may ask the sampler for (exec.threads)."""


class SampleError(RuntimeError):
    pass


def sample_text(spec: RunSpec, checkpoint_dir: str | Path, prompt: str, *,
                max_new_tokens: int = keys.SAMPLE_NEW_TOKENS,
                temperature: float = keys.SAMPLE_TEMPERATURE,
                top_k: int | None = keys.SAMPLE_TOP_K, top_p: float | None = None,
                seed: int = keys.SAMPLE_SEED, device: str = "cpu") -> str:
    """The prompt followed by max_new_tokens sampled tokens, decoded to text."""
    kind = get_family(spec.model.family).objective
    if not kind.generates:
        able = " or ".join(n for n, f in FAMILY_REGISTRY.items() if f.objective.generates)
        raise SampleError(f"run {spec.run_id} is of family {spec.model.family!r}, "
                          f"{kind.described}, and does not generate text (sample a {able} run)")
    _check_fits(spec, torch.device(device))
    state = checkpoint.load_latest(checkpoint_dir, map_location=device)
    if state is None:
        raise SampleError(f"no usable checkpoint in {checkpoint_dir}")
    torch.set_num_threads(spec.exec.threads)  # as the run had: its own tag's text, exactly
    tokenizer = _tokenizer(spec)
    model = Transformer(spec.model).to(device)
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as e:  # RuntimeError: missing keys, other shapes
        raise SampleError(f"the checkpoint in {checkpoint_dir} does not hold the weights of "
                          f"run {spec.run_id}'s model: {str(e).splitlines()[0]}") from None
    return generate_text(model, tokenizer, prompt, max_new_tokens=max_new_tokens,
                         temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                         device=device)


def _tokenizer(spec: RunSpec) -> Tokenizer:
    """Bytes need no data (vocabulary 256, no training); the others are the token cache's,
    built from the run's corpus where it is not there yet."""
    if spec.data.tokenizer == "bytes":
        return ByteTokenizer()
    return load_data(spec.data).tokenizer()


def _check_fits(spec: RunSpec, device: torch.device) -> None:
    """A recorded spec is data: refuse a model whose weights (fp32, twice: the model and the
    checkpoint's copy, 8 bytes a parameter) would not fit in HEADROOM of the device's memory,
    and a thread count torch cannot take, before anything is allocated."""
    threads = spec.exec.threads
    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= MAX_THREADS:
        raise SampleError(f"run {spec.run_id} records exec.threads={threads!r}: not a thread "
                          f"count in [1, {MAX_THREADS}]")
    need = 8.0 * flops.params_total(spec.model)
    have, what = device_memory(device)
    if need > HEADROOM * have:
        raise SampleError(f"run {spec.run_id}'s model (N={flops.params_total(spec.model):,}) "
                          f"needs ~{need / GIB:,.1f} GiB to sample, more than {HEADROOM:.0%} "
                          f"of the {have / GIB:,.1f} GiB of {what}")


def check_corpus(spec: RunSpec, named: str | None) -> None:
    """Refuse to read a corpus that only the ledger names (see the module doc): the run's
    data.corpus is read only if its tokenizer needs data and the corpus is built in or is
    `named` (--corpus), which must equal the recorded one."""
    recorded = spec.data.corpus
    if named is not None and _normal(named) != _normal(recorded):
        raise SampleError(f"--corpus {named!r} is not the corpus run {spec.run_id} was "
                          f"trained on ({recorded!r}, as its ledger records it)")
    if named is not None or spec.data.tokenizer == "bytes" or recorded in BUILT_IN_CORPORA:
        return
    raise SampleError(
        f"run {spec.run_id}'s {spec.data.tokenizer} tokenizer is rebuilt from its corpus "
        f"{recorded!r}, which only its ledger names; pipeline.sample reads a corpus a ledger "
        f"names only when you name it too: add --corpus {shlex.quote(recorded)} to allow it")


def _normal(corpus: str) -> str:
    """A corpus as load_data reads it, to compare two spellings: a local path made absolute
    (against this folder, as load_data does, without touching the file system); named
    corpora and datasets as they are."""
    if corpus in BUILT_IN_CORPORA or corpus.startswith(("hf:", "images:hf:")):
        return corpus
    prefix = "images:folder:" if corpus.startswith("images:folder:") else ""
    path = corpus.removeprefix(prefix) if prefix else corpus.removeprefix("path:")
    return prefix + os.path.abspath(os.path.expanduser(path))


def find_run(run_id: str, tracking_uri: str | None = None) -> tuple[RunSpec, str]:
    """(spec, checkpoint_dir) of the MLflow child run tagged run_id."""
    from mlflow import MlflowClient

    from pipeline.tracking import default_tracking_uri
    from pipeline.vocab.store import missing_store

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
    try:
        spec = RunSpec.from_dict(json.loads(Path(local).read_text()))
    except (KeyError, TypeError, ValueError) as e:  # ValueError: JSON, ShapeError
        raise SampleError(f"run {run_id}'s {keys.SPEC_ARTIFACT} is not a run spec: "
                          f"{type(e).__name__}: {e}") from None
    # Runs record their checkpoint folder; older ones used the default layout under cwd.
    ckpt = run.data.tags.get(TAG_CHECKPOINT_DIR) or str(
        Path("checkpoints") / spec.sweep / spec.run_id)
    return spec, ckpt


def _quote(value: str) -> str:
    if not value.isalnum():
        raise SampleError(f"run_id must be alphanumeric, got {value!r}")
    return value


def check_options(*, prompt: str, max_new_tokens: int, temperature: float, top_k: int,
                  top_p: float | None, seed: int) -> None:
    """The sampling options, before the store is read: OptionError naming the option."""
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 in argv arrive as surrogates
        raise OptionError(f"--prompt {prompt!r}: not UTF-8 text") from None
    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise OptionError(f"--max-new-tokens {max_new_tokens}: must be in [1, "
                          f"{MAX_NEW_TOKENS:,}] (pipeline/sample.py: MAX_NEW_TOKENS)")
    # 0 is greedy decoding (Transformer.generate); nan or inf would make no distribution.
    if not (math.isfinite(temperature) and temperature >= 0):
        raise OptionError(f"--temperature {temperature:g}: must be a finite number >= 0 "
                          "(0: greedy)")
    if top_k < 0:
        raise OptionError(f"--top-k {top_k}: must be >= 0 (0: no top-k filter)")
    if top_p is not None and not 0.0 < top_p <= 1.0:  # also refuses nan
        raise OptionError(f"--top-p {top_p:g}: must be in (0, 1]")
    if not -(2**63) <= seed < 2**64:  # what torch.Generator.manual_seed takes
        raise OptionError(f"--seed {seed}: must be in [-2**63, 2**64 - 1]")


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m pipeline.sample", description=__doc__)
    p.add_argument("--run-id", required=True)
    p.add_argument("--prompt", default=keys.SAMPLE_PROMPT)
    p.add_argument("--max-new-tokens", type=int, default=keys.SAMPLE_NEW_TOKENS)
    p.add_argument("--temperature", type=float, default=keys.SAMPLE_TEMPERATURE,
                   help="0: greedy (default %(default)s)")
    p.add_argument("--top-k", type=int, default=keys.SAMPLE_TOP_K,
                   help="0: no top-k filter (default %(default)s)")
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=keys.SAMPLE_SEED)
    p.add_argument("--device", default="cpu", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--corpus", default=None,
                   help="allow reading the run's corpus (it must equal the one its ledger "
                        "records): needed for a chars or bpe run whose corpus is a path or a "
                        "dataset, never for built-in corpora or the bytes tokenizer")
    args = p.parse_args(argv)
    # No progress bar for the one small spec file: stderr is for the one error line, if any.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        check_options(prompt=args.prompt, max_new_tokens=args.max_new_tokens,
                      temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                      seed=args.seed)
        device = check_device(args.device)
        spec, ckpt = find_run(args.run_id, args.tracking_uri)
        check_corpus(spec, args.corpus)
        text = sample_text(spec, ckpt, args.prompt, max_new_tokens=args.max_new_tokens,
                           temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                           seed=args.seed, device=str(device))
    except (SampleError, OptionError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
