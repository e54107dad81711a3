"""Tests of the MLflow ledger (pipeline.tracking), one trial end to end (pipeline.trial), and
the single-run CLI (python -m pipeline.train).

A fresh sqlite MLflow store costs a few seconds of schema migrations, so the in-process tests
share one store per module (under a pytest tmp dir), each in its own experiment. The CLI
subprocess test gets a store of its own, as a first-time user would.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from pipeline.data import CACHE_ENV
from pipeline.tracking import Ledger, MLflowTracker
from pipeline.trial import FAIL_ENV, execute_trial
from pipeline.vocab import keys
from pipeline.vocab.families import make_config
from pipeline.vocab.flops import params_non_embedding, params_total
from pipeline.vocab.spec import DataSpec, ExecSpec, RunSpec, TrainSpec, flatten

LN_VOCAB = math.log(256)
WORDS = ("def", "return", "self", "import", "scaling", "loss", "tokens", "(", ")", ":", "\n")


@pytest.fixture(autouse=True)
def _cache_env(module_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAIL_ENV, raising=False)


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture(scope="module")
def client(uri: str) -> MlflowClient:
    return MlflowClient(tracking_uri=uri)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A folder of 12 small text files (~40 KB in all), deterministic."""
    import random

    folder = tmp_path / "corpus"
    folder.mkdir()
    rng = random.Random(0)
    for i in range(12):
        text = " ".join(rng.choice(WORDS) for _ in range(700))
        (folder / f"doc{i:02d}.txt").write_text(text, "utf-8")
    return folder


def tiny_spec(sweep: str, *, steps: int = 40, checkpoint_interval: int = 0,
              budget: float | None = None) -> RunSpec:
    cfg = make_config("gpt", 1, 16, vocab_size=256, seq_len=32)
    return RunSpec(
        sweep=sweep, model=cfg, data=DataSpec(max_bytes=300_000),
        train=TrainSpec(batch_size=4, warmup_steps=2), steps=steps, budget=budget,
        exec=ExecSpec(checkpoint_interval=checkpoint_interval, log_interval=10),
    )


def artifact(client: MlflowClient, run_id: str, name: str, dst: Path) -> Path:
    return Path(client.download_artifacts(run_id, name, str(dst)))


# --- the ledger ------------------------------------------------------------------------------


def test_ledger_creates_the_experiment_once(uri: str, client: MlflowClient) -> None:
    ledger = Ledger(uri, "ledger-exp")
    exp = client.get_experiment_by_name("ledger-exp")
    assert exp is not None and exp.experiment_id == ledger.experiment_id
    # Artifacts of a sqlite store sit next to the database, as an absolute path.
    db_folder = Path(uri.removeprefix("sqlite:///")).parent
    assert exp.artifact_location == (db_folder / "mlartifacts" / "ledger-exp").as_uri()
    assert Ledger(uri, "ledger-exp").experiment_id == ledger.experiment_id
    assert ledger.trials() == {}


def test_create_trial_logs_params_tags_and_spec(
    uri: str, client: MlflowClient, tmp_path: Path
) -> None:
    ledger = Ledger(uri, "create-trial")
    parent = ledger.parent_run({"note": "x"})
    spec = tiny_spec("create-trial", budget=1.5e12)
    rec = ledger.create_trial(spec, parent_run_id=parent)
    assert (rec.run_id, rec.status, rec.attempts) == (spec.run_id, "queued", 0)

    run = client.get_run(rec.mlflow_run_id)
    expected = {k: str(v) for k, v in flatten(spec.to_dict()).items()}
    assert {k: run.data.params[k] for k in expected} == expected
    assert run.data.params["model.d_model"] == "16" and run.data.params["train.lr"] == "0.003"
    assert run.data.params["run_id"] == spec.run_id
    assert run.data.params["tokens"] == str(spec.tokens)
    tags = run.data.tags
    assert tags[keys.TAG_SWEEP] == "create-trial"
    assert tags[keys.TAG_RUN_ID] == spec.run_id
    assert tags[keys.TAG_FAMILY] == "gpt"
    assert tags[keys.TAG_STATUS] == "queued"
    assert float(tags[keys.TAG_BUDGET]) == 1.5e12
    assert tags[keys.TAG_KIND] == "trial"
    assert tags[keys.TAG_SWEEP_RUN] == parent
    assert "mlflow.parentRunId" not in tags  # not nested: the UI would hide it until expanded
    assert tags[keys.TAG_ROLE] == keys.ROLE_MAIN
    # What produced it: this repository's commit (tests run in a checkout) and the versions.
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                          capture_output=True, text=True)
    if head.returncode == 0:
        assert tags[keys.TAG_GIT_COMMIT] == head.stdout.strip()
        assert tags[keys.TAG_GIT_DIRTY] in ("true", "false")
    assert tags[keys.TAG_PYTHON] == platform.python_version()
    assert tags[keys.TAG_TORCH] == torch.__version__

    saved = json.loads(artifact(client, rec.mlflow_run_id, keys.SPEC_ARTIFACT, tmp_path).read_text())
    assert saved == json.loads(json.dumps(spec.to_dict()))
    assert RunSpec.from_dict(saved).run_id == spec.run_id

    found = ledger.trials()
    assert list(found) == [spec.run_id] and found[spec.run_id].mlflow_run_id == rec.mlflow_run_id
    # The same parent run is reused when the sweep is invoked again.
    assert ledger.parent_run({}) == parent


# --- a trial end to end ----------------------------------------------------------------------


def test_execute_trial_records_a_finished_run(
    uri: str, client: MlflowClient, tmp_path: Path
) -> None:
    spec = tiny_spec("trial-ok", steps=40)
    ledger = Ledger(uri, "trial-ok")
    rec = ledger.create_trial(spec, parent_run_id=None)
    out = execute_trial(spec, uri, rec.mlflow_run_id, str(tmp_path / "ckpt"))
    assert out["status"] == keys.STATUS_FINISHED and out["attempts"] == 1

    run = client.get_run(rec.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[keys.TAG_STATUS] == keys.STATUS_FINISHED
    assert run.data.tags[keys.TAG_ATTEMPTS] == "1"
    m = run.data.metrics
    assert m[keys.FINAL_VAL_LOSS] == pytest.approx(out["final_val_loss"])
    assert m[keys.FINAL_VAL_LOSS] < LN_VOCAB
    assert m[keys.FINAL_VAL_BPB] == pytest.approx(out["final_val_bpb"])
    assert m[keys.PARAMS_TOTAL] == params_total(spec.model)
    assert m[keys.PARAMS_NON_EMBEDDING] == params_non_embedding(spec.model)
    assert m[keys.FINAL_TOKENS] == spec.tokens and m[keys.FINAL_STEPS] == 40
    for convention in ("exact", "6nd", "kaplan"):
        assert m[keys.flops_key(convention)] == pytest.approx(out["flops"][convention])
    assert m[keys.FINAL_TOKENS_PER_S] > 0 and keys.FINAL_TRAIN_LOSS in m

    names = {a.path for a in client.list_artifacts(rec.mlflow_run_id)}
    assert {keys.SPEC_ARTIFACT, keys.CURVE_ARTIFACT} <= names
    curve = json.loads(artifact(client, rec.mlflow_run_id, keys.CURVE_ARTIFACT, tmp_path).read_text())
    # One val/loss point per eval: every 40 // 8 = 5 steps, the last one at the end.
    assert curve["step"] == [5, 10, 15, 20, 25, 30, 35, 40]
    history = sorted(client.get_metric_history(rec.mlflow_run_id, keys.VAL_LOSS),
                     key=lambda x: x.step)
    assert [p.step for p in history] == curve["step"]
    assert [p.value for p in history] == pytest.approx(curve["val_loss"])
    assert curve["val_loss"][-1] == pytest.approx(out["final_val_loss"])
    inline = json.loads(client.get_run(rec.mlflow_run_id).data.tags[keys.TAG_CURVE])
    assert inline == {k: curve[k] for k in ("step", "tokens", "val_loss")}  # the same curve
    train_hist = client.get_metric_history(rec.mlflow_run_id, keys.TRAIN_LOSS)
    assert sorted(p.step for p in train_hist) == [10, 20, 30, 40]

    assert ledger.trials()[spec.run_id].status == keys.STATUS_FINISHED


def test_a_failing_trial_is_recorded_and_resumes_on_retry(
    uri: str, client: MlflowClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tiny_spec("trial-fail", steps=30, checkpoint_interval=10)
    ledger = Ledger(uri, "trial-fail")
    rec = ledger.create_trial(spec, parent_run_id=None)
    ckpt = str(tmp_path / "ckpt")

    monkeypatch.setenv(FAIL_ENV, f"{spec.run_id}:20")
    out = execute_trial(spec, uri, rec.mlflow_run_id, ckpt)
    assert out["status"] == keys.STATUS_FAILED
    assert "injected failure at step 20" in out["error"]
    run = client.get_run(rec.mlflow_run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags[keys.TAG_STATUS] == keys.STATUS_FAILED
    assert "RuntimeError: injected failure at step 20" in run.data.tags[keys.TAG_ERROR]
    tb = artifact(client, rec.mlflow_run_id, "traceback.txt", tmp_path).read_text()
    assert "Traceback" in tb and "injected failure at step 20" in tb
    # Metrics logged before the failure are not lost (the buffer is flushed on the way out).
    assert sorted(p.step for p in client.get_metric_history(rec.mlflow_run_id, keys.VAL_LOSS)) \
        == [3, 6, 9, 12, 15, 18]
    assert ledger.trials()[spec.run_id].status == keys.STATUS_FAILED

    # The retry resumes from the checkpoint of the failed step and finishes the same run.
    monkeypatch.delenv(FAIL_ENV)
    out = execute_trial(spec, uri, rec.mlflow_run_id, ckpt)
    assert out["status"] == keys.STATUS_FINISHED
    assert out["resumed_from"] == 20 and out["attempts"] == 2
    run = client.get_run(rec.mlflow_run_id)
    assert run.info.status == "FINISHED" and run.data.tags[keys.TAG_STATUS] == "finished"
    steps = sorted(p.step for p in client.get_metric_history(rec.mlflow_run_id, keys.VAL_LOSS))
    assert steps == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30]  # each eval once, none repeated
    # The same against tokens (step = tokens), and the corpus is one dataset input although
    # both attempts logged it.
    by_tokens = client.get_metric_history(rec.mlflow_run_id, keys.VAL_LOSS_BY_TOKENS)
    assert sorted(p.step for p in by_tokens) == [s * spec.train.batch_size * spec.model.seq_len
                                                  for s in steps]
    inputs = run.inputs.dataset_inputs
    assert len(inputs) == 1
    assert inputs[0].dataset.digest == run.data.tags[keys.TAG_DATA_FINGERPRINT][:36]


def test_a_diverged_trial_is_finished_with_status_diverged(
    uri: str, client: MlflowClient, tmp_path: Path
) -> None:
    cfg = make_config("gpt", 1, 16, vocab_size=256, seq_len=32)
    spec = RunSpec(sweep="trial-div", model=cfg, data=DataSpec(max_bytes=300_000),
                   train=TrainSpec(batch_size=4, lr=1e6), steps=20)
    rec = Ledger(uri, "trial-div").create_trial(spec, parent_run_id=None)
    out = execute_trial(spec, uri, rec.mlflow_run_id, str(tmp_path / "ckpt"))
    assert out["status"] == keys.STATUS_DIVERGED
    run = client.get_run(rec.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[keys.TAG_STATUS] == keys.STATUS_DIVERGED
    assert run.data.tags[keys.TAG_DIVERGED_STEP] == str(out["diverged_step"])
    assert keys.FINAL_VAL_LOSS not in run.data.metrics
    assert run.data.metrics[keys.FINAL_STEPS] == out["diverged_step"]


@pytest.mark.parametrize("status", [keys.STATUS_FINISHED, keys.STATUS_DIVERGED])
def test_a_run_stopped_between_its_status_and_its_end_is_closed_by_the_next_read(
    uri: str, client: MlflowClient, status: str
) -> None:
    """A trainer killed between the two writes that end its run (the status tag, then the
    MLflow run's end) leaves a run the ledger calls ended and the MLflow UI calls running; no
    driver trains it again, so the next read of the ledger closes it. A run still training
    (its status running) is left open."""
    ledger = Ledger(uri, f"half-ended-{status}")
    ended, live = (ledger.create_trial(tiny_spec(f"half-ended-{status}", steps=n), None)
                   for n in (40, 41))
    client.set_tag(ended.mlflow_run_id, keys.TAG_STATUS, status)  # and killed here
    client.set_tag(live.mlflow_run_id, keys.TAG_STATUS, keys.STATUS_RUNNING)
    for run_id in (ended.mlflow_run_id, live.mlflow_run_id):
        client.update_run(run_id, status="RUNNING")
    assert client.get_run(ended.mlflow_run_id).info.status == "RUNNING"

    found = Ledger(uri, f"half-ended-{status}").trials()
    assert found[ended.run_id].status == status
    run = client.get_run(ended.mlflow_run_id)
    assert run.info.status == "FINISHED" and run.info.end_time is not None
    assert client.get_run(live.mlflow_run_id).info.status == "RUNNING"


def test_no_metric_point_is_lost(uri: str, client: MlflowClient) -> None:
    ledger = Ledger(uri, "many-points")
    rec = ledger.create_trial(tiny_spec("many-points"), parent_run_id=None)
    tracker = MLflowTracker(uri, rec.mlflow_run_id, flush_every=200)
    names = [f"m/{i}" for i in range(8)]
    n = 137  # 8 x 137 = 1096 points: crosses both the flush size and MLflow's 1000 per batch
    for step in range(n):
        tracker.log_metrics({k: step * 10.0 + i for i, k in enumerate(names)}, step)
    tracker.end(keys.STATUS_FINISHED)
    total = 0
    for i, k in enumerate(names):
        history = client.get_metric_history(rec.mlflow_run_id, k)
        assert sorted((p.step, p.value) for p in history) == [(s, s * 10.0 + i) for s in range(n)]
        total += len(history)
    assert total == 8 * n
    assert client.get_run(rec.mlflow_run_id).info.status == "FINISHED"


def test_a_retried_attempt_logs_no_step_twice(uri: str, client: MlflowClient) -> None:
    """A killed attempt flushed steps 1-5 (its checkpoint is at 3); the retry resumes at 3 and
    logs 4-8 again: the store keeps one point per step, the first attempt's where both logged
    one (a resumed run on CPU logs the same values; the timestamps would differ)."""
    rec = Ledger(uri, "retried").create_trial(tiny_spec("retried"), parent_run_id=None)
    first = MLflowTracker(uri, rec.mlflow_run_id)
    assert first.start_attempt() == 1
    for step in range(1, 6):
        first.log_metrics({"m": float(step), "n": -float(step)}, step)
    first.flush()  # then SIGKILLed: no end()
    retry = MLflowTracker(uri, rec.mlflow_run_id)
    assert retry.start_attempt() == 2
    for step in range(4, 9):
        retry.log_metrics({"m": step + 0.5, "n": -float(step)}, step)
    retry.end(keys.STATUS_FINISHED)
    history = client.get_metric_history(rec.mlflow_run_id, "m")
    assert sorted((p.step, p.value) for p in history) == [
        (1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0), (6, 6.5), (7, 7.5), (8, 8.5)]
    assert sorted(p.step for p in client.get_metric_history(rec.mlflow_run_id, "n")) == \
        list(range(1, 9))


def test_a_dataset_inserted_by_another_run_meanwhile_is_linked(
    uri: str, client: MlflowClient
) -> None:
    """Two runs starting together both find their dataset missing and insert it; the second
    insert fails on the store's unique key (MLflow 3, sqlite: seen in CI). The tracker logs it
    again, which links the dataset the other run inserted."""
    from mlflow.exceptions import MlflowException

    rec = Ledger(uri, "race").create_trial(tiny_spec("race"), parent_run_id=None)
    tracker = MLflowTracker(uri, rec.mlflow_run_id)
    real, calls = tracker.client.log_inputs, []

    def racing(run_id, datasets=None, *args, **kwargs):
        calls.append(run_id)
        if len(calls) == 1:
            raise MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: "
                                  "datasets.experiment_id, datasets.name, datasets.digest")
        return real(run_id, datasets, *args, **kwargs)

    tracker.client.log_inputs = racing
    tracker.log_dataset({"name": "stdlib", "digest": "d" * 36, "source_type": "local",
                         "source": "stdlib"})
    assert len(calls) == 2
    inputs = client.get_run(rec.mlflow_run_id).inputs.dataset_inputs
    assert [i.dataset.name for i in inputs] == ["stdlib"]
    tracker.client.log_inputs = lambda *a, **k: (_ for _ in ()).throw(
        MlflowException("another error"))
    with pytest.raises(MlflowException, match="another error"):  # others are not swallowed
        tracker.log_dataset({"name": "x", "digest": "e" * 36, "source_type": "local",
                             "source": "x"})


# --- the single-run CLI ----------------------------------------------------------------------

CLI_ARGS = ["--family", "gpt", "--n-layer", "1", "--d-model", "16", "--tokens", "2e4",
            "--seq-len", "32", "--batch-size", "4"]


def test_cli_trains_once_and_then_skips_the_finished_run(tmp_path: Path, corpus: Path) -> None:
    db = tmp_path / "mlflow.db"
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{db}"}
    env.pop(FAIL_ENV, None)
    cmd = [sys.executable, "-m", "pipeline.train", *CLI_ARGS, "--corpus", str(corpus)]
    first = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    out = json.loads(first.stdout[first.stdout.index("{"):])
    assert out["status"] == keys.STATUS_FINISHED and out["steps"] == 156  # 2e4 / (4 * 32)

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("single-runs")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags[keys.TAG_RUN_ID] == out["run_id"]
    assert run.data.tags[keys.TAG_STATUS] == keys.STATUS_FINISHED
    assert run.data.metrics[keys.FINAL_VAL_LOSS] == pytest.approx(out["final_val_loss"])
    assert run.data.metrics[keys.FINAL_VAL_LOSS] < LN_VOCAB - 1
    final_ckpt = tmp_path / "checkpoints" / "single-runs" / out["run_id"] / "step_00000156.pt"
    assert final_ckpt.exists()
    mtime = final_ckpt.stat().st_mtime_ns

    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"run {out['run_id']} already finished" in second.stdout
    assert "final_val_loss" not in second.stdout  # trained nothing
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1 and runs[0].data.tags[keys.TAG_ATTEMPTS] == "1"
    assert final_ckpt.stat().st_mtime_ns == mtime


def fail_at_30(spec: RunSpec):
    """pipeline.trial's failure hook for tests: the run raises after its step 30."""
    def hook(done: int) -> None:
        if done == 30:
            raise RuntimeError("stop at 30")
    return hook


def test_cli_no_resume_starts_from_scratch(
    uri: str, tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--no-resume used to be parsed and then ignored: the run resumed anyway."""
    import pipeline.trial
    from pipeline.train.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    args = [*CLI_ARGS, "--tokens", "6400", "--corpus", str(corpus), "--experiment", "cli-resume",
            "--checkpoint-interval", "10"]  # 50 steps, a checkpoint every 10

    monkeypatch.setattr(pipeline.trial, "_failure_hook", fail_at_30)
    assert main(args) == 1
    capsys.readouterr()
    monkeypatch.setattr(pipeline.trial, "_failure_hook", lambda spec: None)

    assert main([*args, "--no-resume"]) == 0
    printed = capsys.readouterr().out
    out = json.loads(printed[printed.index("{"):])
    assert "--no-resume: removing" in printed
    assert out["resumed_from"] is None and out["attempts"] == 2
    assert out["status"] == keys.STATUS_FINISHED


@pytest.mark.parametrize(("family", "extra", "final_key"), [
    ("bert", ["--seq-len", "32", "--mask-rate", "0.2"], keys.FINAL_VAL_LOSS),
    ("vit", ["--patch-size", "2"], keys.FINAL_VAL_ACCURACY),
])
def test_cli_trains_logs_and_resumes_the_other_families(
    family: str, extra: list[str], final_key: str, uri: str, client: MlflowClient,
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bert and vit through `python -m pipeline.train` as gpt: a run that fails at step 30
    resumes from its checkpoint there, finishes, and its final metrics are in the ledger."""
    import pipeline.trial
    from pipeline.train.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    corpus_args = ["--corpus", str(corpus)] if family != "vit" else []
    args = ["--family", family, "--n-layer", "1", "--d-model", "16", "--batch-size", "4",
            "--tokens", "200" if family == "vit" else "6400", *corpus_args, *extra,
            "--experiment", f"cli-{family}", "--checkpoint-interval", "10"]  # 50 steps

    monkeypatch.setattr(pipeline.trial, "_failure_hook", fail_at_30)
    assert main(args) == 1
    capsys.readouterr()
    monkeypatch.setattr(pipeline.trial, "_failure_hook", lambda spec: None)
    assert main(args) == 0
    printed = capsys.readouterr().out
    out = json.loads(printed[printed.index("{"):])
    assert out["status"] == keys.STATUS_FINISHED and out["resumed_from"] == 30
    assert out["steps"] == 50 and out["attempts"] == 2
    exp = client.get_experiment_by_name(f"cli-{family}")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags[keys.TAG_FAMILY] == family
    assert math.isfinite(run.data.metrics[final_key])


_CREATE = """
import sys, time
from pipeline.tracking import prepare_store
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all processes start together
print(prepare_store(sys.argv[1], "race"))
"""


def test_drivers_started_together_create_one_store(tmp_path: Path) -> None:
    """Four processes create one fresh sqlite store at the same moment: one database, one
    experiment, every process gets its id (without the folder lock MLflow's concurrent
    schema migrations fail or corrupt the file)."""
    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    start = str(time.time() + 8.0)  # after the imports of all four
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [subprocess.Popen([sys.executable, "-c", _CREATE, uri, start], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-1500:] for _, err in outs]
    ids = {out.strip() for out, _ in outs}
    assert len(ids) == 1
    exps = MlflowClient(tracking_uri=uri).search_experiments()
    assert [e.name for e in exps if e.name == "race"] == ["race"]


def test_a_tag_insert_lost_to_another_driver_is_set_again() -> None:
    """Two drivers of one sweep mark its parent run at the same moment; with sqlite the
    second insert of the status tag fails on the unique key (seen in the mid-sweep two-driver
    test). The mark sets it again; any other store error is raised."""
    from mlflow.exceptions import MlflowException

    from pipeline.tracking import _again_after_a_unique_race

    calls: list[tuple] = []

    def racy(*args):
        calls.append(args)
        if len(calls) == 1:
            raise MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: "
                                  "tags.key, tags.run_uuid")

    _again_after_a_unique_race(racy, "run", "status", "finished")
    assert calls == [("run", "status", "finished")] * 2

    def broken(*args):
        raise MlflowException("database is locked")

    with pytest.raises(MlflowException, match="locked"):
        _again_after_a_unique_race(broken, "run")
