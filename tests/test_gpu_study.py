"""benchmarks/gpu_study.py: a sweep trained without Ray or MLflow (the lent GPU machine has
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
from pipeline import keys
from pipeline.config import load_sweep
from pipeline.grid import planned_run_ids

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "sweeps" / "tiny.yaml"


def _script():
    spec = importlib.util.spec_from_file_location("gpu_study", ROOT / "benchmarks" / "gpu_study.py")
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
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_study.py"), "run",
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


def _runs_csv(path: Path, sweep: Path, fingerprint: str) -> set[str]:
    """A report's runs.csv of every main run of `sweep`, as if trained in an earlier session:
    IsoFLOP profiles with their minimum at the middle width (so Approach 2's fit predicts it for
    the held-out budget). Returns the run ids."""
    import csv

    from pipeline import flops
    from pipeline.grid import expand

    cfg = load_sweep(sweep)
    specs = expand(cfg, sweep).specs
    middle = sorted({flops.params_total(s.model) for s in specs})[1]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run_id", "N", "D", "loss", "budget", "flops_exact", "data_fingerprint",
                    "role"])
        for s in specs:
            n = flops.params_total(s.model)
            w.writerow([s.run_id, n, s.tokens, 2.0 + 0.1 * math.log(n / middle) ** 2, s.budget,
                        flops.training_flops(s.model, s.tokens, "exact"), fingerprint, "main"])
    return {s.run_id for s in specs}


def _gpu_study(*args: str, cwd: Path, env_cache: Path) -> subprocess.CompletedProcess:
    import os

    from pipeline.data import CACHE_ENV

    env = {**os.environ, CACHE_ENV: str(env_cache)}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_study.py"), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow
def test_runs_trained_before_are_not_trained_again_and_plan_the_held_out_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from pipeline.data import CACHE_ENV, load_data
    from pipeline.grid import data_spec_for

    gs = _script()
    sweep = tmp_path / "resumed.yaml"
    sweep.write_text(yaml.safe_dump(RESUMED))
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    fingerprint = load_data(data_spec_for(load_sweep(sweep), sweep)).fingerprint
    main_ids = _runs_csv(tmp_path / "runs.csv", sweep, fingerprint)

    out = tmp_path / "out"
    done = _gpu_study("run", str(sweep), str(out), "--workers", "1", "--done",
                      str(tmp_path / "runs.csv"), cwd=tmp_path, env_cache=cache)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "9 main runs, 9 finished before, 0 to train" in done.stdout
    records = gs.read_records(out)
    assert [r["spec"]["role"] for r in records] == [keys.ROLE_HOLDOUT]  # only the held-out run
    assert records[0]["spec"]["run_id"] not in main_ids
    assert math.isclose(records[0]["result"]["params_total"],  # at the middle width
                        sorted(gs.finished_before([tmp_path / "runs.csv"], "exact")[i]["row"][0]
                               for i in main_ids)[3])

    again = _gpu_study("run", str(sweep), str(out), "--workers", "1", "--done",
                       str(tmp_path / "runs.csv"), cwd=tmp_path, env_cache=cache)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "1 held-out runs, 1 finished before" in again.stdout  # OUT's own records count
    assert len(gs.read_records(out)) == 1


def test_runs_on_other_tokens_stop_the_study_before_it_trains(tmp_path: Path) -> None:
    import yaml

    sweep = tmp_path / "resumed.yaml"
    sweep.write_text(yaml.safe_dump(RESUMED))
    _runs_csv(tmp_path / "runs.csv", sweep, "0" * 64)
    out = tmp_path / "out"
    done = _gpu_study("run", str(sweep), str(out), "--done", str(tmp_path / "runs.csv"),
                      cwd=tmp_path, env_cache=tmp_path / "cache")
    assert done.returncode == 2
    assert "was trained on tokens 000000000000" in done.stderr
    assert "nothing trained" in done.stderr and "Traceback" not in done.stderr
    assert not (out / "runs.jsonl.gz").exists()
    missing = _gpu_study("run", str(sweep), str(out), "--done", str(tmp_path / "nope.csv"),
                         cwd=tmp_path, env_cache=tmp_path / "cache")
    assert missing.returncode == 2 and "nope.csv: no such file or folder" in missing.stderr
