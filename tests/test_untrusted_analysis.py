"""The analysis CLIs given hostile input: paths, names and numbers from arguments, and strings
from a ledger or a collaborator's file.

Every refusal is one `error:` line on stderr naming the option and the value, exit status 2,
no traceback, and nothing created or changed (a canary file beside the working folder stays as
it was). Names reach report.md and runs.csv as text, never as markup or a spreadsheet formula.
A large CSV fits in time linear in its rows (it was quadratic in the seed-replicate groups).
"""

from __future__ import annotations

import csv
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import compare, fit, predict, report
from analysis.cli import run_main
from analysis.runs.export import to_json_dict
from analysis.runs.synthetic import ChinchillaLaw, isoflop_runs
from analysis.runs.table import Excluded
from analysis.text import markdown_inline, spreadsheet_cell

ROOT = Path(__file__).resolve().parents[1]
EPOCH = str(ROOT / "tests" / "data" / "chinchilla_epoch_fig4.csv")
COLUMNS = ["--n-col", "Model Size", "--c-col", "Training FLOP", "--loss-col", "loss"]
CSV = ["--csv", EPOCH, *COLUMNS, "--bootstrap", "0", "--jobs", "1"]
PREDICT = ["--csv", EPOCH, *COLUMNS, "--bootstrap", "0", "--flops", "1e15"]
CANARY = b"precious: never touched by a refused command"


def _tree(root: Path) -> dict[str, object]:
    """Every path under root with its bytes (files), link target (links) or kind."""
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        if p.is_symlink():
            out[key] = ("link", os.readlink(p))
        elif p.is_fifo():
            out[key] = "fifo"
        elif p.is_file():
            out[key] = p.read_bytes()
        else:
            out[key] = "folder"
    return out


def _export(tmp: Path, name: str, hostile: bool = False) -> Path:
    """A runs export of 9 synthetic IsoFLOP runs (3 budgets x 3 sizes); with ``hostile``,
    run names, family, corpus, source and an excluded run that a spreadsheet or a Markdown
    renderer would act on."""
    runs = isoflop_runs(ChinchillaLaw(), np.array([1e17, 1e18, 1e19]), sizes_per_budget=3)
    if hostile:
        frame = runs.frame
        frame["run_name"] = HOSTILE_NAMES[: len(frame)]
        frame["family"] = "=1+1"
        frame["data_corpus"] = "<script>alert('corpus')</script>"
        frame["data_tokenizer"] = "bytes"
        runs = replace(runs, source="<b>source</b> [s](javascript:alert(2))",
                       excluded=(Excluded("<script>alert(3)</script>", "=cmd|' /C calc'!A0"),))
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(to_json_dict(runs, None, name)))
    return path


HOSTILE_NAMES = ["=cmd|' /C calc'!A0", '+HYPERLINK("http://x")', "-2+3", "@SUM(A1)", "\t=1",
                 "x\r=cmd|' /C calc'!A0", "-0.5", "<img src=x onerror=alert(1)>",
                 "[x](javascript:alert(1))"]


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp/canary.txt beside tmp/work/sub, the working folder, which holds a file, a FIFO, a
    folder, a link to /dev/zero, a sweep file in the CSV's convention and an export whose
    recorded name climbs out of reports/. Returns tmp (the tree that must not change)."""
    (tmp_path / "canary.txt").write_bytes(CANARY)
    work = tmp_path / "work" / "sub"
    work.mkdir(parents=True)
    (work / "file").write_bytes(b"x")
    os.mkfifo(work / "fifo")
    os.mkfifo(work / "fifo.json")
    (work / "folder").mkdir()
    (work / "folder.csv").mkdir()
    (work / "zero.json").symlink_to("/dev/zero")
    quickstart = (ROOT / "sweeps" / "quickstart.yaml").read_text()
    (work / "src.yaml").write_text(quickstart.replace("flops_convention: exact",
                                                      "flops_convention: 6nd"))
    _export(work, "../../x")
    monkeypatch.chdir(work)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # a sweep name finds no store
    return tmp_path


Main = Callable[[list[str] | None], int]
REPORT, FIT, PREDICT_MAIN, COMPARE = report._main, fit.main, predict.main, compare.main
REFUSED: dict[str, tuple[Main, list[str], str]] = {
    # name: (command, arguments, what its one error line says)
    "report --name ../../x": (REPORT, [*CSV, "--name", "../../x"], "--name '../../x': holds a /"),
    "report --name /abs": (REPORT, [*CSV, "--name", "{tmp}/abs"], "/abs': holds a /"),
    "report --name ''": (REPORT, [*CSV, "--name", ""], "--name '': is empty"),
    "report --name ..": (REPORT, [*CSV, "--name", ".."], "--name '..': starts with a dot"),
    "report --name .hidden": (REPORT, [*CSV, "--name", ".x"], "--name '.x': starts with a dot"),
    "report --name a\\b": (REPORT, [*CSV, "--name", "a\\b"], "holds a / or \\"),
    "report --name NUL": (REPORT, [*CSV, "--name", "a\x00b"], "holds a control character"),
    "report --name 300 bytes": (REPORT, [*CSV, "--name", "n" * 300], "is 300 bytes, over 200"),
    "report export named ../../x": (REPORT, ["--export", "../../x.json", "--bootstrap", "0"],
                                    "the name recorded in --export ../../x.json '../../x'"),
    "report --out under a file": (REPORT, [*CSV, "--out", "file/report"],
                                  "file is a file, not a folder"),
    "report --out a file": (REPORT, [*CSV, "--out", "file"], "file is a file, not a folder"),
    "report --export /dev/zero": (REPORT, ["--export", "/dev/zero", "--out", "r"],
                                  "--export /dev/zero: is a character device, not a file"),
    "report --export FIFO": (REPORT, ["--export", "fifo", "--out", "r"],
                             "--export fifo: is a FIFO (named pipe), not a file"),
    "report --export folder": (REPORT, ["--export", "folder", "--out", "r"],
                               "--export folder: is a folder, not a file"),
    "report --csv /dev/zero": (REPORT, ["--csv", "/dev/zero", "--out", "r"],
                               "--csv /dev/zero: is a character device"),
    "report --bootstrap -1": (REPORT, [*CSV, "--bootstrap", "-1"], "argument --bootstrap"),
    "report --bootstrap huge": (REPORT, [*CSV, "--bootstrap", "10000000000"],
                                "must be from 0 to 100,000"),
    "report --seed -1": (REPORT, [*CSV, "--seed", "-1"], "argument --seed"),
    "report --jobs 0": (REPORT, [*CSV, "--jobs", "0"], "argument --jobs"),
    "report --jobs huge": (REPORT, [*CSV, "--jobs", "100000"], "argument --jobs"),
    "fit --csv /dev/zero": (FIT, ["--csv", "/dev/zero"], "--csv /dev/zero: is a character"),
    "fit --csv FIFO": (FIT, ["--csv", "fifo"], "--csv fifo: is a FIFO"),
    "fit --csv folder": (FIT, ["--csv", "folder"], "--csv folder: is a folder"),
    "fit --export link to /dev/zero": (FIT, ["--export", "zero.json"],
                                       "--export zero.json: is a character device"),
    "fit --reference-flops inf": (FIT, [*CSV, "--reference-flops", "inf"],
                                  "argument --reference-flops: must be a finite number > 0"),
    "fit --bootstrap huge": (FIT, [*CSV, "--bootstrap", "1e12"], "argument --bootstrap"),
    "fit --max-epochs nan": (FIT, [*CSV, "--max-epochs", "nan"], "argument --max-epochs"),
    "fit unknown option": (FIT, [*CSV, "--nope"], "unrecognized arguments: --nope"),
    "predict --flops inf": (PREDICT_MAIN, [*PREDICT, "--flops", "inf"],
                            "argument --flops: must be a finite number > 0, got 'inf'"),
    "predict --flops nan": (PREDICT_MAIN, [*PREDICT, "--flops", "nan"], "got 'nan'"),
    "predict --flops -1": (PREDICT_MAIN, [*PREDICT, "--flops", "-1"], "got '-1'"),
    "predict --flops 0": (PREDICT_MAIN, [*PREDICT, "--flops", "0"], "got '0'"),
    "predict --export /dev/zero": (PREDICT_MAIN, ["--export", "/dev/zero", "--flops", "1e15"],
                                   "--export /dev/zero: is a character device"),
    "predict --write over a file": (PREDICT_MAIN, [*PREDICT, "--sweep-file", "src.yaml",
                                                   "--write", "file"],
                                    "--write file: exists; --write never replaces a file"),
    "predict --write bad name": (PREDICT_MAIN, [*PREDICT, "--sweep-file", "src.yaml", "--write",
                                                "new/dir/bad name.yaml"],
                                 "--write new/dir/bad name.yaml: the written sweep file would "
                                 "not validate"),
    "predict --sweep-file FIFO": (PREDICT_MAIN, [*PREDICT, "--sweep-file", "fifo", "--write",
                                                 "n.yaml"], "fifo: not a regular file"),
    "compare --flops inf": (COMPARE, ["a.csv", "b.csv", "--flops", "inf"], "got 'inf'"),
    "compare --flops nan": (COMPARE, ["a.csv", "b.csv", "--flops", "nan"], "got 'nan'"),
    "compare --flops -1": (COMPARE, ["a.csv", "b.csv", "--flops", "-1"], "got '-1'"),
    "compare --flops 0": (COMPARE, ["a.csv", "b.csv", "--flops", "0"], "got '0'"),
    "compare --bootstrap -1": (COMPARE, ["a.csv", "b.csv", "--bootstrap", "-1"],
                               "argument --bootstrap"),
    "compare A link to /dev/zero": (COMPARE, ["zero.json", EPOCH],
                                    "A zero.json: is a character device"),
    "compare A FIFO": (COMPARE, ["fifo.json", EPOCH], "A fifo.json: is a FIFO"),
    "compare B folder": (COMPARE, [EPOCH, "folder.csv"], "B folder.csv: is a folder"),
    "compare --out under a file": (COMPARE, [EPOCH, EPOCH, "--out", "file/c"],
                                   "file is a file, not a folder"),
}
if Path("/proc/self").is_dir():
    REFUSED["predict --write /proc/self/x.yaml"] = (
        PREDICT_MAIN, [*PREDICT, "--sweep-file", "src.yaml", "--write", "/proc/self/x.yaml"],
        "--write /proc/self/x.yaml: ")


@pytest.mark.timeout(30)  # a FIFO opened for reading would wait for a writer forever
@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refusal_is_one_error_line_and_leaves_everything_as_it_was(
        case: str, place: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main, argv, says = REFUSED[case]
    argv = [a.replace("{tmp}", str(place)) for a in argv]  # an absolute path, inside tmp
    before = _tree(place)
    code = run_main(main, argv)
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert "Traceback" not in err
    assert err.splitlines() == [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(err.splitlines()) == 1 and says in err, err[-2000:]
    assert _tree(place) == before
    assert (place / "canary.txt").read_bytes() == CANARY


def test_predict_writes_the_next_sweep_whole_and_only_it(place: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """The accepted --write still lands (folders made after every check), and nothing else."""
    before = _tree(place)
    argv = [*PREDICT, "--approach", "3", "--sweep-file", "src.yaml", "--json", "--write",
            "next/dir/next.yaml"]
    assert run_main(predict.main, argv) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["written"] == "next/dir/next.yaml"
    after = _tree(place)
    made = sorted(set(after) - set(before))
    assert made == ["work/sub/next", "work/sub/next/dir", "work/sub/next/dir/next.yaml"]
    assert after["work/sub/next/dir/next.yaml"].startswith(b"# Written by")


def test_hostile_names_reach_runs_csv_and_report_md_as_text(place: Path,
                                                            capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    from analysis.reporting import figures

    def not_drawn(_ctx: object) -> None:
        raise figures.NoData("not drawn in this test")

    # Figures are pictures (no markup reaches a reader through them) and ~6 s of CPU here.
    for name in figures.FIGURE_NAMES:
        monkeypatch.setattr(figures, f"{name}_figure", not_drawn)
    hostile = _export(Path.cwd(), "hostile", hostile=True)
    assert run_main(report._main, ["--export", str(hostile), "--out", "out", "--bootstrap", "0",
                                   "--jobs", "1"]) == 0, capsys.readouterr().err
    out = Path("out")
    with open(out / "runs.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(HOSTILE_NAMES)  # no CR split a row
    names = {r["run_name"] for r in rows}
    assert names == {"'=cmd|' /C calc'!A0", "'+HYPERLINK(\"http://x\")", "'-2+3", "'@SUM(A1)",
                     "'\t=1", "x\n=cmd|' /C calc'!A0", "-0.5", "<img src=x onerror=alert(1)>",
                     "[x](javascript:alert(1))"}
    assert {r["family"] for r in rows} == {"'=1+1"}
    numbers = pd.read_csv(out / "runs.csv")
    for column in ("N", "D", "C", "loss", "budget"):
        assert numbers[column].dtype == float, column  # numbers stay numbers
    md = (out / "report.md").read_text(encoding="utf-8")
    for raw in ("<img", "<script", "<b>"):
        assert raw not in md, raw
    assert not re.search(r"(?<!\\)\]\(javascript:", md)  # links only as escaped text
    assert "| &lt;img src=x onerror=alert(1)> |" in md
    assert "| [x\\](javascript:alert(1)) |" in md
    assert "corpus: &lt;script>alert('corpus')&lt;/script>" in md
    html = (out / "report.html").read_text(encoding="utf-8")
    for raw in ("<img src=x", "<script>", "<b>source"):
        assert raw not in html, raw


def test_a_file_name_is_no_console_markup(place: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    """A CSV whose path holds "[/x]" was a rich MarkupError traceback in the fit's tables."""
    Path("a[").mkdir()
    Path("a[/x].csv").write_bytes(Path(EPOCH).read_bytes())
    argv = ["--csv", "a[/x].csv", *COLUMNS, "--approach", "kaplan", "--bootstrap", "0",
            "--jobs", "1"]
    assert run_main(fit.main, argv) == 0
    assert capsys.readouterr().out.startswith("a[/x].csv")


@pytest.mark.parametrize(("text", "markdown"), [
    ("<script>alert(1)</script>", "&lt;script>alert(1)&lt;/script>"),
    ("[x](javascript:alert(1)) ![i](u) [r][1] [d]: u",
     "[x\\](javascript:alert(1)) ![i\\](u) [r\\][1] [d\\]: u"),
    ("&lt; R&D", "&amp;lt; R&D"),
    ("a\\[x](y)", "a\\\\[x\\](y)"),
    ("a = 0.45 [0.44, 0.46] (Approach 2), **bold**, N_opt", None),  # the report's own text
    ("run `<b>` and a stray ` backtick", "run `<b>` and a stray \\` backtick"),
])
def test_markdown_escapes_only_what_a_renderer_acts_on(text: str, markdown: str | None) -> None:
    assert markdown_inline(text) == (text if markdown is None else markdown)


@pytest.mark.parametrize(("cell", "written"), [
    ("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"), ("+1", "+1"), ("+x", "'+x"), ("-0.5", "-0.5"),
    ("-1e-3", "-1e-3"), ("-inf", "'-inf"), ("@SUM(A1)", "'@SUM(A1)"), ("\t=1", "'\t=1"),
    ("\r=1", "'\n=1"), ("a\r=1", "a\n=1"), ("plain", "plain"), (-0.5, -0.5), (None, None),
])
def test_spreadsheet_cells_are_text_unless_numbers(cell: object, written: object) -> None:
    assert spreadsheet_cell(cell) == written


def _seeded_csv(path: Path, budgets: int, sizes: int, seeds: int) -> int:
    """An IsoFLOP CSV of budgets x sizes x seeds runs, L from Hoffmann et al.'s (2022) fitted
    law plus N(0, 0.01) noise and an offset per seed; returns the rows."""
    rng = np.random.default_rng(0)
    c = np.repeat(np.geomspace(1e18, 1e22, budgets), sizes * seeds)
    n_opt = np.sqrt(c / 120.0)
    ratio = np.tile(np.repeat(np.geomspace(1 / 8, 8, sizes), seeds), budgets)
    n, seed = n_opt * ratio, np.tile(np.arange(seeds), budgets * sizes)
    d = c / (6.0 * n)
    loss = (1.69 + 406.4 / n**0.34 + 410.7 / d**0.28 + rng.normal(0, 0.01, n.size)
            + rng.normal(0, 0.005, seeds)[seed])
    pd.DataFrame({"N": n, "D": d, "C": c, "loss": loss, "seed": seed}).to_csv(path, index=False)
    return n.size


def test_a_20000_run_csv_fits_in_linear_time(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """2,000 replicate groups of 10 seeds. The seed-offset model built a dense (runs x
    groups) design and solved it by lstsq, and collapsing the groups assigned with frame.loc
    one group at a time: 90 s of CPU at 20,000 runs, 5x more per doubling (100,000 runs:
    killed at 400 s, 15.9 GB). Now ~3 s of CPU here; 20 s is the bound."""
    path = tmp_path / "big.csv"
    rows = _seeded_csv(path, budgets=100, sizes=20, seeds=10)
    started = time.process_time()
    assert run_main(fit.main, ["--csv", str(path), "--approach", "2", "--bootstrap", "0",
                               "--jobs", "1", "--json"]) == 0
    cpu = time.process_time() - started
    out = json.loads(capsys.readouterr().out)
    assert out["n_runs"] == rows == 20_000
    assert out["approaches"]["2"]["status"] == "ok"
    assert out["noise"]["balanced"] and out["noise"]["n_groups"] == 2_000
    assert cpu < 20.0, f"{cpu:.1f} s of CPU for {rows} runs"


def test_a_folder_that_existed_is_never_counted_as_made(tmp_path: Path, monkeypatch) -> None:
    """new/../old does not exist while new does not, but it is old once new is made: a
    failed report must not remove old (found by review: Ctrl-C while the figures were drawn
    removed an empty folder that existed before)."""
    from pipeline.vocab.disk import missing_folders

    monkeypatch.chdir(tmp_path)
    (tmp_path / "old").mkdir()
    made = missing_folders(tmp_path / "new" / ".." / "old" / "report")
    assert made == [tmp_path / "new", tmp_path / "new" / ".." / "old" / "report"]


def test_a_code_span_never_spans_lines_in_markdown() -> None:
    """A name "x`<newline><div ...>`" would open a raw HTML block inside a code span that
    spans lines; one-line code spans stay as they are."""
    from analysis.text import markdown_inline

    assert "<div" not in markdown_inline("x`\n<div onmouseover=alert(1)>hi</div>\n`")
    assert markdown_inline("a `<local>` b") == "a `<local>` b"
