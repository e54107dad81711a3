"""No input gives a traceback or leaves a file behind: one property-based test per kind of
input the commands take (issue 22): a CSV of runs, a sweep file, a runs export, a run id and
an output path. Each drives the command's own `main` in-process (the same code as `python -m`)
in an empty folder and asserts: exit status 0 or 2, never an exception; on 2 an `error:` line
and the folder exactly as it was (a read-only command never creates a store).

The inputs are arbitrary bytes and, what finds more, valid files with one field replaced by an
arbitrary YAML/JSON value, deleted, or joined by an unknown key. Argument strings carry no NUL
(an argv cannot hold one). HYPOTHESIS_EXAMPLES raises the example count for a longer hunt.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
EPOCH = ROOT / "tests" / "data" / "chinchilla_epoch_fig4.csv"
EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "25"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

ARG_TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                   max_size=40)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12)
    | st.floats(allow_nan=True, allow_infinity=True) | ARG_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ARG_TEXT, inner, max_size=3),
    max_leaves=6)


@contextlib.contextmanager
def _in_empty_folder() -> Iterator[Path]:
    """An empty current folder and no MLFLOW_TRACKING_URI: the commands' default store is
    ./mlflow.db, which a bad input must not create."""
    old_cwd, old_uri = Path.cwd(), os.environ.pop("MLFLOW_TRACKING_URI", None)
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            yield Path(tmp)
        finally:
            os.chdir(old_cwd)
            if old_uri is not None:
                os.environ["MLFLOW_TRACKING_URI"] = old_uri


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _check(main: Callable[[list[str]], int], argv: list[str], folder: Path) -> int:
    """Run main(argv); assert 0, or 2 with an error line and the folder unchanged."""
    before = _files(folder)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's own usage errors exit 2 with a message
            code = e.code if isinstance(e.code, int) else 1
    assert code in (0, 2), f"exit {code} for {argv}: {err.getvalue()[-1500:]}"
    if code == 2:
        assert "error: " in err.getvalue(), err.getvalue()[-1500:]
        assert _files(folder) == before, f"{argv} left files behind: {err.getvalue()[-800:]}"
    return code


def _mutated(base: dict, paths: list[tuple[str, ...]]) -> st.SearchStrategy[dict]:
    """base with one field (at any of paths) replaced by an arbitrary value or deleted, or with
    an unknown key added at the top or in a section."""

    def build(draw: st.DrawFn) -> dict:
        doc = json.loads(json.dumps(base))
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(VALUES)
        elif action == "delete":
            del parent[path[-1]]
        else:
            parent[draw(ARG_TEXT)] = draw(VALUES)
        return doc

    return st.composite(build)()


def _leaf_paths(doc: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if not isinstance(doc, dict):
        return [prefix]
    out = [prefix + (k,) for k in doc]
    for k, v in doc.items():
        if isinstance(v, dict):
            out += _leaf_paths(v, prefix + (k,))
    return out


# -- a sweep file: python -m pipeline.sweep FILE --dry-run ------------------------------------

SWEEP = {
    "name": "fuzz", "kind": "isoflop", "family": "gpt", "shape": {"head_dim": 8},
    "data": {"corpus": "corpus", "tokenizer": "bytes", "seq_len": 16},
    "train": {"batch_size": 4, "lr": 3.0e-3, "evals_per_run": 2, "eval_batches": 2},
    "resources": {"num_cpus": 1},
    "isoflop": {"budgets": [2.0e8], "sizes": {"shapes": [{"n_layer": 1, "d_model": 8}]}},
}
CORPUS = {f"m{i}.py": (f"def f{i}(x):\n    return x + {i}\n" * 200).encode() for i in range(4)}


def _write_corpus(folder: Path) -> None:
    """The sweep's corpus: 4 documents (a train/validation split needs at least 2)."""
    (folder / "corpus").mkdir()
    for name, text in CORPUS.items():
        (folder / "corpus" / name).write_bytes(text)


@SETTINGS
@given(st.binary(max_size=300) | _mutated(SWEEP, _leaf_paths(SWEEP)).map(
    lambda d: yaml.safe_dump(d, allow_unicode=True).encode()))
def test_no_sweep_file_gives_a_traceback(content: bytes) -> None:
    from pipeline.sweep import main

    with _in_empty_folder() as folder:
        _write_corpus(folder)
        (folder / "s.yaml").write_bytes(content)
        _check(main, ["s.yaml", "--dry-run", "--no-estimate"], folder)


# -- a runs export: python -m analysis.fit --export FILE -------------------------------------

@functools.cache
def _small_export() -> dict:
    """A valid export of 12 synthetic IsoFLOP runs (3 budgets x 4 sizes) with curves."""
    import numpy as np

    from analysis.runs.export import to_json_dict
    from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs, training_curves

    law = ChinchillaLaw()
    runs = isoflop_runs(law, np.array([1e18, 1e19, 1e20]), sizes_per_budget=4)
    _, curves = training_curves(law, np.array([1e8, 1e9]), np.array([1e10, 1e11]), points=5)
    return to_json_dict(runs, curves, "fuzz")


@SETTINGS
@given(st.data())
def test_no_runs_export_gives_a_traceback(data: st.DataObject) -> None:
    from analysis.cli import run_main
    from analysis.fit import main as fit_main

    base = _small_export()
    paths = _leaf_paths(base) + [("runs", "rows"), ("runs", "dtypes"), ("runs", "columns")]
    content = data.draw(st.binary(max_size=300) | _mutated(base, paths).map(
        lambda d: json.dumps(d).encode()))
    with _in_empty_folder() as folder:
        (folder / "runs_export.json").write_bytes(content)
        _check(lambda a: run_main(fit_main, a),
               ["--export", "runs_export.json", "--approach", "2", "--bootstrap", "0"], folder)


def test_the_files_mutated_above_are_valid_as_they_are() -> None:
    """The mutations start from files the commands accept, so they reach past the parsing."""
    from analysis.cli import run_main
    from analysis.fit import main as fit_main
    from pipeline.sweep import main as sweep_main

    with _in_empty_folder() as folder:
        _write_corpus(folder)
        (folder / "s.yaml").write_text(yaml.safe_dump(SWEEP))
        assert _check(sweep_main, ["s.yaml", "--dry-run", "--no-estimate"], folder) == 0
        (folder / "runs_export.json").write_text(json.dumps(_small_export()))
        assert _check(lambda a: run_main(fit_main, a),
                      ["--export", "runs_export.json", "--approach", "2", "--bootstrap", "0"],
                      folder) == 0


# -- a run id: python -m pipeline.sample --run-id ID ------------------------------------------

@SETTINGS
@given(ARG_TEXT)
def test_no_run_id_gives_a_traceback_or_creates_a_store(run_id: str) -> None:
    from pipeline.sample import main

    with _in_empty_folder() as folder:
        assert _check(main, ["--run-id", run_id], folder) == 2  # there is no ledger here


# -- an output path: python -m analysis.report --out PATH -------------------------------------

PATH_PART = st.sampled_from(["a", "..", ".", "file", "x" * 300, "é", " ", "-", "~", "$HOME",
                             "*", "report.md"]) | ARG_TEXT.filter(lambda s: "/" not in s)


# Few drawn examples: each valid path writes a whole report (~5 s); the hunt raises them.
@settings(max_examples=max(3, EXAMPLES // 8), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PATH_PART, min_size=1, max_size=3).map("/".join))
# Each found by this test once: a name over 255 bytes (OSError from Path.exists), "" (fell
# back to the default folder), "file/.." (no folder to the OS, the current one as text) and
# a folder named "~" (pandas expanded it into the home folder).
@example("x" * 300).via("discovered failure")
@example("").via("discovered failure")
@example("file/..").via("discovered failure")
@example("./~/a").via("discovered failure")
def test_no_output_path_gives_a_traceback(out: str) -> None:
    from analysis.cli import run_main
    from analysis.report import _main

    with _in_empty_folder() as folder:
        (folder / "file").write_bytes(b"x")
        (folder / "a").mkdir()
        (folder / "a" / "notes.txt").write_bytes(b"mine")  # a folder that is no report
        before = (folder / "a" / "notes.txt").read_bytes()
        code = _check(lambda a: run_main(_main, a),
                      ["--csv", str(EPOCH), "--out", out, "--bootstrap", "0"], folder)
        assert (folder / "file").read_bytes() == b"x"
        assert (folder / "a" / "notes.txt").read_bytes() == before
        if code == 0:
            assert (folder / out / "report.md").is_file()
