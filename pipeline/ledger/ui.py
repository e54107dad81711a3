"""How a run reads in the MLflow UI: its name, the few params that say what it is, and its
corpus as a dataset. Pure functions of the RunSpec (and the loaded tokens); pipeline.tracking
turns them into MLflow entities. Nothing here enters run_id: names and these params can be
improved without touching the ledger's identity.

The UI is where researchers compare runs, so the budget, N, D and the shape are in the name
(runs of one IsoFLOP budget sort together and read apart at a glance) and in short params
(columns of the runs table, axes of its scatter and parallel-coordinate charts).
"""

from __future__ import annotations

import json

from pipeline.vocab import flops
from pipeline.vocab.families import DEFAULT_FAMILY
from pipeline.vocab.spec import RunSpec

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
"""The experiment tag MLflow 3's UI reads to open an experiment as model training (runs
table and charts) rather than on its GenAI traces overview."""
EXPERIMENT_KIND = "custom_model_development"

# Param keys of summary_params(): short, so they read as runs-table columns.
PARAM_BUDGET = "C_budget"  # planned IsoFLOP budget (FLOPs), "" outside an isoflop cell
PARAM_C = "C"  # training FLOPs of the run under the sweep's convention (flops_convention)
PARAM_C_6ND = "C_6ND"  # 6 N D (Kaplan/Chinchilla's approximation), for any convention
PARAM_N = "N"  # all parameters (Chinchilla's convention)
PARAM_N_NON_EMBEDDING = "N_non_embedding"  # Kaplan's convention
PARAM_D = "D"  # training tokens
PARAM_D_PER_N = "D_per_N"  # tokens per parameter (Chinchilla's ~20 at the optimum)
PARAM_SHAPE = "shape"  # L<layers>-d<width>
PARAM_FAMILY = "family"

MLFLOW_UI_DEFAULT = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default


def runs_page(uri: str, experiment_id: str) -> str:
    """Where to look at a sweep: the URL of its runs table in the model-training view (the
    workflowType parameter: MLflow 3.17's UI opens every experiment on its GenAI view unless
    told, whatever the experiment's kind tag says), with the command that serves a local
    store."""
    page = f"#/experiments/{experiment_id}/runs?workflowType=machine_learning"
    if uri.startswith(("http://", "https://")):
        return f"open {uri.rstrip('/')}/{page}"
    return f"mlflow ui --backend-store-uri {uri}, then open {MLFLOW_UI_DEFAULT}/{page}"


def si(x: float) -> str:
    """A count with two significant digits and an SI suffix: 9540 -> "9.5k", 1.2e6 -> "1.2M"."""
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.2g}{suffix}" if x / div < 10 else f"{x / div:.0f}{suffix}"
    return f"{x:.0f}"


def sci(x: float) -> str:
    """A budget with three significant digits, exponent without "+": 1.26e13, 6e10."""
    mantissa, _, exponent = f"{x:.3g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def shape(spec: RunSpec) -> str:
    return f"L{spec.model.n_layer}-d{spec.model.d_model}"


def run_name(spec: RunSpec) -> str:
    """"C=1.5e11 N=9.5k L1-d16 547101" for an IsoFLOP cell, "D=2.0M N=9.5k L1-d16 547101"
    otherwise: budget (or D), N and shape first, so the runs of one budget sort together and
    read apart; then the family when not the default (GPT), the seed when not 0, the share of
    the train split when below 1 ("split0.5"), the role when held out,
    and the first 6 characters of run_id, so that names stay unique where runs differ only
    in the recipe (an LR variant) and match the plan's and the ledger's run ids."""
    n = si(flops.params_total(spec.model))
    head = f"C={sci(spec.budget)}" if spec.budget is not None else f"D={si(spec.tokens)}"
    parts = [head, f"N={n}", shape(spec)]
    if spec.model.family != DEFAULT_FAMILY:
        parts.append(spec.model.family)
    if spec.train.seed:
        parts.append(f"seed{spec.train.seed}")
    if spec.train.batch_seed != spec.train.seed:
        parts.append(f"data{spec.train.batch_seed}")
    if spec.data.train_fraction < 1:  # isoflop.repeats: the same cell on part of the split
        parts.append(f"split{spec.data.train_fraction:g}")
    if spec.role != "main":
        parts.append(spec.role)
    return " ".join([*parts, spec.run_id[:6]])


def summary_params(spec: RunSpec) -> dict[str, str]:
    """Budget, C, N (both conventions), D, D/N, shape and family as short params, formatted
    so the UI sorts them as numbers (MLflow params are strings; these are plain decimals or
    exponents that its column sort and charts parse)."""
    n = flops.params_total(spec.model)
    d = spec.tokens
    return {
        PARAM_BUDGET: "" if spec.budget is None else f"{spec.budget:.6g}",
        PARAM_C: f"{flops.training_flops(spec.model, d, spec.flops_convention):.6g}",
        PARAM_C_6ND: f"{6.0 * n * d:.6g}",
        PARAM_N: str(n),
        PARAM_N_NON_EMBEDDING: str(flops.params_non_embedding(spec.model)),
        PARAM_D: str(d),
        PARAM_D_PER_N: f"{d / n:.4g}",
        PARAM_SHAPE: shape(spec),
        PARAM_FAMILY: spec.model.family,
    }


def dataset(spec: RunSpec, fingerprint: str, train_tokens: int, val_tokens: int,
            train_bytes: int) -> dict[str, str]:
    """The corpus a run trains on as an MLflow dataset (name, digest, source_type, source, profile): the
    UI's Dataset column. The digest is the data fingerprint (corpus + tokenizer + split), cut
    to the 36 characters MLflow stores; the full one is the run's data_fingerprint tag."""
    d = spec.data
    kind = "hf" if d.corpus.startswith("hf:") else "local"
    source = {"corpus": d.corpus, "tokenizer": d.tokenizer, "val_fraction": d.val_fraction,
              "max_bytes": d.max_bytes}
    if d.tokenizer == "bpe":
        source["bpe_vocab_size"] = d.bpe_vocab_size
    if d.train_fraction < 1:  # the profile's train_tokens and bytes are then the run's share
        source["train_fraction"] = d.train_fraction
    profile = {"train_tokens": train_tokens, "val_tokens": val_tokens,
               "train_bytes": train_bytes, "vocab_size": spec.model.vocab_size}
    name = d.corpus if spec.model.is_image else f"{d.corpus} ({d.tokenizer})"
    if d.train_fraction < 1:  # its own dataset: MLflow keeps one per (name, digest)
        name += f", train_fraction {d.train_fraction:g}"
    return {"name": name, "digest": fingerprint[:36],
            "source_type": kind, "source": json.dumps(source, sort_keys=True),
            "profile": json.dumps(profile, sort_keys=True)}
