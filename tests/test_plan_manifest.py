"""The plan manifest (pipeline.vocab.manifest) and the analysis reading it from a ledger.

A sweep's parent run carries plan.json, the plan of its last launch: the analysis keeps the
runs it lists (the others, of an earlier version of the file, are excluded and named) and
reads C in its FLOP convention, without the sweep file; a ledger without one gets the
convention its runs recorded. A plan.json that is not one this code writes is one error line.
The ledgers here are written in-process, a few runs each, without training.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from analysis.errors import DataError
from analysis.runs.load import NOT_IN_PLAN, load_sweep
from pipeline.vocab import keys
from pipeline.vocab.manifest import (
    ManifestError,
    PlanManifest,
    PlannedRun,
    manifest_from_dict,
)

ROOT = Path(__file__).resolve().parents[1]
BUDGETS = (1e12, 4e12, 1.6e13)
SIZES = (1e5, 4e5, 1.6e6)
SWEEP_TEXT = b"name: demo\n# the sweep file whose bytes the plan's sha256 names\n"
SHA = hashlib.sha256(SWEEP_TEXT).hexdigest()
PLANNED = tuple(f"p{b}{s}" for b in range(len(BUDGETS)) for s in range(len(SIZES)))


def _manifest(sweep: str = "demo", ids: tuple[str, ...] = PLANNED) -> PlanManifest:
    runs = tuple(PlannedRun(r, keys.ROLE_MAIN, BUDGETS[int(r[1]) if r[1].isdigit() else 0],
                            "gpt") for r in ids)
    return PlanManifest(sweep, SHA, "exact", runs)


# --------------------------------------------------------------------------- the format


def test_a_manifest_round_trips_through_json() -> None:
    plan = _manifest().with_runs([PlannedRun("h0", keys.ROLE_HOLDOUT, 6.4e13, "gpt")])
    back = manifest_from_dict(json.loads(json.dumps(plan.to_dict())), "plan.json")
    assert back == plan
    assert back.role_of("h0") == keys.ROLE_HOLDOUT and len(back.holdout()) == 1
    assert back.run_ids == frozenset(PLANNED) | {"h0"}


def _edit(path: tuple, value: object) -> dict:
    d = _manifest().to_dict()
    target = d
    for part in path[:-1]:
        target = target[part]
    if value is _DROP:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return d


_DROP = object()


@pytest.mark.parametrize(("path", "value", "named"), [
    (("sweep_sha256",), "abc", "field 'sweep_sha256'"),
    (("flops_convention",), "7nd", "field 'flops_convention'"),
    (("runs", 1, "role"), "fitted", "runs[1]: field 'role'"),
    (("runs", 2, "budget"), -1.0, "runs[2]: field 'budget'"),
    (("runs", 0, "run_id"), _DROP, "runs[0]: no field 'run_id'"),
    (("runs", 0, "run_id"), "../etc", "runs[0]: field 'run_id'"),
    (("runs", 1, "run_id"), "p00", "a run_id is listed twice"),
    (("runs",), "all", "field 'runs'"),
    (("version",), 2, "version"),
])
def test_a_bad_field_is_refused_by_name(path: tuple, value: object, named: str) -> None:
    with pytest.raises(ManifestError, match="^plan.json: .*" + named.replace("[", r"\[")
                       .replace("]", r"\]")):
        manifest_from_dict(_edit(path, value), "plan.json")


# --------------------------------------------------------------------------- a ledger


def _trial(client, exp: str, run_id: str, n: float, budget: float, *,
           convention: str | None) -> None:
    """A finished child run as pipeline.tracking writes it, C = 7ND under exact."""
    from mlflow.entities import Metric, Param

    d = budget / (6 * n)
    run = client.create_run(exp, run_name=f"gpt-{run_id}", tags={
        keys.TAG_KIND: "trial", keys.TAG_RUN_ID: run_id, keys.TAG_FAMILY: "gpt",
        keys.TAG_BUDGET: f"{budget:.6g}", keys.TAG_STATUS: keys.STATUS_FINISHED})
    loss = 1.5 + 300 * n ** -0.3 + 300 * d ** -0.3
    metrics = {keys.FINAL_VAL_LOSS: loss, keys.FINAL_TOKENS: d, keys.PARAMS_TOTAL: n,
               keys.PARAMS_NON_EMBEDDING: 0.8 * n, keys.flops_key("6nd"): 6 * n * d,
               keys.flops_key("exact"): 7 * n * d}
    params = [] if convention is None else [Param("flops_convention", convention)]
    client.log_batch(run.info.run_id, metrics=[Metric(k, float(v), 0, 0)
                                               for k, v in metrics.items()], params=params)
    client.set_terminated(run.info.run_id, status="FINISHED")


def _sweep(client, root: Path, name: str, *, plan: object = None,
           conventions: tuple[str | None, ...] = ("exact",), stale: int = 0) -> None:
    """Experiment ``name``: its parent run (with ``plan`` as plan.json: a dict, or bytes
    written as they are), 9 runs p<b><s>, and ``stale`` finished runs of no plan."""
    exp = client.create_experiment(name, artifact_location=(root / name).as_uri())
    parent = client.create_run(exp, tags={keys.TAG_KIND: "sweep", keys.TAG_SWEEP: name})
    if isinstance(plan, dict):
        client.log_dict(parent.info.run_id, plan, keys.PLAN_ARTIFACT)
    elif isinstance(plan, bytes):
        client.log_text(parent.info.run_id, plan.decode("latin-1"), keys.PLAN_ARTIFACT)
    for i, run_id in enumerate(PLANNED):
        _trial(client, exp, run_id, SIZES[int(run_id[2])], BUDGETS[int(run_id[1])],
               convention=conventions[i % len(conventions)])
    for i in range(stale):
        _trial(client, exp, f"old{i}", SIZES[i % 3], BUDGETS[0], convention="6nd")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("ledger")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    _sweep(client, root, "demo", plan=_manifest().to_dict(), conventions=("6nd",), stale=2)
    _sweep(client, root, "recorded", conventions=("exact",))
    _sweep(client, root, "mixed", conventions=("exact", "6nd"))
    _sweep(client, root, "corrupt", plan=b'{"format": "scaling-plan", "version": 1, ')
    bad = _manifest("badfield").to_dict()
    bad["runs"][3]["budget"] = "lots"
    _sweep(client, root, "badfield", plan=bad)
    _sweep(client, root, "elsewhere", plan=_manifest("elsewhere", ("q1", "q2")).to_dict())
    return uri


def test_the_ledgers_plan_keeps_its_runs_and_its_convention(store: str) -> None:
    messages: list[str] = []
    data = load_sweep("demo", tracking_uri=store, with_curves=False, log=messages.append)
    runs = data.runs
    assert data.plan == _manifest() and runs.plan == _manifest()
    assert sorted(runs.frame["run_id"]) == sorted(PLANNED)
    assert {e.run: e.reason for e in runs.excluded} == {"gpt-old0": NOT_IN_PLAN,
                                                       "gpt-old1": NOT_IN_PLAN}
    assert "plan.json" in NOT_IN_PLAN and "earlier version" in NOT_IN_PLAN
    # C is the plan's convention (exact), though these runs recorded 6nd and no file is given.
    assert runs.c_convention == "exact"
    assert (runs.frame["C"] == runs.frame["flops_exact"]).all()
    assert "9 finished runs; excluded 2" in messages[0]
    # An explicit convention always wins.
    sixnd = load_sweep("demo", tracking_uri=store, flops_convention="6nd", with_curves=False,
                       log=lambda _m: None).runs
    assert sixnd.c_convention == "6nd" and (sixnd.frame["C"] == sixnd.frame["flops_6nd"]).all()


def test_without_a_plan_the_runs_recorded_convention_is_used(store: str) -> None:
    quiet = {"tracking_uri": store, "with_curves": False, "log": lambda _m: None}
    data = load_sweep("recorded", **quiet)
    assert data.plan is None and data.runs.plan is None
    assert data.runs.c_convention == "exact"
    assert (data.runs.frame["C"] == data.runs.frame["flops_exact"]).all()
    # Runs that disagree (or record none) give Chinchilla's 6ND, as before the manifest.
    assert load_sweep("mixed", **quiet).runs.c_convention == "6nd"


def test_use_plan_false_reads_the_plan_and_keeps_every_run(store: str) -> None:
    data = load_sweep("demo", tracking_uri=store, with_curves=False, use_plan=False,
                      log=lambda _m: None)
    assert data.plan == _manifest() and data.runs.plan is None
    assert len(data.runs) == len(PLANNED) + 2 and data.runs.c_convention == "exact"


def test_a_plan_listing_none_of_the_runs_is_one_error(store: str) -> None:
    with pytest.raises(DataError, match=r"sweep 'elsewhere' is in the plan .*plan\.json"):
        load_sweep("elsewhere", tracking_uri=store, with_curves=False, log=lambda _m: None)


@pytest.mark.parametrize(("sweep", "why"), [
    ("corrupt", "not a JSON plan"),
    ("badfield", r"runs\[3\]: field 'budget' is 'lots'"),
])
def test_a_bad_plan_json_is_one_error_line_from_analysis_fit(store: str, sweep: str, why: str,
                                                             capsys) -> None:
    from analysis import fit
    from analysis.cli import run_main

    code = run_main(fit.main, ["--sweep", sweep, "--tracking-uri", store, "--bootstrap", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith(f"error: MLflow store {store}: sweep '{sweep}': plan.json")
    assert re.search(why, line), line


def test_sweep_file_view_replaces_the_ledgers_plan(store: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """--sweep-file: the runs the file plans now (analysis.cli.file_plan); a file whose plan
    needs its corpus keeps the ledger's plan when that was made from the same bytes."""
    from analysis import fit
    from analysis.cli import load_input

    sweep_file = tmp_path / "demo.yaml"
    sweep_file.write_bytes(SWEEP_TEXT)
    args = fit.parser().parse_args(["--sweep", "demo", "--tracking-uri", store, "--sweep-file",
                                    str(sweep_file), "--flops-convention", "exact"])
    every = _manifest(ids=(*PLANNED, "old0", "old1"))
    monkeypatch.setattr("pipeline.planned_view.sweep_file_manifest", lambda *_a: every)
    runs, _ = load_input(args, log=lambda _m: None)
    assert len(runs) == len(PLANNED) + 2 and runs.plan == every and not runs.excluded
    monkeypatch.setattr("pipeline.planned_view.sweep_file_manifest", lambda *_a: None)
    runs, _ = load_input(args, log=lambda _m: None)  # the same bytes: the ledger's plan
    assert runs.plan == _manifest() and len(runs) == len(PLANNED)
    sweep_file.write_bytes(SWEEP_TEXT + b"# edited\n")
    runs, _ = load_input(args, log=lambda _m: None)  # other bytes, no plan: every run
    assert runs.plan is None and len(runs) == len(PLANNED) + 2


def test_the_export_carries_the_plan(store: str, tmp_path: Path) -> None:
    from analysis.reporting.provenance import plan_lines
    from analysis.runs.export import read_export, to_json_dict, write_export

    runs = load_sweep("demo", tracking_uri=store, with_curves=False, log=lambda _m: None).runs
    path = tmp_path / "runs_export.json"
    write_export(path, runs, None, name="demo")
    back, _ = read_export(path)
    assert back.plan == runs.plan == _manifest()
    assert to_json_dict(back, None, "demo") == json.loads(path.read_text())
    (line,) = plan_lines(back)
    assert SHA in line and "9 planned runs" in line and "exact" in line
    # An export written before the plan reads as one without it; a bad plan is refused.
    obj = json.loads(path.read_text())
    del obj["plan"]
    path.write_text(json.dumps(obj))
    assert read_export(path)[0].plan is None and plan_lines(read_export(path)[0]) == []
    obj["plan"] = {**_manifest().to_dict(), "flops_convention": "9nd"}
    path.write_text(json.dumps(obj))
    with pytest.raises(DataError, match=r"field 'plan': field 'flops_convention'"):
        read_export(path)


def test_the_sweep_files_view_is_the_planners(tmp_path: Path) -> None:
    """pipeline.planned_view: the ids pipeline.planner plans, with roles and budgets; None where
    the plan depends on the corpus (chars); SweepError on a file that is no sweep."""
    from pipeline.config import SweepError
    from pipeline.config import load_sweep as load_file
    from pipeline.planned_view import sweep_file_manifest
    from pipeline.planner import planned_run_ids

    quickstart = ROOT / "sweeps" / "quickstart.yaml"
    plan = sweep_file_manifest(quickstart, [], SHA)
    cfg = load_file(quickstart)
    assert plan.run_ids == planned_run_ids(cfg, [], quickstart, 256)
    assert plan.sweep == "quickstart" and plan.flops_convention == cfg.flops_convention
    assert {r.budget for r in plan.runs} == set(cfg.isoflop.budgets)
    assert {r.role for r in plan.runs} == {keys.ROLE_MAIN}
    chars = tmp_path / "chars.yaml"
    chars.write_text(quickstart.read_text().replace("tokenizer: bytes", "tokenizer: chars"))
    assert sweep_file_manifest(chars, [], SHA) is None
    (tmp_path / "bad.yaml").write_text("name: x\nflops_convention: 7nd\n")
    with pytest.raises(SweepError, match="bad.yaml"):
        sweep_file_manifest(tmp_path / "bad.yaml", [], SHA)


def test_report_sweep_raises_instead_of_printing(store: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys) -> None:
    from analysis.report import report_sweep

    monkeypatch.chdir(tmp_path)
    lines: list[str] = []
    with pytest.raises(DataError, match="plan.json"):
        report_sweep("corrupt", store, corpus=None, log=lines.append)
    assert capsys.readouterr().out == "" and not (tmp_path / "reports").exists()
