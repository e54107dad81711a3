"""The single-run CLI and the sampler as a hostile user (or an imported ledger) drives them.

Every absurd option: exit status 2, one `error: ...` line naming the option, no traceback,
and nothing created: no MLflow store, no run, no checkpoint folder, no token cache. A run
stopped by Ctrl-C or SIGTERM ends KILLED in MLflow, never RUNNING. pipeline.sample reads no
corpus that only the ledger names. Most calls are in-process (main(argv)); one subprocess
checks the whole command: no traceback, and the refusal's wall time with the imports.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mlflow import MlflowClient

from pipeline.data import CACHE_ENV
from pipeline.sample import SampleError, check_corpus
from pipeline.sample import main as sample_main
from pipeline.train.checks import (
    MAX_STEPS,
    OptionError,
    check_device,
    check_memory,
    check_steps,
)
from pipeline.train.cli import main as train_main
from pipeline.vocab import keys
from pipeline.vocab.families import make_config
from pipeline.vocab.spec import DataSpec, RunSpec, TrainSpec

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--n-layer", "1", "--d-model", "16", "--seq-len", "32", "--batch-size", "4",
        "--device", "cpu"]
"""A model trained in ~1 s: 1 layer, width 16, 4 x 32 tokens a step."""


def call(main: Callable[[list[str]], int], argv: list[str]) -> int:
    """main's exit status, argparse's own refusals (SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty folder whose default MLflow store and token cache are inside it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path


def assert_refused(status: int, err: str, option: str, folder: Path,
                   before: list[Path] | None = None) -> None:
    assert status == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert option in lines[0], err
    assert sorted(folder.rglob("*")) == (before or []), "the refusal created files"


TRAIN_CASES: dict[str, tuple[list[str], str]] = {
    # name: (argv, the option the error line must name)
    "n-layer 10000": (["--n-layer", "10000"], "--n-layer 10000"),
    "n-layer 0": (["--n-layer", "0"], "--n-layer 0"),
    "d-model 0": (["--d-model", "0"], "--d-model 0"),
    "tokens 1e15": (["--tokens", "1e15"], "--tokens 1e+15"),
    "tokens 0": (["--tokens", "0"], "--tokens 0"),
    "tokens -5": (["--tokens", "-5"], "--tokens -5"),
    "tokens inf": (["--tokens", "inf"], "--tokens inf"),
    "tokens nan": (["--tokens", "nan"], "--tokens nan"),
    "tokens under half a step": (["--tokens", "100"], "--tokens 100"),
    "seq-len 0": (["--seq-len", "0"], "--seq-len 0"),
    "head-dim 0": (["--head-dim", "0"], "--head-dim 0"),
    "head-dim odd": (["--head-dim", "3"], "--head-dim 3"),
    "d-model not a multiple of head-dim": (["--d-model", "30"], "--d-model 30"),
    "batch-size 0": (["--batch-size", "0"], "--batch-size 0"),
    "batch-size -1": (["--batch-size", "-1"], "--batch-size -1"),
    "lr nan": (["--lr", "nan"], "--lr nan"),
    "lr inf": (["--lr", "inf"], "--lr inf"),
    "lr 0": (["--lr", "0"], "--lr 0"),
    "threads 0": (["--threads", "0"], "--threads 0"),
    "threads above the CPUs": (["--threads", "100000"], "--threads 100000: more than this machine"),
    "seed -1": (["--seed", "-1"], "--seed -1"),
    "warmup as long as the run": (["--tokens", "1e5", "--warmup-steps", "49"],
                                  "--warmup-steps 49"),
    "warmup -1": (["--warmup-steps", "-1"], "--warmup-steps -1"),
    "checkpoint-interval -1": (["--checkpoint-interval", "-1"], "--checkpoint-interval -1"),
    "val-fraction nan": (["--val-fraction", "nan"], "--val-fraction nan"),
    "experiment ../../x": (["--experiment", "../../x"], "--experiment '../../x'"),
    "experiment /abs/x": (["--experiment", "/abs/x"], "--experiment '/abs/x'"),
    "experiment empty": (["--experiment", ""], "--experiment ''"),
    "experiment hidden": (["--experiment", ".x"], "--experiment '.x'"),
    "experiment with a backslash": (["--experiment", "a\\b"], "--experiment"),
    "experiment with NUL": (["--experiment", "a\0b"], "--experiment"),
    "checkpoint-dir with NUL": (["--checkpoint-dir", "a\0b"], "--checkpoint-dir"),
    "device bogus": (["--device", "bogus"], "--device 'bogus'"),
    "device cuda:99": (["--device", "cuda:99"], "--device cuda:99"),
    "model too big for memory": (["--n-layer", "500", "--d-model", "8192"], "--n-layer 500"),
    "activations too big for memory": (["--batch-size", "1000000", "--tokens", "1e9"],
                                       "--batch-size 1000000"),
    "not an integer": (["--n-layer", "abc"], "--n-layer"),
}


@pytest.mark.parametrize("name", list(TRAIN_CASES))
def test_train_refuses_an_absurd_option_in_one_line_creating_nothing(
        name: str, isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, option = TRAIN_CASES[name]
    started = time.process_time()  # CPU: a loaded machine stretches wall time
    status = call(train_main, argv)
    assert time.process_time() - started < 1.0  # checked before any data, model or store
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_refused(status, captured.err, option, isolated)


def test_a_checkpoint_dir_that_is_a_file_is_refused(
        isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (isolated / "file").write_text("x")
    status = call(train_main, ["--checkpoint-dir", "file"])
    assert_refused(status, capsys.readouterr().err, "--checkpoint-dir 'file'", isolated,
                   [isolated / "file"])


def test_the_step_cap_admits_max_steps_and_no_more() -> None:
    assert check_steps(MAX_STEPS * 2048.0, 2048, "tokens", None) == MAX_STEPS
    with pytest.raises(OptionError, match="more than 10,000,000"):
        check_steps((MAX_STEPS + 1) * 2048.0, 2048, "tokens", None)
    assert check_steps(1025.0, 2048, "tokens", 0) == 1  # over half a step rounds to one
    with pytest.raises(OptionError, match="rounds to 0 steps"):
        check_steps(1024.0, 2048, "tokens", None)


SAMPLE_CASES: dict[str, tuple[list[str], str]] = {
    "temperature nan": (["--temperature", "nan"], "--temperature nan"),
    "temperature inf": (["--temperature", "inf"], "--temperature inf"),
    "temperature -1": (["--temperature", "-1"], "--temperature -1"),
    "top-p 0": (["--top-p", "0"], "--top-p 0"),
    "top-p 2": (["--top-p", "2"], "--top-p 2"),
    "top-p nan": (["--top-p", "nan"], "--top-p nan"),
    "top-k -1": (["--top-k", "-1"], "--top-k -1"),
    "max-new-tokens 0": (["--max-new-tokens", "0"], "--max-new-tokens 0"),
    "max-new-tokens 1e9": (["--max-new-tokens", "1000000000"], "--max-new-tokens"),
    "device bogus": (["--device", "bogus"], "--device 'bogus'"),
    "device cuda:99": (["--device", "cuda:99"], "--device cuda:99"),
    "prompt not UTF-8": (["--prompt", "\udcff"], "--prompt"),
}


@pytest.mark.parametrize("name", list(SAMPLE_CASES))
def test_sample_refuses_an_absurd_option_in_one_line_creating_nothing(
        name: str, isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, option = SAMPLE_CASES[name]
    status = call(sample_main, ["--run-id", "abc123", *argv])
    assert_refused(status, capsys.readouterr().err, option, isolated)


@pytest.mark.parametrize(("corpus", "tokenizer", "named", "allowed"), [
    ("stdlib", "chars", None, True),  # built in: nothing the ledger chose
    ("images:digits", "chars", None, True),
    ("/elsewhere/corpus.jsonl", "bytes", None, True),  # bytes: no corpus is read
    ("/elsewhere/corpus.jsonl", "bpe", None, False),
    ("/elsewhere/corpus.jsonl", "bpe", "/elsewhere/corpus.jsonl", True),
    ("/elsewhere/corpus.jsonl", "bpe", "path:/elsewhere/./corpus.jsonl", True),  # same path
    ("/elsewhere/corpus.jsonl", "bpe", "/elsewhere/other.jsonl", False),
    ("/elsewhere/corpus.jsonl", "bytes", "/elsewhere/other.jsonl", False),  # not the run's
    ("hf:someone/data", "bpe", None, False),  # a download the ledger chose
    ("hf:someone/data", "bpe", "hf:someone/data", True),
    ("images:folder:/elsewhere/pics", "chars", None, False),
])
def test_sample_reads_a_corpus_only_when_built_in_or_named(
        corpus: str, tokenizer: str, named: str | None, allowed: bool) -> None:
    spec = RunSpec(sweep="s", model=make_config("gpt", 1, 16, vocab_size=256, seq_len=32),
                   data=DataSpec(corpus=corpus, tokenizer=tokenizer), train=TrainSpec(),
                   steps=1)
    if allowed:
        check_corpus(spec, named)
    else:
        with pytest.raises(SampleError, match="--corpus"):
            check_corpus(spec, named)


def test_a_cuda_device_is_checked_against_the_gpus_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine with two 1 GiB GPUs: cuda:5 names the ones there; a model too big for
    a GPU's own memory is refused with that GPU's numbers."""
    import torch

    class Props:
        total_memory, name = 2**30, "Test GPU"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: Props())
    with pytest.raises(OptionError, match=r"--device cuda:5: this machine has 2 CUDA device"):
        check_device("cuda:5")
    device = check_device("cuda:1")
    assert str(device) == "cuda:1"
    big = make_config("gpt", 8, 1024, vocab_size=256, seq_len=128)  # ~100M parameters
    with pytest.raises(OptionError, match=r"more than 90% of the 1.0 GiB of GPU cuda:1"):
        check_memory(big, 16, False, device, "--n-layer 8")


# --- runs in a ledger ------------------------------------------------------------------------


def _write_corpus(path: Path, seed: int) -> Path:
    """60 records of pseudo-words (~12 KB) as .jsonl: one document a record."""
    rng = random.Random(seed)
    words = ["def", "return", "self", "value", "import", "class", "for", "in", "if", "None"]
    path.write_text("".join(json.dumps({"text": " ".join(rng.choice(words) for _ in range(40))})
                            + "\n" for _ in range(60)), "utf-8")
    return path


class RunStore:
    """An MLflow store in a folder, and the runs the tests trained into it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.uri = f"sqlite:///{folder / 'mlflow.db'}"
        self.env = {"MLFLOW_TRACKING_URI": self.uri, CACHE_ENV: str(folder / "cache")}
        self.run_ids: dict[str, str] = {}
        self.err = ""

    def train(self, name: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> int:
        """The CLI's exit status; what it wrote to stderr is kept in self.err."""
        status = train_main([*TINY, "--checkpoint-dir", str(self.folder / "checkpoints"),
                             *argv])
        out, self.err = capsys.readouterr()
        if status == 0:
            self.run_ids[name] = json.loads(out[out.index("{"):])["run_id"]
        return status


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunStore]:
    """A store that two runs are trained into: one with the byte tokenizer (its corpus file
    then deleted, as on a machine the ledger was imported to) and one with chars."""
    folder = tmp_path_factory.mktemp("ledger")
    led = RunStore(folder)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in led.env.items():
            mp.setenv(key, value)
        yield led


def _trained(ledger: RunStore, name: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The run_id of the ledger's `name` run ("bytes" or "chars"), trained on first use."""
    if name not in ledger.run_ids:
        corpus = _write_corpus(ledger.folder / f"{name}.jsonl", seed=len(ledger.run_ids))
        assert ledger.train(name, ["--tokens", "2560", "--tokenizer", name, "--corpus",
                                   str(corpus), "--experiment", f"runs-{name}"], capsys) == 0
        if name == "bytes":
            corpus.unlink()  # the ledger names a corpus this machine does not have
    return ledger.run_ids[name]


def test_sample_reads_no_corpus_for_a_byte_tokenizer_run(
        ledger: RunStore, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = _trained(ledger, "bytes", capsys)
    assert sample_main(["--run-id", run_id, "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith(keys.SAMPLE_PROMPT)


def test_sample_refuses_a_corpus_only_the_ledger_names(
        ledger: RunStore, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = _trained(ledger, "chars", capsys)
    corpus = str(ledger.folder / "chars.jsonl")
    before = sorted(ledger.folder.rglob("*"))

    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("pipeline.sample read a corpus only the ledger names")

    with monkeypatch.context() as mp:
        mp.setattr("pipeline.sample.load_data", no_read)
        status = sample_main(["--run-id", run_id, "--max-new-tokens", "5"])
        err = capsys.readouterr().err
        assert_refused(status, err, "--corpus", ledger.folder, before)
        assert corpus in err
        status = sample_main(["--run-id", run_id, "--corpus", str(ledger.folder / "other")])
        assert_refused(status, capsys.readouterr().err, "--corpus", ledger.folder, before)
    # Named by the user (the report, from its own sweep file): read, and sampled.
    assert sample_main(["--run-id", run_id, "--max-new-tokens", "5", "--corpus", corpus]) == 0
    assert capsys.readouterr().out.startswith(keys.SAMPLE_PROMPT)


def _mlflow_run(ledger: RunStore, experiment: str) -> tuple[str, str]:
    """(MLflow status, status tag) of the one run of `experiment`."""
    client = MlflowClient(tracking_uri=ledger.uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    [run] = client.search_runs([exp.experiment_id])
    return run.info.status, run.data.tags[keys.TAG_STATUS]


def test_a_run_stopped_by_sigterm_ends_killed_not_running(
        ledger: RunStore, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM in training (as `timeout` or a scheduler sends it) stops the run at the next
    step boundary, checkpointed, and it ends KILLED (resumed by the same command)."""
    _trained(ledger, "chars", capsys)  # its corpus and token cache

    def sigterm_at_step_3(spec: object) -> Callable[[int], None]:
        def hook(done: int) -> None:
            if done == 3:
                os.kill(os.getpid(), signal.SIGTERM)
        return hook

    def reached_the_test(signum: int, frame: object) -> None:  # the CLI's handler missing
        raise RuntimeError("SIGTERM was not handled by the CLI")

    argv = ["--tokens", "2560", "--tokenizer", "chars", "--corpus",
            str(ledger.folder / "chars.jsonl"), "--experiment", "stopped", "--seed", "1"]
    monkeypatch.setattr("pipeline.trial._step_hooks", sigterm_at_step_3)
    previous = signal.signal(signal.SIGTERM, reached_the_test)  # never the default: it kills
    try:
        assert ledger.train("stopped", argv, capsys) == 130, ledger.err
        assert signal.getsignal(signal.SIGTERM) is reached_the_test  # the CLI's is gone
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert "stopped: run" in ledger.err and "Traceback" not in ledger.err
    assert _mlflow_run(ledger, "stopped") == ("KILLED", keys.STATUS_KILLED)


def test_an_interrupt_before_training_begins_still_closes_the_run(
        ledger: RunStore, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupt after the run was created and marked RUNNING, before the trial records
    anything: the CLI closes the MLflow run KILLED on its way out."""
    from pipeline.tracking import MLflowTracker

    def interrupted(spec: object, uri: str, mlflow_run_id: str, *args: object) -> dict:
        MLflowTracker(uri, mlflow_run_id).start_attempt()  # RUNNING, tag running
        raise KeyboardInterrupt

    _trained(ledger, "chars", capsys)  # its corpus and token cache
    monkeypatch.setattr("pipeline.trial.execute_trial", interrupted)
    argv = ["--tokens", "2560", "--tokenizer", "chars", "--corpus",
            str(ledger.folder / "chars.jsonl"), "--experiment", "interrupted"]
    assert ledger.train("interrupted", argv, capsys) == 130
    assert _mlflow_run(ledger, "interrupted") == ("KILLED", keys.STATUS_KILLED)


# --- the whole command ----------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def refusal_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Refusal]:
    """`python -m pipeline.train --n-layer 10000` as a user runs it, started with the
    module's first test and collected by the last: its ~3.5 s of imports overlap the
    in-process tests on the second core."""
    folder = tmp_path_factory.mktemp("command")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
           CACHE_ENV: str(folder / "cache"), "PYTHONPATH": str(ROOT)}
    refusal = Refusal(folder, ["pipeline.train", "--n-layer", "10000"], env)
    try:
        yield refusal
    finally:
        refusal.stop()


class Refusal:
    """A command in a subprocess, timed by a thread that waits for it."""

    def __init__(self, folder: Path, argv: list[str], env: dict[str, str]) -> None:
        self.folder = folder
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=folder, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.out = self.err = ""
        self.wall = math.inf
        self.waiter = threading.Thread(target=self._wait, daemon=True)
        self.waiter.start()

    def _wait(self) -> None:
        self.out, self.err = self.proc.communicate()
        self.wall = time.monotonic() - self.started

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.waiter.join()


def test_the_command_refuses_quickly_without_a_traceback(refusal_process: Refusal) -> None:
    """Imports included, an absurd option ends in well under the issue's 15 s: exit 2, one
    error line, no traceback, nothing created (no store, no checkpoint folder)."""
    refusal_process.waiter.join(timeout=60)
    assert refusal_process.out == ""
    assert_refused(refusal_process.proc.returncode, refusal_process.err, "--n-layer 10000",
                   refusal_process.folder)
    assert refusal_process.wall < 15.0, f"{refusal_process.wall:.1f} s"
