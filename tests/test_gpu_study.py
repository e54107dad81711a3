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
