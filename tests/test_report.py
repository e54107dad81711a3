"""`python -m analysis.report`: the files, a self-contained HTML, valid figures, numbers that
agree with fit.json, text samples (and their failures), and an atomic write.

A small synthetic MLflow sweep is written here the way pipeline.tracking writes one (4
IsoFLOP budgets x 7 sizes from a known law, with curves and 1% noise, plus a diverged run);
the published-data report uses the Epoch CSV. Sampling is replaced by tiny Python commands
(the real one needs torch and checkpoints).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import report
from analysis.reporting import figures, samples
from analysis.reporting.provenance import portable
from analysis.runs.synthetic import ChinchillaLaw
from analysis.text import markdown_inline
from pipeline.vocab import keys

ROOT = Path(__file__).resolve().parents[1]

LAW = ChinchillaLaw(E=1.5, A=300.0, B=300.0, alpha=0.3, beta=0.3)  # N_opt = sqrt(C/6)
BUDGETS = (1e12, 4e12, 1.6e13, 6.4e13)
SIZES = tuple(1e5 * 2.0**k for k in range(7))
EPOCH_CSV = Path(__file__).parent / "data" / "chinchilla_epoch_fig4.csv"
EPOCH_ARGS = ["--csv", str(EPOCH_CSV), "--n-col", "Model Size", "--c-col", "Training FLOP",
              "--loss-col", "loss", "--drop-highest-loss", "5"]
SAMPLE_TEXT = "def fake_sample():\n    return 42"
SAMPLE_ERROR = "error: no usable checkpoint in /nowhere/run1"
FIGURES = {"isoflop", "frontier", "allocation", "kaplan", "approach3", "extrapolation"}


def _log_run(client, experiment_id, parent_id, *, run_id, n, budget, noise, status="finished"):
    from mlflow.entities import Metric, Param
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    d = budget / (6 * n)
    run = client.create_run(experiment_id, run_name=f"gpt-{run_id}", tags={
        keys.TAG_KIND: "trial", keys.TAG_SWEEP: "demo", keys.TAG_RUN_ID: run_id,
        keys.TAG_FAMILY: "gpt", keys.TAG_BUDGET: f"{budget:.6g}", keys.TAG_STATUS: status,
        keys.TAG_CORPUS_FINGERPRINT: "c0ffee" * 4, keys.TAG_DATA_FINGERPRINT: "beef" * 6,
        MLFLOW_PARENT_RUN_ID: parent_id,
    })
    rid = run.info.run_id
    tokens = np.linspace(d / 8, d, 8)
    loss = LAW.loss(np.full(8, n), tokens) * noise
    summary = {keys.FINAL_VAL_LOSS: loss[-1], keys.FINAL_TOKENS: d, keys.PARAMS_TOTAL: n,
               keys.PARAMS_NON_EMBEDDING: 0.8 * n, keys.flops_key("6nd"): 6 * n * d,
               keys.flops_key("6nd_non_embedding"): 6 * 0.8 * n * d,
               keys.flops_key("exact"): 7 * n * d}
    client.log_batch(rid, metrics=[Metric(k, float(v), 0, 0) for k, v in summary.items()],
                     params=[Param("model.n_layer", "2"), Param("model.d_model", "32"),
                             Param("model.n_heads", "4"), Param("model.vocab_size", "256"),
                             Param("model.seq_len", "64"), Param("data.corpus", "stdlib"),
                             Param("data.tokenizer", "bytes")])
    client.log_dict(rid, {"step": list(range(1, 9)), "tokens": tokens.tolist(),
                          "val_loss": loss.tolist()}, keys.CURVE_ARTIFACT)
    client.set_terminated(rid, status="FINISHED")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("demo", artifact_location=(root / "artifacts").as_uri())
    parent = client.create_run(exp, tags={keys.TAG_KIND: "sweep", keys.TAG_SWEEP: "demo"})
    rng = np.random.default_rng(0)
    for b, budget in enumerate(BUDGETS):
        for s, n in enumerate(SIZES):
            _log_run(client, exp, parent.info.run_id, run_id=f"b{b}s{s}", n=n, budget=budget,
                     noise=float(np.exp(0.01 * rng.standard_normal())))
    _log_run(client, exp, parent.info.run_id, run_id="div", n=2e5, budget=BUDGETS[0],
             noise=1.0, status="diverged")
    return uri


def _fake_sampler(run_id: str, prompt: str, tracking_uri: str | None,
                  corpus: str | None = None) -> list[str]:
    """The smallest model samples; every other run fails the way pipeline.sample does."""
    if run_id.endswith("s0"):
        return [sys.executable, "-c", f"print({SAMPLE_TEXT!r})"]
    return [sys.executable, "-c", f"import sys; sys.exit({SAMPLE_ERROR!r})"]


@pytest.fixture(scope="module")
def sweep_report(store, tmp_path_factory) -> Path:
    """reports/demo/ written as pipeline.sweep asks for it (plus a small bootstrap)."""
    work = tmp_path_factory.mktemp("work")
    sweep_file = work / "demo.yaml"
    sweep_file.write_text("name: demo\nkind: isoflop\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        mp.setattr(samples, "sample_command", _fake_sampler)
        # The ledger is synthetic (no run_id is planned by a sweep file): keep every run.
        # restrict_to_plan itself is tested in tests/test_sweep_options.py.
        mp.setattr("pipeline.planned_view.sweep_file_manifest", lambda *_a: None)
        lines: list[str] = []
        mp.setattr(report, "print", lambda *a, **k: lines.append(" ".join(map(str, a))),
                   raising=False)
        # The stub sweep file has no flops_convention to read: name the synthetic C.
        assert report.main(["--sweep", "demo", "--tracking-uri", store, "--sweep-file",
                            str(sweep_file), "--flops-convention", "6nd",
                            "--bootstrap", "40"]) == 0
    folder = work / "reports" / "demo"
    assert lines[-1] == str((folder / "report.html").resolve())  # the last line: the path
    return folder


@pytest.fixture(scope="module")
def csv_report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("csv") / "besiroglu"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report, "print", lambda *a, **k: None, raising=False)
        assert report.main([*EPOCH_ARGS, "--name", "besiroglu", "--out", str(out),
                            "--bootstrap", "30"]) == 0
    return out


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize("which", ["sweep", "csv"])
def test_every_file_is_written(which, sweep_report, csv_report):
    folder = sweep_report if which == "sweep" else csv_report
    for name in ("report.md", "report.html", "fit.json", "runs.csv"):
        assert (folder / name).stat().st_size > 0, name
    drawn = {p.stem for p in (folder / "figures").glob("*.png")}
    # Published data has no IsoFLOP budgets: that figure is a one-line note instead.
    assert drawn == (FIGURES if which == "sweep" else FIGURES - {"isoflop"})
    assert not list(folder.parent.glob(f".{folder.name}.*"))  # no staging folder left


def test_fit_json_has_the_fit_schema_and_runs_csv_the_runs(sweep_report):
    fit = json.loads((sweep_report / "fit.json").read_text())
    assert fit["schema"] == "scaling-analysis/1"
    assert fit["n_runs"] == len(BUDGETS) * len(SIZES)
    # An IsoFLOP design: resampled within its budgets by default (--bootstrap-by auto).
    assert fit["bootstrap"] == {"resamples": 40, "seed": 0, "by": "budget"}
    assert [e["run"] for e in fit["excluded"]] == ["gpt-div"]
    assert {k: v["status"] for k, v in fit["approaches"].items()} == {
        "kaplan": "ok", "1": "ok", "2": "ok", "3": "ok", "interaction": "ok",
        "kaplan_joint": "ok", "quadratic": "ok", "data_constrained": "skipped",
        "data_constrained_interaction": "skipped"}  # no run repeats its data
    # The summary a researcher (or a script) reads first (docs/analysis.md).
    assert set(fit["summary"]["headline"]) >= {
        "approach", "a", "a_ci95", "b", "tokens_per_param", "tokens_per_param_ci95",
        "residual_noise_ratio", "holdout_rel_error"}
    assert set(fit["summary"]["approaches"]) >= {"1", "2", "3", "interaction", "quadratic"}
    runs = pd.read_csv(sweep_report / "runs.csv")
    assert len(runs) == fit["n_runs"] and "div" not in set(runs["run_id"])
    assert {"N", "D", "C", "loss", "budget", "corpus_fingerprint"} <= set(runs.columns)
    md = (sweep_report / "report.md").read_text()
    assert "| gpt-b0s0 | L2 d32 H4 | 100,000 |" in md  # used runs, with their shape
    assert re.search(r"^\| gpt-div \|( — \|){6} diverged \|$", md, re.M)  # and the excluded


# --------------------------------------------------------------------------- HTML


@pytest.mark.parametrize("which", ["sweep", "csv"])
def test_html_is_self_contained(which, sweep_report, csv_report):
    folder = sweep_report if which == "sweep" else csv_report
    html = (folder / "report.html").read_text()
    assert "<script" not in html.lower() and "<link" not in html.lower()
    assert "@import" not in html and "url(" not in html
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)""", html, re.I)
    sources = re.findall(r"""<img[^>]*\ssrc="([^"]*)\"""", html)
    assert len(sources) == len(list((folder / "figures").glob("*.png")))
    for src in sources:
        assert src.startswith("data:image/png;base64,")
    # The embedded images are the figure files, byte for byte.
    embedded = {hashlib.sha256(base64.b64decode(s.split(",", 1)[1])).hexdigest()
                for s in sources}
    files = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (folder / "figures").glob("*")}
    assert embedded == files


def test_html_escapes_text():
    from analysis.reporting.document import Paragraph, to_html

    page = to_html([Paragraph("a <script>x</script> & `<b>` **bold**")], title="t",
                   folder=Path("."))
    assert "<script>x" not in page
    assert "&lt;script&gt;" in page and "<code>&lt;b&gt;</code>" in page
    assert "<strong>bold</strong>" in page


# --------------------------------------------------------------------------- figures


@pytest.mark.parametrize("which", ["sweep", "csv"])
def test_figures_are_valid_pngs(which, sweep_report, csv_report):
    from matplotlib.image import imread

    folder = sweep_report if which == "sweep" else csv_report
    for png in (folder / "figures").glob("*.png"):
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", png.name
        assert len(data) > 1024, png.name
        pixels = imread(png)
        assert pixels.ndim == 3 and min(pixels.shape[:2]) > 300, png.name
        assert float(pixels[..., :3].std()) > 0.01, f"{png.name} is blank"


@pytest.mark.parametrize("n_budgets", [3, 11])
def test_every_budget_has_its_own_colour(n_budgets):
    from analysis.runs.synthetic import isoflop_runs

    runs = isoflop_runs(ChinchillaLaw(), np.logspace(17, 20, n_budgets), seed=0)
    colours = figures.Context(result=None, runs=runs, curves=None).budget_colors()
    assert len(colours) == n_budgets
    assert len(set(colours.values())) == n_budgets  # "colorblind" alone has 10


# --------------------------------------------------------------------------- numbers

NUM = r"(-?[0-9.]+(?:e[+-]?[0-9]+)?)"


def _close(text: str, value: float) -> bool:
    """A number printed with 4 significant digits equals ``value`` (to that precision)."""
    return float(text) == pytest.approx(value, rel=6e-4, abs=1e-12)


def test_summary_numbers_match_fit_json(sweep_report):
    md = (sweep_report / "report.md").read_text()
    fit = json.loads((sweep_report / "fit.json").read_text())
    for name, kind in (("3", "parametric fit"), ("2", "IsoFLOP parabolas"),
                       ("1", "envelope of curves")):
        approach = fit["approaches"][name]
        m = re.search(rf"Approach {name} \({kind}[^)]*\): a = {NUM} \[{NUM}, {NUM}\], "
                      rf"b = {NUM} \[{NUM}, {NUM}\]", md)
        assert m, f"no exponents of Approach {name} in the summary"
        a, a_lo, a_hi, b, b_lo, b_hi = m.groups()
        assert _close(a, approach["a"]) and _close(b, approach["b"])
        assert _close(a_lo, approach["ci95"]["a"][0]) and _close(a_hi, approach["ci95"]["a"][1])
        assert _close(b_lo, approach["ci95"]["b"][0]) and _close(b_hi, approach["ci95"]["b"][1])
        m = re.search(rf"{NUM} \[{NUM}, {NUM}\] \(Approach {name}\)", md)
        assert m, f"no tokens per parameter of Approach {name}"
        assert _close(m.group(1), approach["tokens_per_param"])
        assert _close(m.group(2), approach["ci95"]["tokens_per_param"][0])
    m = re.search(rf"largest compute of the runs \(C = {NUM} FLOPs\)", md)
    assert m and _close(m.group(1), fit["reference_flops"])
    assert "consistent with Chinchilla" in md  # the law has a = 0.5


def test_tables_match_fit_json(sweep_report):
    md = (sweep_report / "report.md").read_text()
    fit = json.loads((sweep_report / "fit.json").read_text())
    three = fit["approaches"]["3"]
    for key in ("E", "alpha", "beta", "loss_opt"):
        m = re.search(rf"^\| {key} \| {NUM} \[{NUM}, {NUM}\] \|$", md, re.M)
        assert m, key
        assert _close(m.group(1), three[key])
        assert _close(m.group(2), three["ci95"][key][0])
    for row in fit["comparison"]:
        if row["estimate"] is None:
            continue
        prefix = re.escape(f"| {row['source']} | {row['quantity']} | {row['approach']} | ")
        m = re.search(prefix + rf"{NUM} \| {NUM} \| \[{NUM}, {NUM}\] \| (yes|no) \|", md)
        assert m, row
        assert _close(m.group(1), row["documented"]) and _close(m.group(2), row["estimate"])
        assert _close(m.group(3), row["ci95"][0]) and _close(m.group(4), row["ci95"][1])
        assert m.group(5) == ("yes" if row["inside"] else "no")
    for name, check in fit["extrapolation"].items():
        if check["status"] != "ok":
            assert f"| {name} | skipped: " in md
            continue
        m = re.search(rf"^\| {name} \| [^|]+ \| {NUM} \| {NUM} \(", md, re.M)
        assert m and _close(m.group(1), check["n_opt_predicted"])
        if check["loss_mean_abs_rel_error"] is not None:
            assert f"{check['loss_mean_abs_rel_error']:.2%} / " in md
    assert fit["agreement"]["status"] == "ok"
    for pair in fit["agreement"]["pairs"]:
        m = re.search(rf"^\| {pair['first']} − {pair['second']} \| {NUM} \[{NUM}, {NUM}\] \| "
                      r"(yes|no) \| (yes|no) \| (yes|no) \|$", md, re.M)
        assert m, pair
        assert _close(m.group(1), pair["difference"])
        assert _close(m.group(2), pair["difference_ci"][0])
        assert [m.group(k) == "yes" for k in (4, 5, 6)] == [
            pair["agree"], pair["overlap"], pair["each_inside_other"]]
        verdict = "agree" if pair["agree"] else "differ"
        assert re.search(rf"{pair['first']} − {pair['second']}: {NUM} \[{NUM}, {NUM}\], "
                         rf"{verdict}", md), "no agreement in the summary"
    for b in fit["approaches"]["2"]["budgets"]:
        if b["ok"]:
            label = re.escape(f"{b['budget']:.4g}")
            m = re.search(rf"^\| {label} \| [^|]+ \| {b['n_runs']} \| {b['n_sizes']} \| "
                          rf"{NUM} \| {NUM} \|", md, re.M)
            assert m and _close(m.group(1), b["n_opt"]) and _close(m.group(2), b["d_opt"])


def test_the_first_lines_say_how_to_regenerate(sweep_report):
    lines = (sweep_report / "report.md").read_text().splitlines()
    assert lines[0] == "# Scaling report: demo"
    assert lines[2].startswith("## Answer at C = ")  # the answer first (issue 55)
    regen = next(line for line in lines if line.startswith("Regenerate with"))
    m = re.fullmatch(r"Regenerate with: `cd (\S+) && (python -m analysis\.report .*)`", regen)
    assert m, regen
    # Outside the checkout: the folder as a committed report may show it, never absolute.
    assert m.group(1) == portable(str(sweep_report.parent.parent.resolve()))
    assert not re.search(r"(^|[\s=])/[^/\s]", regen), regen
    assert "--sweep demo --tracking-uri sqlite:///" in m.group(2)
    assert m.group(2).endswith("--bootstrap 40 --seed 0")


def test_csv_report_is_the_besiroglu_refit(csv_report):
    md = (csv_report / "report.md").read_text()
    fit = json.loads((csv_report / "fit.json").read_text())
    three = fit["approaches"]["3"]
    assert three["alpha"] == pytest.approx(0.3478, rel=0.01)
    assert three["beta"] == pytest.approx(0.3658, rel=0.01)
    assert f"a = {three['a']:.4g} [" in md
    assert "Not available: the runs share no IsoFLOP compute budgets" in md
    assert "Not available: published data has no checkpoints." in md
    regen = next(line for line in md.splitlines() if line.startswith("Regenerate with"))
    assert "--drop-highest-loss 5 --name besiroglu" in regen


# --------------------------------------------------------------------------- samples and provenance


def test_samples_and_their_failure_are_reported(sweep_report):
    md = (sweep_report / "report.md").read_text()
    section = md.split("## Text samples", 1)[1].split("## Provenance", 1)[0]
    assert "**smallest model**: gpt-b3s0" in section and SAMPLE_TEXT in section
    assert ("**largest model**: gpt-b3s6 (run_id `b3s6`, N = 6,400,000): the sample could not "
            f"be produced: `pipeline.sample` failed: "
            f"{SAMPLE_ERROR.replace('/nowhere/run1', '&lt;local>/run1')}") in section


def test_sample_command_is_an_argument_list():
    import os

    cmd = samples.sample_command("abc123", "def ", "sqlite:///x.db")
    assert cmd[:6] == [sys.executable, "-m", "analysis.child", str(os.getpid()),
                       "pipeline.sample", "--run-id"]
    assert cmd[cmd.index("--run-id") + 1] == "abc123" and cmd[cmd.index("--prompt") + 1] == "def "
    assert cmd[cmd.index("--max-new-tokens") + 1] == "200"
    assert cmd[cmd.index("--tracking-uri") + 1] == "sqlite:///x.db"
    assert "--corpus" not in cmd  # a corpus only the ledger names is not read (untrusted.md)
    cmd = samples.sample_command("abc123", "def ", None, corpus="/data/my corpus.txt")
    assert cmd[cmd.index("--corpus") + 1] == "/data/my corpus.txt"


def test_the_corpus_a_sweep_file_names_is_the_one_its_runs_record(tmp_path):
    """The report passes the sweep file's corpus to pipeline.sample, which reads it only if
    it equals the recorded one: same spelling as a sweep records (absolute)."""
    from pipeline.config import load_sweep
    from pipeline.planned_view import sweep_file_corpus as sweep_corpus
    from pipeline.planner import data_spec_for

    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("hello " * 100)
    sweep = tmp_path / "s.yaml"
    sweep.write_text((ROOT / "sweeps" / "quickstart.yaml").read_text()
                     .replace("corpus: stdlib", "corpus: texts", 1))
    assert sweep_corpus(sweep) == str(tmp_path / "texts")
    assert sweep_corpus(sweep) == data_spec_for(load_sweep(sweep), sweep).corpus
    sweep.write_text("not: a sweep\n")
    assert sweep_corpus(sweep) is None


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_a_sample_dies_with_the_report_process(tmp_path):
    """The report's process is SIGKILLed: its sample subprocess must not live on."""
    import os
    import signal
    import time

    pid_file = tmp_path / "child.pid"
    (tmp_path / "sleeper.py").write_text(
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(60)\n")
    # A stand-in report process: starts a "sample" through analysis.child, then waits.
    parent_code = ("import os, subprocess, sys, time\n"
                   "subprocess.Popen([sys.executable, '-m', 'analysis.child', str(os.getpid()), "
                   "'sleeper'])\n"
                   "time.sleep(60)\n")
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(root)]))
    parent = subprocess.Popen([sys.executable, "-c", parent_code], env=env)
    child = None
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert _alive(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the sample subprocess outlived the killed report process"
    finally:
        if parent.poll() is None:
            parent.kill()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_sample_that_hangs_is_cut_off(monkeypatch):
    monkeypatch.setattr(samples, "sample_command", lambda *a: [
        sys.executable, "-c", "import time; time.sleep(60)"])
    jobs = samples.SampleJobs([("smallest model", "r1", "r1", 1e5)], prompt="def ",
                              tracking_uri=None, timeout_s=1.0)
    (sample,) = jobs.results()
    assert sample.text is None and "timed out after 1 s" in sample.error
    assert all(proc.poll() is not None for _, proc in jobs.jobs)


def test_a_run_that_recorded_its_sample_starts_no_process(tmp_path, monkeypatch):
    """A finished run's own sample (keys.TAG_SAMPLE, of the report's prompt) is read from the
    store; a run without one, or another prompt, is sampled by `pipeline.sample` as before."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("s")
    for rid, tags in (("withsample", {keys.TAG_SAMPLE: "def f(): pass",
                                      keys.TAG_SAMPLE_PROMPT: keys.SAMPLE_PROMPT}),
                      ("without", {})):
        run = client.create_run(exp, tags={keys.TAG_RUN_ID: rid,
                                           keys.TAG_STATUS: keys.STATUS_FINISHED, **tags})
        client.set_terminated(run.info.run_id)
    assert samples.recorded_samples(["withsample", "without"], uri, keys.SAMPLE_PROMPT) == {
        "withsample": "def f(): pass"}
    assert samples.recorded_samples(["withsample"], uri, "class ") == {}
    started = []
    monkeypatch.setattr(samples, "sample_command", lambda run_id, *a: started.append(run_id) or [
        sys.executable, "-c", "print('sampled by a process')"])
    picked = [("smallest model", "withsample", "a", 1e4), ("largest model", "without", "b", 1e6)]
    jobs = samples.SampleJobs(picked, prompt=keys.SAMPLE_PROMPT, tracking_uri=uri,
                              recorded=samples.recorded_samples(["withsample", "without"], uri,
                                                                keys.SAMPLE_PROMPT))
    small, large = jobs.results()
    assert started == ["without"]
    assert small.text == "def f(): pass" and large.text == "sampled by a process"


def test_provenance_names_code_data_and_machine(sweep_report):
    md = (sweep_report / "report.md").read_text()
    section = md.split("## Provenance", 1)[1]
    sweep_file = sweep_report.parent.parent / "demo.yaml"
    digest = hashlib.sha256(sweep_file.read_bytes()).hexdigest()
    # <local> is escaped: a Markdown renderer would take it for an HTML tag and hide it
    assert (f"sweep file: {markdown_inline(portable(str(sweep_file.resolve())))} "
            f"(sha256 {digest})") in section
    assert "&lt;local>/demo.yaml" in section and str(sweep_report.parent.parent) not in section
    assert "name: demo" in section  # the sweep file itself
    assert f"corpus fingerprint (sha256): {'c0ffee' * 4}" in section
    assert "corpus: stdlib; tokenizer: bytes" in section
    assert re.search(r"code: git commit ([0-9a-f]{40}|unknown)", section)
    for package in ("python", "numpy", "scipy", "pandas", "seaborn", "mlflow"):
        assert re.search(rf"\b{package} \d", section), package
    assert re.search(r"machine: .*\d+ CPUs", section) and "date: 20" in section


# --------------------------------------------------------------------------- atomic write


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_failed_report_leaves_the_previous_one_intact(sweep_report, store, tmp_path,
                                                        monkeypatch, capsys):
    target = tmp_path / "demo"
    shutil.copytree(sweep_report, target)
    before = _snapshot(target)

    def boom(ctx):
        raise RuntimeError("figure failed")

    monkeypatch.setattr(figures, "approach3_figure", boom)  # after 3 figures were written
    monkeypatch.setattr(samples, "sample_command", _fake_sampler)
    with pytest.raises(RuntimeError, match="figure failed"):
        report.main(["--sweep", "demo", "--tracking-uri", store, "--out", str(target),
                     "--bootstrap", "0"])
    assert _snapshot(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]  # no partial folder


def test_a_new_report_replaces_the_old_one(sweep_report, store, tmp_path, monkeypatch,
                                          capsys):
    target = tmp_path / "demo"
    shutil.copytree(sweep_report, target)
    (target / "stale.txt").write_text("from an older report")
    (target / "ledger.tar.gz").write_bytes(b"the committed ledger")  # pipeline.ledger pack
    monkeypatch.setattr(samples, "sample_command", _fake_sampler)
    assert report.main(["--sweep", "demo", "--tracking-uri", store, "--out", str(target),
                        "--bootstrap", "0"]) == 0
    assert not (target / "stale.txt").exists() and (target / "report.html").exists()
    assert (target / "ledger.tar.gz").read_bytes() == b"the committed ledger"  # kept
    assert capsys.readouterr().out.splitlines()[-1] == str((target / "report.html").resolve())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]


def test_refuses_to_replace_a_folder_that_is_not_a_report(tmp_path, capsys):
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    code = report.main([*EPOCH_ARGS, "--out", str(precious), "--bootstrap", "0"])
    assert code == 2
    assert "holds no report" in capsys.readouterr().err
    assert (precious / "thesis.tex").read_text() == "years of work"


def test_report_modules_never_import_torch():
    code = ("import sys, analysis.report, analysis.reporting.figures, analysis.reporting.samples, "
            "analysis.reporting.provenance, analysis.reporting.document, analysis.reporting.sections, analysis.child\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_trust_sections_degrade_to_one_line_without_seeds_holdout_or_wsd(sweep_report):
    md = (sweep_report / "report.md").read_text()
    assert "## Run-to-run noise\n\nNot measured: no seed replicates" in md
    assert "## Held-out budget\n\nNot tested: no held-out runs (no run has role 'holdout')." in md
    assert ("- **Held-out budget**: not tested: no held-out runs (no run has role "
            "'holdout').") in md
    assert "WSD branches" not in md and "**Run-to-run noise**" not in md
    # The backtests lead, right after the summary: no held-out cells here, and a rolling
    # origin over the sweep's budgets (analysis.reporting.backtest).
    first = md.split("## Summary", 1)[1].split("\n## ", 2)[1]
    assert first.startswith("Backtests: predicting compute that was not fitted")
    assert "Held-out cells: none (no held-out runs" in first and "**Rolling origin**" in first
    # The sweep records non-embedding N and exact FLOPs: all four conventions are refitted.
    conventions = md.split("## Conventions\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in conventions.splitlines() if line.startswith("| N = ")
            or line.startswith("| non-embedding")]
    assert len(rows) == 4 and "skipped" not in conventions


def test_the_export_beside_a_sweep_report_regenerates_it_without_the_store(sweep_report,
                                                                           tmp_path):
    """runs_export.json alone (no MLflow store) gives the same fit.json and runs.csv, byte
    for byte, and the same report.md up to the text samples (they need the checkpoints;
    the provenance then says where and when this report was made) but for how to
    regenerate it."""
    export = sweep_report / "runs_export.json"
    md = (sweep_report / "report.md").read_text()
    assert "Or without the MLflow store, from the runs and curves exported beside this report: " \
           "`cd " in md and "--export reports/demo/runs_export.json" in md
    out = tmp_path / "again"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report, "print", lambda *a, **k: None, raising=False)
        assert report.main(["--export", str(export), "--out", str(out), "--sweep-file",
                            str(sweep_report.parent.parent / "demo.yaml"),
                            "--bootstrap", "40"]) == 0
    for name in ("fit.json", "runs.csv", "runs_export.json"):
        assert (out / name).read_bytes() == (sweep_report / name).read_bytes(), name

    def body(text: str) -> list[str]:
        lines = text.split("## Text samples")[0].splitlines()  # then samples, provenance
        return [x for x in lines if x and not x.startswith(("Regenerate with:", "Or without"))]

    again = (out / "report.md").read_text()
    import difflib
    assert body(again) == body(md), "\n".join(difflib.unified_diff(body(md), body(again)))
    assert "Not available: the report was made from an export" in again
    assert "# Scaling report: demo" in again  # the name comes from the export


@pytest.mark.parametrize(("text", "pattern"), [
    ("{", "cannot read as a runs export"),
    ('{"format": "other"}', "not a runs export"),
    ('{"format": "scaling-runs-export", "version": 9}', "export version 9"),
    ('{"format": "scaling-runs-export", "version": 1, "name": "x", "source": "s", '
     '"n_convention": "n", "c_convention": "6nd", "excluded": [], "runs": []}',
     "field 'runs': expected an object"),
    ('{"format": "scaling-runs-export", "version": 1, "name": "x", "source": "s", '
     '"n_convention": "n", "c_convention": "6nd", "excluded": [], '
     '"runs": {"columns": "N", "dtypes": [], "rows": []}}',
     "columns and dtypes must be lists of strings"),
    ('{"format": "scaling-runs-export", "version": 1, "name": "x", "source": "s", '
     '"n_convention": "n", "c_convention": "6nd", "excluded": [], '
     '"runs": {"columns": ["N"], "dtypes": ["float64"], "rows": [[1.0]]}}',
     "field 'runs': s: runs table lacks column(s)"),
])
def test_a_bad_export_is_one_line_naming_the_file(tmp_path, capsys, text, pattern):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    assert report.main(["--export", str(bad), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}") and pattern in err, err
    assert not (tmp_path / "r").exists()


def test_a_report_of_unchanged_inputs_is_kept_and_any_change_remakes_it(sweep_report,
                                                                       tmp_path, capsys,
                                                                       monkeypatch):
    """Issue 21: re-running a finished sweep reuses its report; the key covers the runs, the
    options and the code, and a folder missing a file of the report is made again."""
    from analysis.reporting import reuse

    export, out = sweep_report / "runs_export.json", tmp_path / "r"
    args = ["--export", str(export), "--out", str(out), "--bootstrap", "0"]

    def made(extra: list[str] = ()) -> bool:
        assert report.main([*args, *extra]) == 0
        err = capsys.readouterr().err
        assert ("kept: it was made from the same" in err) != ("written in" in err), err
        return "written in" in err

    assert made()
    key = (out / reuse.KEY_FILE).read_text().split()[0]
    before = _snapshot(out)
    assert not made() and _snapshot(out) == before  # nothing rewritten
    assert made(["--force"])
    assert made(["--seed", "1"]) and (out / reuse.KEY_FILE).read_text().split()[0] != key
    assert not made(["--seed", "1", "--jobs", "3"])  # processes do not change the report
    monkeypatch.setattr(reuse, "code_digest", lambda: "an edited fit")
    assert made(["--seed", "1"])
    (out / "fit.json").unlink()
    assert made(["--seed", "1"]) and (out / "fit.json").is_file()
