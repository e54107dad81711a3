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
import urllib.parse

from pipeline.vocab import flops, keys
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
# The UI on a local store, light: one web worker and no job runner (the default starts 15
# processes, 2.8 GB, 38 s to serve on 2 cores; this one 2 processes, 0.49 GB, 15 s: issue 55).
MLFLOW_UI_COMMAND = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow ui --workers 1"

# MLflow 3.x's runs page reads its filter and sort from the URL (searchFilter, orderByKey,
# ...: useExperimentPageSearchFacets' EXPERIMENT_PAGE_QUERY_PARAM_KEYS) and the table or
# chart view from compareRunsMode; no URL parameter selects its columns (selectedColumns is
# one only on the GenAI traces view). The columns are UI state: the browser's local storage,
# or a saved view, an experiment tag mlflow.sharedViewState.<key> that the URL names with
# viewStateShareKey=<key> (useSharedExperimentViewState; 3.17 lists them by name in its
# views menu). The UI skips a saved view when the URL carries a search facet, so a view's
# link carries its filter inside the view, not as searchFilter.
SHARED_VIEW_TAG_PREFIX = "mlflow.sharedViewState."
VIEW_COLUMNS = [f"params.`{k}`" for k in ("N", "D", "D_per_N", "shape", "C")] + [
    f"metrics.`{k}`" for k in (keys.FINAL_VAL_LOSS, keys.FINAL_WALL_S)]
"""The columns of a budget's view: size, tokens, tokens per parameter, shape, the run's
FLOPs, its final validation loss and its training wall time (the UI's Duration is not)."""


def runs_url(base: str, experiment_id: str, *, search_filter: str | None = None,
             chart: bool = False, view: str | None = None) -> str:
    """A link to a sweep's runs page in the model-training view (the workflowType parameter:
    MLflow 3.17's UI opens every experiment on its GenAI view unless told, whatever the
    experiment's kind tag says), optionally filtered (searchFilter, an MLflow search
    expression), in chart view (compareRunsMode=CHART) or on a saved view (its key)."""
    query = [("workflowType", "machine_learning")]
    if view is not None:
        query.append(("viewStateShareKey", view))
    if search_filter is not None:
        query.append(("searchFilter", search_filter))
    if chart:
        query.append(("compareRunsMode", "CHART"))
    return (f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?"
            + urllib.parse.urlencode(query, quote_via=urllib.parse.quote))


def budget_filter(budget: float) -> str:
    """The search expression of one IsoFLOP budget's runs: `params.C_budget = "1.5e+11"`."""
    return f'params.{PARAM_BUDGET} = "{budget:.6g}"'


def budget_view_key(budget: float) -> str:
    """The key of a budget's saved view: "budget-1.5e11" (tag keys take no "+")."""
    return f"budget-{sci(budget)}"


def budget_view(budget: float, created_ms: int, updated_ms: int) -> str:
    """The value of a budget's saved view tag, as MLflow 3.17's UI saves one (an envelope
    with its name and the view as a JSON string): that budget's runs, best loss first, the
    VIEW_COLUMNS, and the chart view's search on the token-axis curves (by_tokens/)."""
    state = {"searchFilter": budget_filter(budget),
             "orderByKey": f"metrics.`{keys.FINAL_VAL_LOSS}`", "orderByAsc": True,
             "selectedColumns": VIEW_COLUMNS,
             "chartsSearchFilter": keys.VAL_LOSS_BY_TOKENS.split("/")[0]}
    return json.dumps({"name": f"C={sci(budget)}", "createdAt": created_ms,
                       "updatedAt": updated_ms, "state": json.dumps(state)})


def ui_base(uri: str) -> str:
    """Where the UI of a tracking store serves: the server itself, or `mlflow ui`'s default."""
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else MLFLOW_UI_DEFAULT


def runs_page(uri: str, experiment_id: str) -> str:
    """Where to look at a sweep: the URL of its runs table, with the command that serves a
    local store (MLFLOW_UI_COMMAND)."""
    url = runs_url(ui_base(uri), experiment_id)
    if uri.startswith(("http://", "https://")):
        return f"open {url}"
    return f"{MLFLOW_UI_COMMAND} --backend-store-uri {uri}, then open {url}"


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
