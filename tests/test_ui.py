"""What a researcher sees in the MLflow UI, read back through a real `mlflow server`'s REST API.

The quickstart (sweeps/quickstart.yaml as shipped, its lowest budget only: 4 runs, its
recipe, names and params; the whole sweep cost 2-3 minutes of the suite) runs against a
tracking server started here, as docs/cluster.md starts one; then the REST API, which the UI itself calls, must give for every child run: a
name with the budget, N and shape; the summary params (C, N in both conventions, D, D/N,
shape, family); the corpus as a dataset input with its fingerprint; and the validation loss
against tokens (step = tokens), so the curves of one budget overlay. The experiment carries
the tag that marks it as model training.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from servers import MlflowServer

from pipeline.ledger import ui
from pipeline.vocab import flops, keys
from pipeline.vocab.spec import RunSpec

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"


def _get(base: str, path: str, **query: str) -> dict:
    url = f"{base}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=120) as r:
        return json.loads(r.read())


def _post(base: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"{base}/api/2.0/mlflow/{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """`mlflow server` on a free loopback port, artifacts proxied; stopped by its PID."""
    srv = MlflowServer(tmp_path / "server.db", tmp_path / "artifacts", tmp_path / "server.log")
    srv.start()
    try:
        yield srv.url
    finally:
        srv.stop()


@pytest.mark.slow
def test_the_quickstart_reads_back_through_a_real_tracking_server(
    server: str, tmp_path: Path
) -> None:
    doc = yaml.safe_load(QUICKSTART.read_text())
    doc["isoflop"]["budgets"] = doc["isoflop"]["budgets"][:1]
    sizes = len(doc["isoflop"]["sizes"]["shapes"])
    sweep = tmp_path / "quickstart.yaml"
    sweep.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "MLFLOW_TRACKING_URI": server}
    done = subprocess.run([sys.executable, "-m", "pipeline.sweep", str(sweep), "--no-report",
                           "--cpus", "2", "--no-estimate"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The link the sweep prints opens the runs table in the UI's model-training view.
    assert f"{server}/#/experiments/" in done.stdout
    assert "workflowType=machine_learning" in done.stdout

    exp = _get(server, "experiments/get-by-name", experiment_name="quickstart")["experiment"]
    exp_tags = {t["key"]: t["value"] for t in exp["tags"]}
    assert exp_tags[ui.EXPERIMENT_KIND_TAG] == ui.EXPERIMENT_KIND
    # A link per budget, after the runs table's: a saved view of that budget's runs (filter,
    # columns, best loss first) opened in chart view, as MLflow 3.17's UI saves one.
    (budget,) = doc["isoflop"]["budgets"]
    key = ui.budget_view_key(float(budget))
    link = ui.runs_url(server, exp["experiment_id"], view=key, chart=True)
    assert f"C=6e10, its runs against tokens: {link}" in done.stdout
    assert "viewStateShareKey=budget-6e10&compareRunsMode=CHART" in link
    saved = json.loads(exp_tags[ui.SHARED_VIEW_TAG_PREFIX + key])
    assert saved["name"] == "C=6e10" and isinstance(saved["createdAt"], int)
    view = json.loads(saved["state"])
    assert view["searchFilter"] == 'params.C_budget = "6e+10"'
    in_view = _post(server, "runs/search", {"experiment_ids": [exp["experiment_id"]],
                                            "filter": view["searchFilter"],
                                            "max_results": 100})["runs"]
    assert len(in_view) == sizes  # the budget's runs, not the sweep's parent run
    shown = {c.split(".", 1)[1].strip("`") for c in view["selectedColumns"]}
    logged = {p["key"] for p in in_view[0]["data"]["params"]} | \
        {m["key"] for m in in_view[0]["data"]["metrics"]}
    assert shown <= logged, shown - logged  # every column shows a value
    found = _post(server, "runs/search", {"experiment_ids": [exp["experiment_id"]],
                                          "filter": f"tags.{keys.TAG_KIND} = 'trial'",
                                          "max_results": 100})["runs"]
    assert len(found) == sizes == 4
    client = MlflowClient(tracking_uri=server)  # for the spec artifact only
    names = set()
    for run in found:
        info, data = run["info"], run["data"]
        params = {p["key"]: p["value"] for p in data["params"]}
        tags = {t["key"]: t["value"] for t in data["tags"]}
        assert info["status"] == "FINISHED"
        spec = RunSpec.from_dict(json.loads(Path(client.download_artifacts(
            info["run_id"], keys.SPEC_ARTIFACT, str(tmp_path))).read_text()))
        n = flops.params_total(spec.model)

        # The name: budget, N and shape, as the UI lists it.
        assert re.fullmatch(r"C=\d(\.\d+)?e\d+ N=\d+(\.\d)?k L\d-d\d+ [0-9a-f]{6}",
                            info["run_name"]), info["run_name"]
        assert info["run_name"] == ui.run_name(spec)
        names.add(info["run_name"])
        # Short params: the runs table's columns.
        assert float(params[ui.PARAM_BUDGET]) == float(tags[keys.TAG_BUDGET])
        assert int(params[ui.PARAM_N]) == n
        assert int(params[ui.PARAM_N_NON_EMBEDDING]) == flops.params_non_embedding(spec.model)
        assert int(params[ui.PARAM_D]) == spec.tokens
        assert float(params[ui.PARAM_D_PER_N]) == pytest.approx(spec.tokens / n, rel=1e-3)
        assert float(params[ui.PARAM_C]) == pytest.approx(
            flops.training_flops(spec.model, spec.tokens, "exact"), rel=1e-5)
        assert float(params[ui.PARAM_C_6ND]) == pytest.approx(6 * n * spec.tokens, rel=1e-5)
        assert params[ui.PARAM_SHAPE] == f"L{spec.model.n_layer}-d{spec.model.d_model}"
        assert params[ui.PARAM_FAMILY] == "gpt"
        # Not nested under the sweep run (the UI would hide it), but linked to it.
        assert "mlflow.parentRunId" not in tags and tags[keys.TAG_SWEEP_RUN]

        # The corpus as a dataset input, its digest the data fingerprint.
        inputs = run["inputs"]["dataset_inputs"]
        assert len(inputs) == 1, inputs
        dataset = inputs[0]["dataset"]
        assert dataset["name"] == "stdlib (bytes)"
        assert dataset["digest"] == tags[keys.TAG_DATA_FINGERPRINT][:36]
        assert json.loads(dataset["source"])["corpus"] == "stdlib"
        assert json.loads(dataset["profile"])["train_tokens"] > spec.tokens

        # The validation loss against tokens: the steps are token counts, the values the
        # val/loss of the optimizer-step axis, the last at D.
        by_tokens = _history(server, info["run_id"], keys.VAL_LOSS_BY_TOKENS)
        by_step = _history(server, info["run_id"], keys.VAL_LOSS)
        tokens_per_step = spec.train.batch_size * spec.model.seq_len
        # One every steps // evals_per_run steps (eval_budget may drop some), and the final.
        assert len(by_tokens) == len(by_step) >= spec.train.evals_per_run >= 2
        assert by_tokens == {s * tokens_per_step: v for s, v in by_step.items()}
        assert max(by_tokens) == spec.tokens
        train = _history(server, info["run_id"], keys.TRAIN_LOSS_BY_TOKENS)
        assert max(train) == spec.tokens and len(train) >= 2
    assert len(names) == sizes  # the names tell the runs apart
    # Each run was trained under a lease taken and given back through the server's API.
    assert not _get(server, "registered-models/search").get("registered_models")


def _history(base: str, run_id: str, key: str) -> dict[int, float]:
    points = _get(base, "metrics/get-history", run_id=run_id, metric_key=key)["metrics"]
    assert len({p["step"] for p in points}) == len(points), f"{key}: a step logged twice"
    return {int(p["step"]): p["value"] for p in points}


# --- the pure parts, without a server ---------------------------------------------------------

def _spec(**over) -> RunSpec:
    from pipeline.vocab.families import make_config
    from pipeline.vocab.spec import DataSpec, TrainSpec

    family = over.pop("family", "gpt")
    cfg = make_config(family, 2, 32, vocab_size=256, seq_len=128, head_dim=8)
    train = TrainSpec(batch_size=16, seed=over.pop("seed", 0))
    return RunSpec(sweep="s", model=cfg, data=DataSpec(), train=train, steps=100, **over)


def test_counts_and_budgets_print_short() -> None:
    assert [ui.si(x) for x in (512, 9456, 37760, 343_500, 1.2e6, 7.78e8)] == \
        ["512", "9.5k", "38k", "344k", "1.2M", "778M"]
    assert [ui.sci(x) for x in (6e10, 1.5e11, 1.26e13, 3.8e13)] == \
        ["6e10", "1.5e11", "1.26e13", "3.8e13"]


def test_run_names_differ_where_runs_do() -> None:
    n = ui.si(flops.params_total(_spec().model))
    a = _spec(budget=1.5e11)
    assert ui.run_name(a) == f"C=1.5e11 N={n} L2-d32 {a.run_id[:6]}"
    b = _spec()
    assert ui.run_name(b) == f"D=205k N={n} L2-d32 {b.run_id[:6]}"  # 100 x 16 x 128 tokens
    c = _spec(budget=1.5e11, seed=1, role="holdout")
    assert ui.run_name(c) == f"C=1.5e11 N={n} L2-d32 seed1 holdout {c.run_id[:6]}"
    assert " llama " in ui.run_name(_spec(budget=1.5e11, family="llama"))


def test_summary_params_are_the_counting_module_s_numbers() -> None:
    spec = _spec(budget=1.5e11, flops_convention="6nd")
    p = ui.summary_params(spec)
    n = flops.params_total(spec.model)
    assert int(p[ui.PARAM_N]) == n and int(p[ui.PARAM_D]) == spec.tokens == 204_800
    assert float(p[ui.PARAM_C]) == pytest.approx(6 * n * spec.tokens, rel=1e-5)  # 6nd
    assert float(p[ui.PARAM_BUDGET]) == 1.5e11
    assert ui.summary_params(_spec())[ui.PARAM_BUDGET] == ""
    assert "#/experiments/7/runs?workflowType=machine_learning" in ui.runs_page("sqlite:///x", "7")
    assert ui.runs_page("sqlite:///x", "7").startswith(f"{ui.MLFLOW_UI_COMMAND} --backend-store")
    assert ui.runs_page("http://h:5000/", "7") == \
        "open http://h:5000/#/experiments/7/runs?workflowType=machine_learning"


def test_one_link_builder_for_the_runs_page_and_a_budget_s_view() -> None:
    """pipeline.ledger.ui.runs_url builds every runs-page link (the sweep's, the screenshots'):
    the filter quoted as MLflow's UI reads it back, the chart view, a saved view's key."""
    url = ui.runs_url("http://h:5000/", "7", search_filter=ui.budget_filter(1.5e11), chart=True)
    page, _, query = url.partition("?")
    assert page == "http://h:5000/#/experiments/7/runs"
    assert urllib.parse.parse_qsl(query) == [
        ("workflowType", "machine_learning"), ("searchFilter", 'params.C_budget = "1.5e+11"'),
        ("compareRunsMode", "CHART")]
    assert ui.runs_url("http://h:5000", "7", view=ui.budget_view_key(1.5e11), chart=True) == (
        "http://h:5000/#/experiments/7/runs?workflowType=machine_learning"
        "&viewStateShareKey=budget-1.5e11&compareRunsMode=CHART")
    # The budget's param as the runs carry it (summary_params), so the filter matches them.
    assert ui.budget_filter(1.5e11) == \
        f'params.C_budget = "{ui.summary_params(_spec(budget=1.5e11))[ui.PARAM_BUDGET]}"'
    saved = json.loads(ui.budget_view(6e10, 1, 2))
    assert (saved["name"], saved["createdAt"], saved["updatedAt"]) == ("C=6e10", 1, 2)
    state = json.loads(saved["state"])
    assert state["searchFilter"] == 'params.C_budget = "6e+10"'
    assert state["chartsSearchFilter"] == "by_tokens"
    assert "metrics.`final/val_loss`" in state["selectedColumns"]
