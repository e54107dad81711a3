"""Loading runs: a synthetic MLflow sweep (written here the way pipeline.tracking writes
one) and CSV files of published data, including every kind of malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.errors import DataError
from analysis.runs.load import load_sweep
from analysis.runs.synthetic import ChinchillaLaw
from pipeline.vocab import keys

# A = B and alpha = beta: N_opt = sqrt(C/6), inside SIZES at every budget.
LAW = ChinchillaLaw(E=1.5, A=300.0, B=300.0, alpha=0.3, beta=0.3)
BUDGETS = (1e12, 4e12, 1.6e13)
SIZES = (1e5, 2e5, 4e5, 8e5, 1.6e6, 3.2e6)  # params_total; non-embedding is 80% of it


def _log_run(client, experiment_id, parent_id, *, run_id, n, budget, status="finished",
             mlflow_status="FINISHED", tags=None, artifact=True, loss_scale=1.0,
             inline=False):
    """One child run as pipeline.tracking writes it: tags, params, summary, curve."""
    from mlflow.entities import Metric, Param
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    d = budget / (6 * n)
    run = client.create_run(experiment_id, run_name=f"gpt-{run_id}", tags={
        keys.TAG_KIND: "trial", keys.TAG_SWEEP: "demo", keys.TAG_RUN_ID: run_id,
        keys.TAG_FAMILY: "gpt", keys.TAG_BUDGET: f"{budget:.6g}", keys.TAG_STATUS: status,
        MLFLOW_PARENT_RUN_ID: parent_id, **(tags or {}),
    })
    rid = run.info.run_id
    tokens = np.linspace(d / 8, d, 8)
    loss = LAW.loss(np.full(8, n), tokens) * loss_scale
    history = [Metric(keys.VAL_LOSS, float(v), 0, s) for s, v in enumerate(loss, 1)]
    history += [Metric(keys.TOKENS, float(t), 0, s) for s, t in enumerate(tokens, 1)]
    summary = {keys.FINAL_VAL_LOSS: loss[-1], keys.FINAL_TOKENS: d, keys.PARAMS_TOTAL: n,
               keys.PARAMS_NON_EMBEDDING: 0.8 * n, keys.flops_key("6nd"): 6 * n * d,
               keys.flops_key("6nd_non_embedding"): 6 * 0.8 * n * d,
               keys.flops_key("exact"): 7 * n * d}
    client.log_batch(rid, metrics=history + [Metric(k, float(v), 0, 0)
                                             for k, v in summary.items()],
                     params=[Param("model.n_layer", "2"), Param("model.d_model", "32"),
                             Param("model.n_heads", "4"), Param("model.vocab_size", "256"),
                             Param("model.seq_len", "64")])
    if artifact:
        client.log_dict(rid, {"step": list(range(1, 9)), "tokens": tokens.tolist(),
                              "val_loss": loss.tolist()}, keys.CURVE_ARTIFACT)
    if inline:  # the curve as a tag, as pipeline.trial writes it
        from pipeline.trial import curve_tag

        client.set_tag(rid, keys.TAG_CURVE, curve_tag({
            "step": list(range(1, 9)), "tokens": tokens.tolist(), "val_loss": loss.tolist()}))
    client.set_terminated(rid, status=mlflow_status)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("demo", artifact_location=(root / "artifacts").as_uri())
    parent = client.create_run(exp, tags={keys.TAG_KIND: "sweep", keys.TAG_SWEEP: "demo"})
    for b, budget in enumerate(BUDGETS):
        for s, n in enumerate(SIZES):
            # One run without the curve artifact: the loader falls back to metric history;
            # one with the curve as a tag only: the loader reads it without a download.
            _log_run(client, exp, parent.info.run_id, run_id=f"b{b}s{s}", n=n, budget=budget,
                     artifact=(b, s) not in ((0, 0), (0, 2)), inline=(b, s) == (0, 2))
    _log_run(client, exp, parent.info.run_id, run_id="div", n=2e5, budget=BUDGETS[0],
             status="diverged", tags={keys.TAG_DIVERGED_STEP: "120"})
    _log_run(client, exp, parent.info.run_id, run_id="oom", n=2e5, budget=BUDGETS[1],
             status="failed", mlflow_status="FAILED", tags={keys.TAG_ERROR: "out of memory"})
    _log_run(client, exp, parent.info.run_id, run_id="live", n=2e5, budget=BUDGETS[2],
             status="finished", mlflow_status="RUNNING")
    return uri


@pytest.fixture(scope="module")
def sweep(store):
    messages: list[str] = []
    data = load_sweep("demo", tracking_uri=store, log=messages.append)
    return data, messages


def test_finished_runs_are_loaded_and_others_excluded_by_name(sweep):
    data, messages = sweep
    assert len(data.runs) == len(BUDGETS) * len(SIZES)
    reasons = {e.run: e.reason for e in data.runs.excluded}
    assert reasons == {
        "gpt-div": "diverged at step 120",
        "gpt-oom": "failed: out of memory",
        "gpt-live": "MLflow status RUNNING (unfinished)",
    }
    summary = messages[0]
    assert "18 finished runs; excluded 3" in summary
    for name in ("gpt-div", "gpt-oom", "gpt-live"):
        assert name in summary


def test_run_columns_follow_the_contract(sweep):
    frame = sweep[0].runs.frame.set_index("run_id")
    row = frame.loc["b1s2"]
    n, budget = SIZES[2], BUDGETS[1]
    assert row["N"] == n and row["N_kaplan"] == pytest.approx(0.8 * n)
    assert row["D"] == pytest.approx(budget / (6 * n))
    assert row["C"] == pytest.approx(budget)  # the 6nd convention by default
    assert row["C_kaplan"] == pytest.approx(0.8 * budget)
    assert row["flops_exact"] == pytest.approx(7 / 6 * budget)
    assert row["budget"] == budget and row["family"] == "gpt"
    assert (row["n_layer"], row["vocab_size"], row["seq_len"]) == (2, 256, 64)
    assert sweep[0].runs.has_kaplan_conventions


def test_flops_convention_picks_the_metric(store):
    data = load_sweep("demo", tracking_uri=store, flops_convention="exact",
                      with_curves=False, log=lambda _: None)
    frame = data.runs.frame
    np.testing.assert_allclose(frame["C"], 7 * frame["N"] * frame["D"])
    assert data.curves is None and data.runs.c_convention == "exact"


def test_curves_come_from_the_artifact_or_the_metric_history(sweep):
    curves = sweep[0].curves
    assert set(curves["run_id"]) == set(sweep[0].runs.frame["run_id"])
    from_history = curves[curves["run_id"] == "b0s0"].sort_values("step")
    from_artifact = curves[curves["run_id"] == "b0s1"].sort_values("step")
    assert len(from_history) == len(from_artifact) == 8
    d = BUDGETS[0] / (6 * SIZES[0])
    np.testing.assert_allclose(from_history["tokens"], np.linspace(d / 8, d, 8))
    np.testing.assert_allclose(from_history["loss"].iloc[-1],
                               LAW.loss(np.array(SIZES[0]), np.array(d)))


def test_an_inline_curve_comes_with_the_run_and_needs_no_download(store, monkeypatch):
    from mlflow import MlflowClient

    downloads: list[str] = []
    real = MlflowClient.download_artifacts

    def counting(self, run_id, *args, **kwargs):
        downloads.append(run_id)
        return real(self, run_id, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "download_artifacts", counting)
    data = load_sweep("demo", tracking_uri=store, log=lambda _: None)
    inline = data.curves[data.curves["run_id"] == "b0s2"].sort_values("step")
    d = BUDGETS[0] / (6 * SIZES[2])
    np.testing.assert_allclose(inline["tokens"], np.linspace(d / 8, d, 8))
    np.testing.assert_allclose(inline["loss"].iloc[-1], LAW.loss(np.array(SIZES[2]), np.array(d)))
    assert len(downloads) == len(data.runs.frame) - 1  # every run but the inline one


def test_a_curve_too_long_for_a_tag_stays_an_artifact_only():
    from pipeline.trial import curve_tag

    short = {"step": [1, 2], "tokens": [128.0, 256.0], "val_loss": [5.5, 4.25], "lr": [1.0]}
    assert json.loads(curve_tag(short)) == {k: short[k] for k in ("step", "tokens", "val_loss")}
    steps = list(range(1, 400))
    long = {"step": steps, "tokens": [s * 1024.0 for s in steps],
            "val_loss": [1.0 + 1 / s for s in steps]}
    assert curve_tag(long) is None  # > keys.CURVE_TAG_MAX_CHARS: MLflow would refuse the tag


def test_unknown_sweep_names_the_store(store):
    with pytest.raises(DataError, match="no sweep \\(experiment\\) named 'nope'"):
        load_sweep("nope", tracking_uri=store, log=lambda _: None)


# --------------------------------------------------------------------------- commands


def test_fit_command_prints_the_json_schema(store, capsys):
    from analysis.fit import main

    assert main(["--sweep", "demo", "--tracking-uri", store, "--json", "--bootstrap", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "scaling-analysis/1" and out["n_runs"] == 18
    assert {e["run"] for e in out["excluded"]} == {"gpt-div", "gpt-oom", "gpt-live"}
    approaches = out["approaches"]
    assert {k: v["status"] for k, v in approaches.items()} == {
        "kaplan": "ok", "1": "ok", "2": "ok", "3": "ok", "interaction": "ok",
        "kaplan_joint": "ok", "quadratic": "ok", "data_constrained": "skipped",
        "data_constrained_interaction": "skipped"}  # no run repeats its data
    assert out["summary"]["headline"]["approach"] in ("3", "interaction", "kaplan_joint")
    three = approaches["3"]
    for name in ("E", "A", "B", "alpha", "beta", "a", "b"):
        assert isinstance(three[name], float)
        low, high = three["ci95"][name]
        assert low <= high
    assert approaches["2"]["a"] == pytest.approx(0.5, abs=0.05)  # alpha = beta
    assert len(approaches["2"]["budgets"]) == 3
    assert {row["source"] for row in out["comparison"]} >= {"Kaplan 2020", "Hoffmann 2022"}
    assert out["extrapolation"]["3"]["status"] == "ok"
    assert out["extrapolation"]["3"]["loss_mean_abs_rel_error"] < 1e-3  # noise-free runs
    # Without the largest of 3 budgets, Approach 2 has too few left: skipped, with why.
    assert "need at least 3" in out["extrapolation"]["2"]["reason"]


def test_predict_prints_a_sweep_file_that_the_pipeline_accepts(store, capsys):
    from analysis.predict import main
    from pipeline.config import parse_sweep

    assert main(["--sweep", "demo", "--tracking-uri", store, "--flops", "1e14", "--approach",
                 "3", "--bootstrap", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_opt"] == pytest.approx(np.sqrt(1e14 / 6), rel=0.3)  # the law's optimum
    low, high = out["ci95"]["loss_opt"]  # noise-free runs: a (nearly) zero-width interval
    assert low - 1e-9 <= out["loss_opt"] <= high + 1e-9
    shape = out["shape"]
    assert (shape["family"], shape["vocab_size"], shape["seq_len"], shape["head_dim"]) == (
        "gpt", 256, 64, 8)  # from the runs' params: d_model 32 / n_heads 4
    assert shape["tokens"] == pytest.approx(1e14 / (6 * shape["params_total"]))
    config = parse_sweep(out["snippet"], "snippet.yaml")
    assert config.kind == "runs" and config.family == "gpt"
    assert (config.runs[0].n_layer, config.runs[0].d_model) == (shape["n_layer"],
                                                                 shape["d_model"])


def test_fit_command_reports_an_unknown_sweep_in_one_line(store, capsys):
    from analysis.cli import run_main
    from analysis.fit import main

    assert run_main(main, ["--sweep", "nope", "--tracking-uri", store]) == 2
    assert capsys.readouterr().err.startswith("error: MLflow store")


# --------------------------------------------------------------------------- recipe columns


def test_seed_role_schedule_and_branch_come_from_params_and_tags(tmp_path):
    """Runs that record the recipe; the older runs of the fixture get the defaults."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("recipes", artifact_location=(tmp_path / "a").as_uri())
    cells = [("s0", 0, "cosine", {}), ("s1", 1, "cosine", {}),
             ("h0", 0, "cosine", {keys.TAG_ROLE: keys.ROLE_HOLDOUT}),
             ("w0", 0, "wsd", {keys.TAG_BRANCH_OF: "trunk", keys.TAG_BRANCH_STEP: "300"})]
    for run_id, seed, schedule, tags in cells:
        run = client.create_run(exp, tags={keys.TAG_KIND: "trial", keys.TAG_RUN_ID: run_id,
                                           keys.TAG_STATUS: "finished", **tags})
        summary = {keys.FINAL_VAL_LOSS: 3.0, keys.FINAL_TOKENS: 1e7, keys.PARAMS_TOTAL: 1e5,
                   keys.flops_key("6nd"): 6e12}
        client.log_batch(run.info.run_id,
                         metrics=[Metric(k, v, 0, 0) for k, v in summary.items()],
                         params=[Param("train.seed", str(seed)), Param("train.lr", "0.003"),
                                 Param("train.schedule", schedule)])
        client.set_terminated(run.info.run_id, status="FINISHED")
    frame = load_sweep("recipes", tracking_uri=uri, with_curves=False,
                       log=lambda _: None).runs.frame.set_index("run_id")
    assert frame.loc[["s0", "s1", "h0", "w0"], "seed"].tolist() == [0, 1, 0, 0]
    assert frame.loc[["s0", "h0"], "role"].tolist() == ["main", "holdout"]
    assert frame.loc["w0", "schedule"] == "wsd" and frame.loc["w0", "branch_of"] == "trunk"
    assert frame.loc["s0", "branch_of"] == "" and frame.loc["s0", "lr"] == 0.003


def test_a_ledger_without_the_recipe_gets_the_defaults(sweep):
    frame = sweep[0].runs.frame
    assert set(frame["seed"]) == {-1} and set(frame["role"]) == {"main"}
    assert set(frame["schedule"]) == {""} and set(frame["branch_of"]) == {""}
    assert frame["lr"].isna().all()


def test_c_is_the_sweep_files_convention_unless_the_command_names_one(tmp_path):
    import argparse

    from analysis.cli import flops_convention
    from pipeline.planned_view import SWEEP_FILE_VIEW

    def args(**kw):
        base = {"sweep": "demo", "sweep_file": None, "flops_convention": None,
                "sweep_file_view": SWEEP_FILE_VIEW}
        return argparse.Namespace(**{**base, **kw})

    sweeps = Path(__file__).resolve().parents[1] / "sweeps"
    assert flops_convention(args(sweep_file=str(sweeps / "chinchilla.yaml"))) == "exact"
    sixnd = tmp_path / "quickstart_6nd.yaml"
    sixnd.write_text((sweeps / "quickstart.yaml").read_text().replace(
        "flops_convention: exact", "flops_convention: 6nd"))
    assert flops_convention(args(sweep_file=str(sixnd))) == "6nd"
    assert flops_convention(args(sweep_file=str(sweeps / "chinchilla.yaml"),
                                 flops_convention="6nd")) == "6nd"
    assert flops_convention(args()) is None  # no file to ask: the ledger's (load_sweep)
    assert flops_convention(args(sweep=None, csv="x.csv")) == "6nd"  # Chinchilla's C = 6ND
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nflops_convention: 7nd\n")
    with pytest.raises(DataError, match="bad.yaml"):
        flops_convention(args(sweep_file=str(bad)))


def test_predict_writes_the_next_sweep_with_the_source_recipe(store, tmp_path, capsys,
                                                             monkeypatch):
    """--write: chinchilla.yaml's recipe (LR, batch and warmup rules, corpus, tokenizer,
    seq_len, shape rule, convention) at one new budget, sizes around the predicted N_opt."""
    from analysis.cli import run_main
    from analysis.predict import main
    from pipeline.config import load_sweep as load_sweep_file
    from pipeline.planner import expand

    # The synthetic runs are no plan of chinchilla.yaml: keep them all (restrict_to_plan is
    # tested in tests/test_sweep_options.py).
    monkeypatch.setattr("pipeline.planned_view.sweep_file_manifest", lambda *_a: None)
    source = Path(__file__).resolve().parents[1] / "sweeps" / "chinchilla.yaml"
    out = tmp_path / "next.yaml"
    args = ["--sweep", "demo", "--tracking-uri", store, "--sweep-file", str(source),
            "--flops", "2e13", "--approach", "3", "--bootstrap", "0", "--json", "--write",
            str(out)]
    assert main(args) == 0
    predicted = json.loads(capsys.readouterr().out)
    assert predicted["written"] == str(out)
    src, new = load_sweep_file(source), load_sweep_file(out)
    for section in ("family", "shape", "data", "train", "resources", "flops_convention"):
        assert getattr(new, section) == getattr(src, section), section
    assert new.name == "next" and new.kind == "isoflop"
    assert new.isoflop.budgets == [2e13] and new.isoflop.holdout is None
    assert new.isoflop.sizes.max_tokens_per_param == src.isoflop.sizes.max_tokens_per_param
    specs = expand(new, out, 256).specs
    assert specs and all(s.budget == 2e13 for s in specs)
    assert {(s.model.seq_len, s.model.d_model // s.model.n_heads) for s in specs} == {(128, 4)}
    assert {(s.data.corpus, s.data.tokenizer) for s in specs} == {("stdlib+tests", "bytes")}
    from pipeline.vocab import flops
    sizes = [flops.params_total(s.model) for s in specs]
    middle = np.sqrt(min(sizes) * max(sizes))
    # The ladder's rungs are discrete (d_model in steps of 4): the centre within 25%.
    assert middle == pytest.approx(predicted["n_opt"], rel=0.25)

    assert run_main(main, args) == 2  # never over an existing file
    assert "exists; --write never replaces a file" in capsys.readouterr().err
    assert run_main(main, [a for a in args if a not in ("--sweep-file", str(source))]) == 2
    assert "--write needs --sweep-file" in capsys.readouterr().err
    same = [a if a != str(out) else str(tmp_path / "chinchilla.yaml") for a in args]
    assert run_main(main, same) == 2
    assert "is the source itself" in capsys.readouterr().err
