"""Bad input to the commands, not only to sweep files: one line that names what is wrong, exit
status 2, no traceback, and nothing left behind (read-only commands never create a store)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.cli import run_main
from analysis.fit import main as fit_main

ROOT = Path(__file__).resolve().parent.parent
EPOCH = ROOT / "tests" / "data" / "chinchilla_epoch_fig4.csv"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


BAD_RECORD = {  # a sweep whose corpus has a line that is not JSON
    "bad.jsonl": b'{"text": "fine"}\nnot json\n',
    "s.yaml": b"name: bad\nkind: isoflop\nfamily: gpt\nshape: {head_dim: 8}\n"
              b"data: {corpus: bad.jsonl, seq_len: 32}\n"
              b"isoflop: {budgets: [3.0e+9], sizes: {shapes: [{n_layer: 1, d_model: 16}]}}\n",
}
CASES = {
    # name: (files to create, command, what the one line must say)
    "fit on a binary CSV": ({"runs.csv": b"N,D,L\n\xff\xfe,1,2\n"},
                            ["analysis.fit", "--csv", "runs.csv"],
                            "runs.csv: not UTF-8 text (byte b'\\xff' at offset 0)"),
    "fit on a CSV of other columns": ({"runs.csv": b"a,b\n1,2\n"},
                                      ["analysis.fit", "--csv", "runs.csv"], "runs.csv"),
    "report into a folder under a file": ({"file": b"x"},
                                          ["analysis.report", "--csv", str(EPOCH), "--out",
                                           "file/report", "--bootstrap", "0"],
                                          "file is a file, not a folder"),
    "sample without a ledger": ({}, ["pipeline.sample", "--run-id", "nosuch"],
                                "no MLflow store at sqlite:///"),
    "fit of a sweep without a ledger": ({}, ["analysis.fit", "--sweep", "nosuch"],
                                        "no MLflow store at sqlite:///"),
    "sweep on a corpus with a bad record": ({**BAD_RECORD, "cache/.keep": b""},
                                            ["pipeline.sweep", "s.yaml", "--dry-run"],
                                            "s.yaml: data: corpus file"),
    "prepare of a corpus with a bad record": ({**BAD_RECORD, "cache/.keep": b""},
                                              ["pipeline.data", "prepare", "s.yaml",
                                               "--cache-dir", "cache"],
                                              "bad.jsonl' line 2 is not JSON"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_one_line_and_leaves_nothing(name: str, tmp_path: Path) -> None:
    files, args, says = CASES[name]
    for rel, content in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(content)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    done = _run(args, tmp_path)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and says in errors[0], done.stderr[-2000:]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_no_csv_gives_a_traceback(content: bytes) -> None:
    """Any bytes as --csv: a fit (exit 0) or one error (exit 2), never an exception."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.csv"
        path.write_bytes(content)
        assert run_main(fit_main, ["--csv", str(path), "--bootstrap", "0"]) in (0, 2)
        assert [p.name for p in Path(tmp).iterdir()] == ["runs.csv"]
