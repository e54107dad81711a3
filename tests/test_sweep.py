"""End-to-end sweeps through Ray and MLflow: run, re-run (nothing trained), killed driver."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from servers import MlflowServer

from pipeline.vocab import keys

pytestmark = pytest.mark.slow

TINY = Path(__file__).parent / "data" / "sweeps" / "tiny.yaml"


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return env


def _sweep(tmp_path: Path, sweep: Path, *extra: str, **kw) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pipeline.sweep", str(sweep), "--cpus", "2", "--no-report",
           "--no-estimate", *extra]
    return subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=300, **kw)


# `python -m pipeline.sweep ARGS`, counting how often the driver parses the sweep file's YAML
# and expands its plan (the counts, as JSON, go to the file given as the first argument).
_COUNTED = r"""
import atexit, json, runpy, sys
import pipeline.config.yaml_reader, pipeline.planner
counts, out = {"parse": 0, "expand": 0}, sys.argv.pop(1)

def count(module, name, key):
    original = getattr(module, name)
    def counted(*args, **kwargs):
        counts[key] += 1
        return original(*args, **kwargs)
    for m in [m for n, m in sys.modules.items() if n.split(".")[0] == "pipeline"]:
        if getattr(m, name, None) is original:  # the modules that imported it by name
            setattr(m, name, counted)

count(pipeline.config.yaml_reader, "_read_yaml", "parse")
count(pipeline.planner, "expand", "expand")
atexit.register(lambda: open(out, "w").write(json.dumps(counts)))
runpy.run_module("pipeline.sweep", run_name="__main__", alter_sys=True)
"""


def _plan_of(tmp_path: Path, name: str):
    """The plan manifest on the sweep's parent run (pipeline.vocab.manifest), checked."""
    from pipeline.vocab.manifest import manifest_from_dict

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name(name)
    (parent,) = client.search_runs([exp.experiment_id], f"tags.{keys.TAG_KIND} = 'sweep'")
    path = client.download_artifacts(parent.info.run_id, keys.PLAN_ARTIFACT, str(tmp_path))
    return manifest_from_dict(json.loads(Path(path).read_text()), path)


def _trials(tmp_path: Path, name: str) -> list:
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id], f"tags.{keys.TAG_KIND} = 'trial'")


@pytest.fixture(scope="module")
def tiny_done(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess, dict]:
    """tiny.yaml swept once, from an empty folder: the folder (read, never written: tests copy
    its ledger), the invocation, and what it left: how often it parsed the file and expanded
    the plan, and the plan manifest on its parent run, read at once (a test that sweeps a copy
    of the ledger writes its own plan on the same parent run: the artifacts' path is in the
    database). Its 4 finished runs are the main runs of the held-out test too (same run ids)."""
    folder = tmp_path_factory.mktemp("tiny")
    sweep = folder / "tiny.yaml"
    shutil.copy(TINY, sweep)
    counts = tmp_path_factory.mktemp("counts") / "counts.json"
    cmd = [sys.executable, "-c", _COUNTED, str(counts), str(sweep), "--cpus", "2"]
    first = subprocess.run(cmd, cwd=folder, env=_env(folder), capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    return folder, first, {"counts": json.loads(counts.read_text()),
                           "plan": _plan_of(folder, "tiny")}


def test_sweep_runs_everything_then_reruns_nothing(
    tiny_done: tuple[Path, subprocess.CompletedProcess, dict], tmp_path: Path
) -> None:
    done, first, left = tiny_done
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    runs = _trials(done, "tiny")
    assert len(runs) == 4
    # The file is parsed once and planned once, its report included (it reads the plan the
    # sweep recorded); the plan it trained is on the parent run, in the file's FLOP
    # convention, with the hash of the file's bytes.
    assert left["counts"] == {"parse": 1, "expand": 1}
    # The plan it printed carries the dry run's times and memory (calibrated: the other
    # end-to-end sweeps of the tests pass --no-estimate), and its first progress line, before
    # any run finished, the time left from them (issue 55: `?` and `-`, an ETA from the FLOP
    # rate of the first runs).
    plan_table = first.stdout.split("total: ")[0]
    assert "?" not in plan_table and " MiB " in plan_table, plan_table
    assert "of run time, about" in first.stdout
    assert "estimates: time measured on this machine's cpu" in first.stdout
    assert re.search(r"\[0/4\] .*; time left ~(\d+m)?\d+s", first.stdout), first.stdout
    report = (done / "reports" / "tiny" / "report.md").read_text()
    sha = hashlib.sha256(TINY.read_bytes()).hexdigest()
    assert f"plan: sweep 'tiny', sweep file sha256 {sha}, 4 planned runs" in report
    assert "C = exact" in report and "4 used, 0 excluded" in report
    from pipeline.config import load_sweep

    plan = left["plan"]
    assert plan.sweep == "tiny" and plan.run_ids == {r.data.tags[keys.TAG_RUN_ID] for r in runs}
    assert plan.flops_convention == load_sweep(TINY).flops_convention
    assert plan.sweep_sha256 == hashlib.sha256(TINY.read_bytes()).hexdigest()
    budgets = {r.data.tags[keys.TAG_RUN_ID]: float(r.data.tags[keys.TAG_BUDGET]) for r in runs}
    assert {r.run_id: r.budget for r in plan.runs} == budgets
    assert {(r.role, r.family) for r in plan.runs} == {(keys.ROLE_MAIN, "gpt")}
    client = MlflowClient(tracking_uri=f"sqlite:///{done / 'mlflow.db'}")
    for run in runs:
        assert run.info.status == "FINISHED"
        tags, metrics, params = run.data.tags, run.data.metrics, run.data.params
        assert tags[keys.TAG_STATUS] == keys.STATUS_FINISHED
        assert tags[keys.TAG_SWEEP] == "tiny" and tags[keys.TAG_FAMILY] == "gpt"
        assert float(tags[keys.TAG_BUDGET]) in (3e9, 6e9)
        assert tags[keys.TAG_ATTEMPTS] == "1"
        assert 0 < metrics[keys.FINAL_VAL_LOSS] < 5.545  # below ln(256): it learned
        assert metrics[keys.PARAMS_TOTAL] > metrics[keys.PARAMS_NON_EMBEDDING] > 0
        # isoflop: achieved exact FLOPs within 1% of the budget
        budget = float(tags[keys.TAG_BUDGET])
        assert abs(metrics[keys.flops_key("exact")] / budget - 1) < 0.01
        assert params["model.family"] == "gpt"
        # A CPU sweep's local Ray hides GPUs from its workers (through the raylet's
        # environment: pipeline.driver.runner.init_ray), whatever the machine has.
        assert tags["cuda_visible_devices"] == ""
        history = client.get_metric_history(run.info.run_id, keys.VAL_LOSS)
        assert len(history) >= 4  # a curve the UI can overlay
    assert "finished" in first.stdout

    # The re-runs on a copy of the ledger (the fixture's stays as the first run left it).
    sweep = tmp_path / "tiny.yaml"
    shutil.copy(TINY, sweep)
    shutil.copy(done / "mlflow.db", tmp_path / "mlflow.db")
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    second = _sweep(tmp_path, sweep)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "nothing to train" in second.stdout
    again = _trials(tmp_path, "tiny")
    assert len(again) == 4
    for run in again:  # the summary table shows the ledger's loss of runs already done
        assert f"{run.data.metrics[keys.FINAL_VAL_LOSS]:.4f}" in second.stdout
    assert all(r.data.tags[keys.TAG_ATTEMPTS] == "1" for r in again)

    # For scripts: --json leaves stdout one JSON object (the human lines go to stderr) ...
    as_json = _sweep(tmp_path, sweep, "--json")
    assert as_json.returncode == 0, as_json.stderr[-3000:]
    out = json.loads(as_json.stdout)
    assert "nothing to train" in as_json.stderr
    losses = {r.data.tags[keys.TAG_RUN_ID]: r.data.metrics[keys.FINAL_VAL_LOSS] for r in again}
    assert out["sweep"] == "tiny" and out["report"] is None
    assert "workflowType=machine_learning" in out["mlflow_ui"]
    assert [b["budget"] for b in out["mlflow_ui_budgets"]] == [3e9, 6e9]  # a link per budget
    assert all("viewStateShareKey=budget-" in b["url"] for b in out["mlflow_ui_budgets"])
    assert {r["run_id"]: r["final_val_loss"] for r in out["runs"]} == losses
    assert all(r["status"] == keys.STATUS_FINISHED and r["already_done"] for r in out["runs"])
    # ... and --quiet keeps only where the results are.
    quiet = _sweep(tmp_path, sweep, "--quiet")
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    lines = quiet.stdout.strip().splitlines()
    assert len(lines) == 2, quiet.stdout
    assert lines[0].startswith("sweep 'tiny': 4 runs in ")
    assert lines[1].startswith("compare them in the MLflow UI: MLFLOW_SERVER_ENABLE_JOB_EXECUTION"
                               "=false mlflow ui --workers 1 --backend-store-uri")

    # A run of the ledger that trained on other tokens (another Python's stdlib corpus, say)
    # is not reused as if it had trained on these: the sweep stops and names it.
    moved = again[0]
    client.set_tag(moved.info.run_id, keys.TAG_DATA_FINGERPRINT, "0" * 64)
    other = _sweep(tmp_path, sweep)
    assert other.returncode == 2, other.stdout[-2000:]
    assert f"run {moved.data.tags[keys.TAG_RUN_ID]} (finished): tokens 000000000000" in \
        other.stderr
    assert "Traceback" not in other.stderr and "finished" not in other.stdout
    assert all(r.data.tags[keys.TAG_ATTEMPTS] == "1" for r in _trials(tmp_path, "tiny"))


def _statuses_read_only(db: Path) -> dict[str, str]:
    """run_id -> status tag, read with plain sqlite in read-only mode.

    Polling through MlflowClient would run MLflow's schema migrations on a database the driver
    may be creating at that moment: concurrent creation corrupts it (the driver owns creation).
    """
    if not db.exists():
        return {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
        try:
            rows = con.execute(
                "SELECT a.value, b.value FROM tags a JOIN tags b ON a.run_uuid = b.run_uuid "
                "WHERE a.key = ? AND b.key = ?", (keys.TAG_RUN_ID, keys.TAG_STATUS)).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return {}  # tables not there yet, or locked by a writer: try again later
    return dict(rows)


def _raylets_below(root: Path) -> list[int]:
    """PIDs of Ray processes whose command line mentions our temp folder (ps -ww: whole
    command lines, whatever the width ps would otherwise cut them to)."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines()[1:]
            if str(root) in line and ("raylet" in line or "gcs_server" in line)]


def _trial_workers(tmp_path: Path) -> list[int]:
    """PIDs of the Ray workers training runs of the sweep whose store is in tmp_path (their
    environment names it: another test's sweep may run beside this one)."""
    needle = f"MLFLOW_TRACKING_URI=sqlite:///{tmp_path / 'mlflow.db'}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit()
                    and (entry / "cmdline").read_bytes().startswith(b"ray::run_trial")
                    and needle in (entry / "environ").read_bytes()):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile
            continue
    return found


def _steps(sweep: Path) -> dict[str, int]:
    """run_id -> steps of a sweep file's runs."""
    from pipeline.config import load_sweep
    from pipeline.planner import expand, vocab_size_for

    cfg = load_sweep(sweep)
    return {s.run_id: s.steps for s in expand(cfg, sweep, vocab_size_for(cfg)).specs}


def _checkpoints(folder: Path) -> list[int]:
    """Steps of a run's complete checkpoints (.pt with its .sha256), oldest first."""
    if not folder.is_dir():
        return []
    return sorted(int(p.name[5:13]) for p in folder.glob("step_*.pt.sha256"))


# What the sweep prints, as README.md's quick start says (its phrases, read from the README):
# each phrase that names a printed thing, and the line that shows it.
_PRINTED = {
    "the plan": r"^\s*sweep '\w+': \d+ runs \(",  # the plan table's title
    "a line per finished run": r"^finished [0-9a-f]{16} ",
    "a progress line with the best loss per budget so far": r"best val loss C=",
    "a summary table": r"^\s*runs\s*$",  # the summary table's title
    "the link to its runs table": r"^compare them in the MLflow UI: ",
    "a link per budget": r"^  C=\S+, its runs against tokens: http",
    "the report's path": r"^report: \S+report\.html$",
    "its answer": r"^answer(: none| at C = )",  # analysis.reporting.answer.answer_lines
}
_NOT_PRINTED = ("fits the laws",)  # said by the report's files, not by a stdout line


def _readme_order(readme: str) -> tuple[list[str], list[str]]:
    """The README's claims about the sweep's output: what it prints, in order (the link or
    links after the summary), and what its last lines are."""
    text = " ".join(readme.split())
    quick = re.search(r"It prints (.+?); its last lines are (.+?) \(", text)
    assert quick, "README.md: the quick start no longer says what the sweep prints"
    said = [p.removeprefix("then ").strip()
            for p in re.sub(r" \([^()]*\)", "", quick[1]).split(", ")]
    order = []
    for item in said:
        known = [k for k in _PRINTED if item.startswith(k)]
        assert known or item.startswith(_NOT_PRINTED), f"README.md claims {item!r}: check it here"
        order += known
    ui = re.search(r"after the summary the sweep prints (the link to its runs table) .+?, "
                   r"then, of an IsoFLOP sweep, (a link per budget) ", text)
    assert ui, "README.md no longer says which UI links the sweep prints after the summary"
    at = order.index("a summary table") + 1
    order[at:at] = [ui[1], ui[2]]
    return order, quick[2].split(" and ")


def _check_printed(readme: str, stdout: str, answer: list[str]) -> None:
    """stdout shows the README's claims in its order, and ends with the report's path and
    its answer (the lines answer_lines makes of fit.json's summary.answer)."""
    order, last = _readme_order(readme)
    lines = stdout.splitlines()
    at, where = -1, {}
    assert last == ["the report's path", "its answer"], last
    for claim in order + last:  # each at the first line that shows it after the one before
        found = [i for i, line in enumerate(lines) if i > at and re.search(_PRINTED[claim], line)]
        assert found, f"README.md says the sweep prints {claim!r} here; after line {at}: " + \
            "\n".join(lines[at + 1:][:40])
        at = where[claim] = found[0]
    at = where["its answer"]  # the report's path, then its answer's lines, end the output
    assert where["the report's path"] == at - 1, lines[at - 1:]
    assert lines[at:] == answer, lines[at - 1:]


def test_the_readme_s_claims_about_the_sweep_s_output_hold(
    tiny_done: tuple[Path, subprocess.CompletedProcess, dict]
) -> None:
    """The README's quick start says what the sweep prints and in which order (issue 55: it
    said the last line was the MLflow command when it was the report's path); its phrases
    are read from README.md, so an edit of it that no longer holds fails here. Fed the same
    output reordered, the check fails."""
    from analysis.reporting.answer import answer_lines

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    done, first, _ = tiny_done  # a sweep with its report, from an empty folder
    fit = json.loads((done / "reports" / "tiny" / "fit.json").read_text())
    answer = answer_lines(fit["summary"].get("answer"))
    assert first.stdout.count("finished ") >= 4
    _check_printed(readme, first.stdout, answer)
    lines = first.stdout.splitlines()
    summary = next(i for i, line in enumerate(lines) if re.search(_PRINTED["a summary table"], line))
    link = next(i for i, line in enumerate(lines) if line.startswith("compare them"))
    moved = lines[:summary] + lines[link:link + 1] + lines[summary:link] + lines[link + 1:]
    with pytest.raises(AssertionError):  # the link before the summary
        _check_printed(readme, "\n".join(moved), answer)
    n = len(answer)
    with pytest.raises(AssertionError):  # the report's path after its answer
        _check_printed(readme, "\n".join(lines[:-n - 1] + lines[-n:] + lines[-n - 1:-n]),
                       answer)
    with pytest.raises(AssertionError):  # a README claiming the UI command comes last
        _check_printed(" ".join(readme.split()).replace(
            "its last lines are the report's path and its answer",
            "its last line is the MLflow command"), first.stdout, answer)


def test_killed_driver_resumes_without_retraining(tmp_path: Path) -> None:
    # tiny.yaml's budgets (315 to 1440 steps), checkpointed every 50 steps; the kill waits
    # for a finished run and a running one with a checkpoint, at most half-way. Two run at a
    # time, so the 1440-step run starts after two have finished and is seen in its first
    # half (~700 steps, seconds; polled every 0.2 s). Its workers are frozen before the kill,
    # so it cannot finish meanwhile: the doubled budgets it had until 2026-12-07 (631 to 2881
    # steps, for a run to outlive its driver by a second or two) trained twice as long.
    text = TINY.read_text().replace("resources:\n  num_cpus: 1",
                                    "resources:\n  num_cpus: 1\n  checkpoint_interval: 50")
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(text)
    steps = _steps(sweep)
    ray_tmp = Path(os.environ["RAY_TMPDIR"])
    cmd = [sys.executable, "-m", "pipeline.sweep", str(sweep), "--cpus", "2", "--no-report",
           "--no-estimate"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        finished_before: set[str] = set()
        mid_run: list[str] = []
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            status = _statuses_read_only(tmp_path / "mlflow.db")
            finished_before = {rid for rid, st in status.items() if st == keys.STATUS_FINISHED}
            mid_run = [rid for rid, st in status.items() if st == keys.STATUS_RUNNING
                       and (c := _checkpoints(tmp_path / "checkpoints" / "tiny" / rid))
                       and c[-1] <= steps[rid] // 2]
            if finished_before and mid_run:
                break
        assert proc.poll() is None, "sweep ended before it could be killed"
        assert finished_before, "no run finished before the deadline"
        assert mid_run, "no run was seen checkpointed and at most half-way"
        # The driver and its training workers die at once (workers frozen first, so none
        # takes another step): left alone, a worker trains on until Ray's cleanup reaches it
        # (2-3 s alone, longer on a loaded machine), enough for these runs to finish and leave
        # nothing interrupted. The raylet and GCS are left to Ray's own reaper.
        busy = _trial_workers(tmp_path)
        assert busy, "no training worker found to kill with the driver"
        for pid in busy:
            os.kill(pid, signal.SIGSTOP)
        os.kill(proc.pid, signal.SIGKILL)
        for pid in busy:
            os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
    # The driver's local Ray instance goes with it (no raylet left behind).
    deadline = time.monotonic() + 30
    while _raylets_below(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.5)
    leftover = _raylets_below(ray_tmp)
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    assert not leftover, f"Ray processes outlived the killed driver: {leftover}"

    rerun = _sweep(tmp_path, sweep)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    runs = _trials(tmp_path, "tiny")
    assert len(runs) == 4
    assert all(r.info.status == "FINISHED" for r in runs)
    attempts = {r.data.tags[keys.TAG_RUN_ID]: int(r.data.tags[keys.TAG_ATTEMPTS]) for r in runs}
    # Finished runs were not trained again; interrupted ones were started a second time.
    assert all(attempts[rid] == 1 for rid in finished_before)
    resumed = [r for r in runs if r.data.tags[keys.TAG_RUN_ID] not in finished_before
               and r.data.tags.get(keys.TAG_RESUMED_FROM)]
    assert resumed, "no interrupted run resumed from a checkpoint"
    # From a periodic checkpoint, or from the final one: the other run in flight may have
    # saved its last checkpoint just before the kill and not yet been recorded as finished;
    # it then resumes at its end and trains nothing again.
    for r in resumed:
        rid, start = r.data.tags[keys.TAG_RUN_ID], int(r.data.tags[keys.TAG_RESUMED_FROM])
        assert start % 50 == 0 or start == steps[rid], (rid, start, steps[rid])
    # The killed driver's leases (its PID is gone) were taken over, and released at the end.
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert not client.search_registered_models()


@pytest.mark.parametrize("store, second", [("sqlite", 0.0), ("server", 4.0)])
def test_two_drivers_of_one_sweep_train_each_run_once(tmp_path: Path, store: str,
                                                      second: float) -> None:
    """Terminals in one folder, on one sqlite ledger or on an `mlflow server` (over that
    sqlite file): a second driver started 0 or 4 s after the first, and a third mid-sweep
    (once a run has finished and others have not): each run is trained by one of them (its
    lease), the others wait for it and read its result; all exit 0 with the same table.
    Before leases every run was trained twice. (Until 2026-12-07 four tests of two drivers
    each: the mid-sweep driver had sweeps of its own, a sweep trained twice more.)"""
    text = TINY.read_text().replace("budgets: [3e9, 6e9]", "budgets: [6e9, 1.2e10]")
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(text)
    cmd = [sys.executable, "-m", "pipeline.sweep", str(sweep), "--cpus", "1", "--no-report",
           "--no-estimate"]
    server = None
    if store == "server":
        server = MlflowServer(tmp_path / "mlflow.db", tmp_path / "artifacts",
                              tmp_path / "server.log")
        server.start()
    drivers = []
    try:
        for i, when in enumerate([0.0, second, "mid-sweep"]):
            if when == "mid-sweep":
                _wait_mid_sweep(tmp_path / "mlflow.db", drivers[0])
            else:
                time.sleep(float(when))
            env = {**_env(tmp_path), "RAY_TMPDIR": str(Path(os.environ["RAY_TMPDIR"]) / f"d{i}")}
            if server is not None:
                env["MLFLOW_TRACKING_URI"] = server.url
            drivers.append(subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True))
        outs = [d.communicate(timeout=400) for d in drivers]
    finally:
        for d in drivers:
            if d.poll() is None:
                d.kill()
                d.communicate()
        if server is not None:
            server.stop()
    for d, (out, err) in zip(drivers, outs, strict=True):
        assert d.returncode == 0, out[-3000:] + err[-3000:]
    runs = _trials(tmp_path, "tiny")
    assert len(runs) == 4  # one MLflow run per run_id
    trained = [line.split()[1] for out, _ in outs for line in out.splitlines()
               if line.startswith("finished ")]
    assert sorted(trained) == sorted(r.data.tags[keys.TAG_RUN_ID] for r in runs), trained
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    for run in runs:
        assert run.data.tags[keys.TAG_ATTEMPTS] == "1"
        steps = [p.step for p in client.get_metric_history(run.info.run_id, keys.VAL_LOSS)]
        assert len(steps) == len(set(steps)) >= 4  # one point per logged step
        for out, _ in outs:  # every table shows every run's loss
            assert f"{run.data.metrics[keys.FINAL_VAL_LOSS]:.4f}" in out
    assert any("by another driver" in out for out, _ in outs)
    # The mid-sweep driver came while the first still had runs to train: it waited for them.
    assert "by another driver" in outs[2][0], outs[2][0][-3000:]
    assert not client.search_registered_models()  # every lease was released


def _wait_mid_sweep(db: Path, first: subprocess.Popen, timeout: float = 240) -> None:
    """Until the ledger holds a finished run and one that is not (the first driver still
    going); fails if the first driver ends before that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and first.poll() is None:
        status = set(_statuses_read_only(db).values())
        if keys.STATUS_FINISHED in status and status - {keys.STATUS_FINISHED}:
            return
        time.sleep(0.2)
    raise AssertionError(f"no mid-sweep moment seen (first driver exit {first.poll()})")


def test_sigterm_stops_the_driver_cleanly(tmp_path: Path) -> None:
    """A preempted node or `ray job stop` sends SIGTERM: the runs in flight are marked
    killed (they resume next time), the leases are given back, Ray goes with the driver,
    and the driver says how to resume."""
    from pipeline.trial import START_DELAY_ENV

    sweep = tmp_path / "tiny.yaml"
    shutil.copy(TINY, sweep)
    ray_tmp = Path(os.environ["RAY_TMPDIR"])
    env = {**_env(tmp_path), START_DELAY_ENV: "60"}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.sweep", str(sweep), "--cpus", "2",
                             "--no-report", "--no-estimate"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        # The runs are in flight once the driver prints its first progress line ("[0/4] ...
        # running 2"). Not a fixed wait after the raylet appears: on a slow machine that
        # landed within 0.2 s of ray.init, where a SIGTERM crashes Ray's core worker
        # (SIGABRT after the clean stop; a known problem of its own, not this test's case).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(x.startswith("[0/") for x in lines):
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        if not any(x.startswith("[0/") for x in lines):
            proc.kill()
            reader.join(timeout=30)
            raise AssertionError("the runs were not submitted:\n" + "".join(lines)[-3000:])
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        stopped_in = time.monotonic() - t0
        reader.join(timeout=30)
        out = "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out[-3000:]
    assert stopped_in < 30, stopped_in
    assert "interrupted" in out and f"resume: python -m pipeline.sweep {sweep}" in out
    assert "Traceback" not in out
    statuses = _statuses_read_only(tmp_path / "mlflow.db")
    assert sorted(statuses.values()) == [keys.STATUS_KILLED] * 4, statuses
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert not client.search_registered_models()  # leases given back
    deadline = time.monotonic() + 30
    while _raylets_below(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _raylets_below(ray_tmp)


WSD = """
name: wsd
kind: grid
family: gpt
shape: {head_dim: 8}
data: {corpus: stdlib, max_bytes: 400000, seq_len: 32}
train:
  batch_size: 4
  lr: 3.0e-3
  schedules: [cosine, wsd]
  wsd_reuse: true
  evals_per_run: 2
  eval_batches: 2
resources: {num_cpus: 1}
grid:
  sizes: {shapes: [{n_layer: 1, d_model: 8}]}
  tokens: [3200, 12800]
"""


def test_wsd_branch_runs_after_its_trunk_and_equals_training_alone(tmp_path: Path) -> None:
    """Through Ray and the ledger: the short WSD run starts from the long one's stable phase,
    and its loss is the loss of the same spec trained alone, bit for bit."""
    from pipeline.train import train
    from pipeline.vocab.spec import RunSpec

    sweep = tmp_path / "wsd.yaml"
    sweep.write_text(WSD)
    done = _sweep(tmp_path, sweep)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "WSD branches start from their trunk" in done.stdout
    runs = {r.data.tags[keys.TAG_RUN_ID]: r for r in _trials(tmp_path, "wsd")}
    assert len(runs) == 4
    branches = [r for r in runs.values() if r.data.tags.get(keys.TAG_BRANCH_OF)]
    (branch,) = branches
    tags = branch.data.tags
    trunk = runs[tags[keys.TAG_BRANCH_OF]]
    assert trunk.data.params["train.schedule"] == "wsd"
    assert tags[keys.TAG_RESUMED_FROM] == tags[keys.TAG_BRANCH_STEP] == "20"  # 25 steps, 20% decay
    assert tags[keys.TAG_ROLE] == keys.ROLE_MAIN
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    path = client.download_artifacts(branch.info.run_id, keys.SPEC_ARTIFACT, str(tmp_path))
    spec = RunSpec.from_dict(json.loads(Path(path).read_text()))
    alone = train(spec)
    assert alone.final_val_loss == branch.data.metrics[keys.FINAL_VAL_LOSS]


def test_holdout_without_a_main_fit_is_reported_and_keeps_the_main_runs(
    tiny_done: tuple[Path, subprocess.CompletedProcess, dict], tmp_path: Path
) -> None:
    """Two main budgets cannot give Approach 2 (it needs 3 with interior minima): the driver
    says so, trains no held-out run, exits 1, and the main runs stay finished. The main runs
    are tiny.yaml's, finished in a copy of tiny_done's ledger: the held-out plan is fitted
    on the ledger's main runs whether this invocation trained them or an earlier one did."""
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(TINY.read_text() + "  holdout: {budgets: [2e10]}\n")
    shutil.copy(tiny_done[0] / "mlflow.db", tmp_path / "mlflow.db")
    done = _sweep(tmp_path, sweep)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    out = " ".join(done.stdout.split())  # rich wraps long lines
    assert "held-out budgets not run: Approach 2 cannot be fitted on the main budgets" in out
    assert "then held-out budget(s) 2e+10" in out  # announced with the plan
    runs = _trials(tmp_path, "tiny")
    assert len(runs) == 4
    assert all(r.data.tags[keys.TAG_STATUS] == keys.STATUS_FINISHED for r in runs)
    assert all(r.data.tags[keys.TAG_ROLE] == keys.ROLE_MAIN for r in runs)
    # The parent run's plan is this file's now (its hash), the main runs alone: none held out.
    plan = _plan_of(tmp_path, "tiny")
    assert plan.sweep_sha256 == hashlib.sha256(sweep.read_bytes()).hexdigest()
    assert plan.run_ids == {r.data.tags[keys.TAG_RUN_ID] for r in runs} and not plan.holdout()


def test_the_environment_given_to_a_local_ray_is_restored_after_it(monkeypatch) -> None:
    from pipeline.driver.runner import _environ

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("SCALING_TEST_UNSET", raising=False)
    with _environ({"CUDA_VISIBLE_DEVICES": "", "SCALING_TEST_UNSET": "x"}):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "" and os.environ["SCALING_TEST_UNSET"] == "x"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1" and "SCALING_TEST_UNSET" not in os.environ
    with pytest.raises(RuntimeError), _environ({"CUDA_VISIBLE_DEVICES": ""}):
        raise RuntimeError("ray.init failed")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_a_local_ray_log_monitor_scans_for_new_files_every_5_s(monkeypatch) -> None:
    """init_ray hands Ray's log monitor the variables that slow its scan for new log files
    (its 0.1 s glob is ~0.6 s of CPU a minute and a half); a value the user set wins, and the
    driver's environment is as it was afterwards."""
    import inspect

    import ray
    import ray._private.log_monitor as log_monitor

    from pipeline.driver import runner

    source = inspect.getsource(log_monitor)  # the names are Ray's own: a rename shows here
    assert all(f'os.getenv("{name}"' in source for name in runner.LOG_MONITOR_ENV)
    seen: dict[str, str | None] = {}

    def fake_init(**kwargs) -> None:
        seen.update({k: os.environ.get(k) for k in runner.LOG_MONITOR_ENV})

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(runner, "sigterm_as_interrupt", lambda: None)  # pytest's own stays
    for name in runner.LOG_MONITOR_ENV:
        monkeypatch.delenv(name, raising=False)
    runner.init_ray(None, 1)
    assert seen == runner.LOG_MONITOR_ENV
    assert not any(name in os.environ for name in runner.LOG_MONITOR_ENV)
    monkeypatch.setenv("LOG_NAME_UPDATE_INTERVAL_S", "0.5")
    runner.init_ray(None, 1)
    assert seen["LOG_NAME_UPDATE_INTERVAL_S"] == "0.5"
    assert seen["RAY_LOG_MONITOR_MANY_FILES_THRESHOLD"] == "0"
