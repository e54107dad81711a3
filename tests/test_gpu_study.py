"""benchmarks/tools/gpu_study.py: a sweep trained without Ray or MLflow (the lent GPU machine has
neither), then imported into the ledger. On the CPU here with tiny.yaml: the runs it trains
are the sweep's planned runs, the import writes what the driver and trainer would (the
analysis reads them as a sweep), and importing twice adds nothing."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from analysis.runs.load import load_sweep as load_runs
from pipeline.config import load_sweep
from pipeline.planner import expand, planned_run_ids
from pipeline.vocab import keys

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "sweeps" / "tiny.yaml"
SCRIPT = ROOT / "benchmarks" / "tools" / "gpu_study.py"


def _script():
    spec = importlib.util.spec_from_file_location("gpu_study", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_runs_trained_without_ray_or_mlflow_import_as_the_sweeps_runs(tmp_path: Path,
                                                                        capsys) -> None:
    gs = _script()
    out = tmp_path / "out"
    # A process of its own, as on the GPU machine (its workers are spawned: they import the
    # script by path, which a module loaded from a file location in this process is not).
    done = subprocess.run([sys.executable, str(SCRIPT), "run",
                           str(TINY), str(out), "--workers", "2", "--git-commit", "abc"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "main runs: 4 of 4 finished" in done.stdout
    records = gs.read_records(out)
    cfg = load_sweep(TINY)
    assert {r["spec"]["run_id"] for r in records} == planned_run_ids(cfg, (), TINY)
    assert all(r["status"] == keys.STATUS_FINISHED for r in records)

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["import", str(out), "--sweep-file", str(TINY), "--tracking-uri", uri]
    assert gs.main(args) == 0
    assert "imported 4 run(s)" in capsys.readouterr().out
    assert gs.main(args) == 0  # again: every run is finished there already
    assert "imported 0 run(s)" in capsys.readouterr().out

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("tiny")
    trials = client.search_runs([exp.experiment_id], f"tags.{keys.TAG_KIND} = 'trial'")
    assert len(trials) == 4
    by_id = {r["spec"]["run_id"]: r for r in records}
    for run in trials:
        tags, metrics = run.data.tags, run.data.metrics
        record = by_id[tags[keys.TAG_RUN_ID]]
        assert tags[keys.TAG_STATUS] == keys.STATUS_FINISHED
        assert tags[keys.TAG_GIT_COMMIT] == "abc" and tags["imported_from"]
        assert tags[keys.TAG_DATA_FINGERPRINT] == record["data_fingerprint"]
        assert metrics[keys.FINAL_VAL_LOSS] == record["result"]["final_val_loss"]
        history = client.get_metric_history(run.info.run_id, keys.VAL_LOSS)
        assert sorted(m.step for m in history) == record["result"]["curve"]["step"]

    # Records on other tokens than the ledger's runs are refused, before anything is written.
    other = tmp_path / "other"
    other.mkdir()
    alien = {**records[0], "data_fingerprint": "0" * 64,
             "spec": {**records[0]["spec"], "run_id": "0123456789abcdef"}}
    with gzip.open(other / gs.RECORDS, "wt") as f:
        f.write(json.dumps(alien) + "\n")
    with pytest.raises(SystemExit, match="was trained on tokens 000000000000.*nothing imported"):
        gs.main(["import", str(other), "--sweep-file", str(TINY), "--tracking-uri", uri])
    assert len(client.search_runs([exp.experiment_id], f"tags.{keys.TAG_KIND} = 'trial'")) == 4

    table = load_runs("tiny", tracking_uri=uri, flops_convention=cfg.flops_convention,
                      with_curves=True, log=lambda _m: None)
    frame = table.runs.frame
    assert len(frame) == 4 and set(frame["run_id"]) == set(by_id)
    for _, row in frame.iterrows():
        assert math.isclose(row["loss"], by_id[row["run_id"]]["result"]["final_val_loss"])


def test_records_of_another_sweep_are_refused(tmp_path: Path) -> None:
    gs = _script()
    out = tmp_path / "out"
    out.mkdir()
    spec = json.loads(json.dumps({"sweep": "other", "run_id": "x"}))
    with gzip.open(out / gs.RECORDS, "wt") as f:
        f.write(json.dumps({"spec": spec, "status": "finished"}) + "\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(SystemExit, match="is of sweep 'other', not 'tiny'"):
        gs.main(["import", str(out), "--sweep-file", str(TINY), "--tracking-uri", uri])


# --- a study larger than one GPU session: --done ----------------------------------------------

RESUMED = {
    "name": "resumed", "kind": "isoflop", "family": "gpt",
    "shape": {"knob": "width", "head_dim": 8, "aspect_ratio": 16},
    "data": {"corpus": "stdlib", "max_bytes": 300_000, "seq_len": 32, "max_epochs": 10},
    "train": {"batch_size": 4, "lr": 3e-3, "evals_per_run": 2, "eval_batches": 2},
    "flops_convention": "exact",
    "isoflop": {"budgets": [3e9, 6e9, 1.2e10], "sizes": {"widths": [1, 2, 3]},
                "holdout": {"budgets": [2.4e10], "count": 1}},
}


def _runs_csv(path: Path, sweep: Path, fingerprint: str, keep: int | None = None) -> list[str]:
    """A report's runs.csv of the first `keep` main runs of `sweep` (all by default), as if
    trained in an earlier session: IsoFLOP profiles with their minimum at the middle size (so
    Approach 2 predicts it for the held-out budget). Returns the planned main run ids."""
    import csv

    from pipeline.vocab import flops

    cfg = load_sweep(sweep)
    specs = expand(cfg, sweep).specs
    middle = sorted({flops.params_total(s.model) for s in specs})[1]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run_id", "N", "D", "loss", "budget", "flops_exact", "data_fingerprint",
                    "role"])
        for s in specs[:keep]:
            n = flops.params_total(s.model)
            w.writerow([s.run_id, n, s.tokens, 2.0 + 0.1 * math.log(n / middle) ** 2, s.budget,
                        flops.training_flops(s.model, s.tokens, "exact"), fingerprint, "main"])
    return [s.run_id for s in specs]


def _gpu_study(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    import os

    from pipeline.data import CACHE_ENV

    return subprocess.run([sys.executable, str(SCRIPT), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, CACHE_ENV: str(cache)})


def _fingerprint(sweep: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    from pipeline.data import CACHE_ENV, load_data
    from pipeline.planner import data_spec_for

    monkeypatch.setenv(CACHE_ENV, str(cache))
    return load_data(data_spec_for(load_sweep(sweep), sweep)).fingerprint


def _sweep(tmp_path: Path, doc: dict) -> Path:
    import yaml

    sweep = tmp_path / f"{doc['name']}.yaml"
    sweep.write_text(yaml.safe_dump(doc))
    return sweep


@pytest.mark.slow
def test_runs_trained_before_are_not_trained_again_and_plan_the_held_out_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.vocab import flops

    gs = _script()
    sweep, cache = _sweep(tmp_path, RESUMED), tmp_path / "cache"
    runs_csv = tmp_path / "runs.csv"
    main_ids = _runs_csv(runs_csv, sweep, _fingerprint(sweep, cache, monkeypatch))

    out = tmp_path / "out"
    done = _gpu_study("run", str(sweep), str(out), "--workers", "1", "--done", str(runs_csv),
                      cwd=tmp_path, cache=cache)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "9 main runs, 9 finished before, 0 to train" in done.stdout
    records = gs.read_records(out)
    assert [r["spec"]["role"] for r in records] == [keys.ROLE_HOLDOUT]  # only the held-out run
    assert records[0]["spec"]["run_id"] not in main_ids
    sizes = sorted({flops.params_total(s.model) for s in expand(load_sweep(sweep), sweep).specs})
    assert records[0]["result"]["params_total"] == sizes[1]  # at the predicted optimum

    again = _gpu_study("run", str(sweep), str(out), "--workers", "1", "--done", str(runs_csv),
                       cwd=tmp_path, cache=cache)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "1 held-out runs, 1 finished before" in again.stdout  # OUT's own records count
    assert len(gs.read_records(out)) == 1
    # A later session: an earlier OUT folder passed with --done, into a new OUT.
    later = _gpu_study("run", str(sweep), str(tmp_path / "out2"), "--done", str(runs_csv),
                       str(out), cwd=tmp_path, cache=cache)
    assert later.returncode == 0 and "1 held-out runs, 1 finished before" in later.stdout
    assert not (tmp_path / "out2" / gs.RECORDS).exists()


@pytest.mark.slow
def test_only_the_runs_not_trained_before_are_trained(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    gs = _script()
    cache = tmp_path / "cache"
    runs_csv = tmp_path / "runs.csv"
    planned = _runs_csv(runs_csv, TINY, _fingerprint(TINY, cache, monkeypatch), keep=2)
    out = tmp_path / "out"
    done = _gpu_study("run", str(TINY), str(out), "--workers", "1", "--done", str(runs_csv),
                      cwd=tmp_path, cache=cache)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "4 main runs, 2 finished before, 2 to train" in done.stdout
    assert sorted(r["spec"]["run_id"] for r in gs.read_records(out)) == sorted(planned[2:])


def test_runs_on_other_tokens_stop_the_study_before_it_trains(tmp_path: Path) -> None:
    sweep, cache = _sweep(tmp_path, RESUMED), tmp_path / "cache"
    _runs_csv(tmp_path / "runs.csv", sweep, "0" * 64, keep=3)  # 6 runs left to train
    out = tmp_path / "out"
    done = _gpu_study("run", str(sweep), str(out), "--done", str(tmp_path / "runs.csv"),
                      cwd=tmp_path, cache=cache)
    assert done.returncode == 2
    assert "was trained on tokens 000000000000" in done.stderr
    assert "nothing trained" in done.stderr and "Traceback" not in done.stderr
    assert not (out / "runs.jsonl.gz").exists()


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "nope: no such file or folder"),
    (lambda p: p.mkdir(), "nope: no runs.jsonl.gz there"),
])
def test_a_done_path_that_holds_no_runs_is_refused(tmp_path: Path, make, message: str) -> None:
    make(tmp_path / "nope")
    done = _gpu_study("run", str(TINY), str(tmp_path / "out"), "--done", str(tmp_path / "nope"),
                      cwd=tmp_path, cache=tmp_path / "cache")
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_a_records_file_cut_short_keeps_its_complete_records(tmp_path: Path, capsys) -> None:
    gs = _script()
    for i in range(3):
        gs._append(tmp_path, {"spec": {"run_id": str(i)}, "status": "finished"})
    whole = (tmp_path / gs.RECORDS).read_bytes()
    (tmp_path / gs.RECORDS).write_bytes(whole[:-10])  # killed while appending the third
    assert [r["spec"]["run_id"] for r in gs.read_records(tmp_path)] == ["0", "1"]
    assert "truncated after 2 complete record(s)" in capsys.readouterr().err
