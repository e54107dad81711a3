"""Input from a hostile collaborator: each is refused at once with exit 2, one `error:` line
that names the field (or option) and the value, and nothing created.

- a corpus that is not regular files: a device (/dev/zero filled 15.5 GB in 40 s), a FIFO
  (hung for ever), a socket, a symlink to a device, a folder holding a FIFO; through a sweep
  file (dry run), `pipeline.data prepare` and `pipeline.train --corpus`;
- a sqlite tracking store in any dialect spelling with a cluster address (other nodes cannot
  write it);
- a run that asks more CPUs or GPUs than the machine (or any node of the cluster) has (Ray
  left it pending for ever);
- 55,000 seeds (a refusal that took seconds of YAML parsing) and other long lists.

Every command runs in-process through its own `main` in an empty folder, with the token cache
and the MLflow store pointed into it, so "nothing created" is the folder unchanged.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.config import ResourcesSection, SweepError, load_sweep
from pipeline.data.__main__ import main as data_main
from pipeline.data.settings import DataError
from pipeline.driver import capacity
from pipeline.driver.capacity import local_problem, node_problem
from pipeline.preflight import driver_problem
from pipeline.sweep import main as sweep_main
from pipeline.tracking import is_local_store
from pipeline.vision.data import _folder as load_image_folder
from pipeline.vocab.store import missing_store, sqlite_file

ROOT = Path(__file__).resolve().parent.parent
TINY = (ROOT / "tests" / "data" / "sweeps" / "tiny.yaml").read_text()


def _sweep(folder: Path, corpus: str = "stdlib", extra: str = "", name: str = "s.yaml") -> Path:
    """tiny.yaml with another corpus, and `extra` (YAML) appended to its resources."""
    text = TINY.replace("corpus: stdlib", f"corpus: {corpus}")
    text = text.replace("resources:\n  num_cpus: 1\n", f"resources:\n{extra or '  num_cpus: 1'}\n")
    path = folder / name
    path.write_text(text)
    return path


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty current folder holding the token cache and the MLflow store, and no Ray: a
    test that reaches Ray or the ledger fails instead of starting them."""
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a refused input reached Ray or the ledger")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCALING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("pipeline.driver.runner.init_ray", forbidden)
    monkeypatch.setattr("pipeline.sweep.run_sweep", forbidden)
    yield tmp_path


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _refused(main: Callable[[list[str]], int], argv: list[str], folder: Path,
             capsys: pytest.CaptureFixture[str], *says: str) -> str:
    """main(argv) exits 2 with one `error:` line holding every `says`, creating nothing."""
    before = _listing(folder)
    assert main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err[-3000:]
    assert all(s in errors[0] for s in says), (says, err[-3000:])
    assert "Traceback" not in err
    assert _listing(folder) == before, "a refused input created files"
    return errors[0]


# --- corpora that are not regular files ------------------------------------------------------

def _fifo(folder: Path) -> tuple[str, str]:
    os.mkfifo(folder / "corpus.txt")
    return "corpus.txt", "a FIFO"


def _socket(folder: Path) -> tuple[str, str]:
    sock = socket.socket(socket.AF_UNIX)  # bound by a relative name: the 107-byte limit
    sock.bind("corpus.sock")             # of a socket's path cannot bite
    sock.close()  # the socket file stays
    return "corpus.sock", "a socket"


def _device_link(folder: Path) -> tuple[str, str]:
    (folder / "corpus.txt").symlink_to("/dev/zero")
    return "corpus.txt", "a character device"


def _folder_with_fifo(folder: Path) -> tuple[str, str]:
    (folder / "docs").mkdir()
    for i in range(3):
        (folder / "docs" / f"d{i}.txt").write_text("some text to train on " * 50)
    os.mkfifo(folder / "docs" / "pipe.txt")
    return "docs", "'pipe.txt', a FIFO"


CORPORA: dict[str, Callable[[Path], tuple[str, str]]] = {
    "/dev/zero": lambda folder: ("/dev/zero", "'/dev/zero' is a character device"),
    "a FIFO": _fifo,
    "a socket": _socket,
    "a symlink to /dev/zero": _device_link,
    "a folder holding a FIFO": _folder_with_fifo,
}


@pytest.mark.timeout(30)  # a FIFO read blocks for ever, /dev/zero never ends
@pytest.mark.parametrize("command", ["sweep --dry-run", "data prepare"])
@pytest.mark.parametrize("kind", list(CORPORA))
def test_a_corpus_that_is_not_regular_files_is_refused_by_name(
        kind: str, command: str, folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus, what = CORPORA[kind](folder)
    sweep = _sweep(folder, corpus)
    main, argv = ((sweep_main, [str(sweep), "--dry-run", "--no-estimate"])
                  if command == "sweep --dry-run" else (data_main, ["prepare", str(sweep)]))
    _refused(main, argv, folder, capsys, f"{sweep}: data.corpus: ", what, "not a regular file",
             f"(got {corpus!r})")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", list(CORPORA))
def test_train_corpus_that_is_not_regular_files_is_refused(
        kind: str, folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`pipeline.train --corpus` reads through pipeline.data's local_source, the same rule."""
    from pipeline.train.cli import main as train_main

    corpus, what = CORPORA[kind](folder)
    _refused(train_main, ["--corpus", corpus], folder, capsys, "corpus", what)


@pytest.mark.timeout(30)
def test_a_fifo_swapped_in_after_listing_is_refused_by_the_reader(tmp_path: Path) -> None:
    """The readers check the open file too (O_NONBLOCK: opening a FIFO waits for a writer)."""
    from pipeline.data.sources import local_source

    (tmp_path / "a.txt").write_text("text")
    source = local_source(str(tmp_path))
    (tmp_path / "a.txt").unlink()
    os.mkfifo(tmp_path / "a.txt")
    with pytest.raises(DataError, match="a.txt' is a FIFO"):
        list(source)


# --- the cluster rule: no local MLflow store ---------------------------------------------------

@pytest.mark.parametrize("uri", [
    "sqlite:///{d}/m.db", "sqlite+pysqlite:///{d}/m.db", "sqlite+aiosqlite:///{d}/m.db",
    "SQLite:///{d}/m.db", "SQLITE+PYSQLITE:///{d}/m.db", " sqlite:///{d}/m.db",
    "file://{d}/mlruns", "FILE:{d}/mlruns", "{d}/mlruns", "./mlruns", "mlruns",
])
def test_a_local_store_with_a_cluster_address_is_refused(uri: str, tmp_path: Path) -> None:
    uri = uri.format(d=tmp_path)
    assert is_local_store(uri)
    problem = driver_problem("10.0.0.1:6379", str(tmp_path / "ckpt"), uri, "s")
    assert f"the MLflow tracking URI is a local store ({uri})" in problem
    assert list(tmp_path.iterdir()) == []  # refused before the store was created


@pytest.mark.parametrize("uri", ["http://h:5000", "HTTPS://h", "postgresql://h/db",
                                 "mysql+pymysql://h/db", "databricks", "databricks://profile"])
def test_remote_stores_are_not_local(uri: str) -> None:
    assert not is_local_store(uri)


@pytest.mark.parametrize("uri", ["sqlite:///{d}/m.db", "sqlite+pysqlite:///{d}/m.db",
                                 "SQLite:///{d}/m.db", "SQLITE+AIOSQLITE:///{d}/m.db"])
def test_every_sqlite_spelling_is_seen_as_a_database_file(uri: str, tmp_path: Path) -> None:
    """The store's file, whatever the dialect's spelling: a store not seen as a file gets no
    creation lock and no artifact folder beside it, and a read-only command would create it."""
    assert sqlite_file(uri.format(d=tmp_path)) == tmp_path / "m.db"
    assert "no MLflow store at" in missing_store(uri.format(d=tmp_path))


def test_an_image_folder_entry_that_is_not_a_file_is_refused_by_name(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    (tmp_path / "b" / "ok.png").write_bytes(b"")
    os.mkfifo(tmp_path / "a" / "x.png")
    with pytest.raises(DataError, match=r"a/x\.png' is not a regular file"):
        load_image_folder(tmp_path, 8)


# --- runs larger than the machine or any node ------------------------------------------------

def test_more_cpus_per_run_than_the_machine_are_refused_before_ray(
        folder: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    sweep = _sweep(folder, extra="  num_cpus: 64")
    says = (f"{sweep}: resources.num_cpus: 64 per run, this machine has 2 CPUs",)
    t0 = time.monotonic()
    _refused(sweep_main, [str(sweep), "--dry-run", "--no-estimate"], folder, capsys, *says)
    _refused(sweep_main, [str(sweep), "--no-report"], folder, capsys, *says)  # ended at once
    _refused(sweep_main, [str(sweep), "--no-report", "--cpus", "8"], folder, capsys,
             "resources.num_cpus: 64 per run, the local Ray has 8 CPUs (--cpus 8)")
    assert time.monotonic() - t0 < 10
    # Workers: each must fit, and all of a run's at once.
    sweep = _sweep(folder, extra="  num_cpus: 2\n  workers_per_run: 2", name="w.yaml")
    _refused(sweep_main, [str(sweep), "--no-report"], folder, capsys,
             "resources.workers_per_run = 2: a run needs 2 workers x 2 CPU(s) = 4 at once")


def test_more_gpus_per_run_than_the_machine_are_refused(
        folder: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(capacity, "local_gpus", lambda: 0)
    sweep = _sweep(folder, extra="  num_cpus: 1\n  num_gpus: 1")
    _refused(sweep_main, [str(sweep), "--no-report"], folder, capsys,
             "resources.num_gpus: 1 per run, this machine has 0 GPUs")
    # A GPU sweep's dry run where there is no GPU plans for a GPU machine elsewhere (timed
    # for an assumed H100), as before; one for more GPUs than there are here is refused.
    res = load_sweep(sweep).resources
    assert local_problem(res, None, address=None, dry_run=True) is None
    monkeypatch.setattr(capacity, "local_gpus", lambda: 1)
    two = ResourcesSection(num_gpus=2)
    assert "resources.num_gpus: 2 per run, this machine has 1 GPU " in local_problem(
        two, None, address=None, dry_run=True)
    assert local_problem(two, None, address="10.0.0.1:6379", dry_run=False) is None  # a cluster


NODES = [{"Alive": True, "Resources": {"CPU": 16.0}},
         {"Alive": True, "Resources": {"CPU": 4.0, "GPU": 1.0}},
         {"Alive": False, "Resources": {"CPU": 128.0, "GPU": 8.0}}]  # dead: holds nothing


@pytest.mark.parametrize("resources, says", [
    ({"num_cpus": 64}, "resources.num_cpus: 64 per run, the cluster's largest node has 16 CPUs"),
    ({"num_gpus": 2}, "resources.num_gpus: 2 per run, the cluster's largest node has 1 GPU"),
    ({"num_cpus": 8, "num_gpus": 1}, "resources: 8 CPUs and 1 GPU per run; no node of the "
                                     "cluster has both (2 live node(s): 16 CPU/0 GPU, 4 CPU/1 GPU)"),
    ({"num_cpus": 16}, None), ({"num_cpus": 4, "num_gpus": 0.5}, None),
])
def test_a_run_must_fit_one_node_of_the_cluster(resources: dict, says: str | None) -> None:
    problem = node_problem(ResourcesSection(**resources), NODES)
    assert problem == says if says is None else says in problem


def test_the_driver_checks_the_nodes_once_connected(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """On a cluster the check runs where the driver connects, before any task is submitted."""
    import ray

    from pipeline.driver import runner

    calls: list[str] = []
    monkeypatch.setattr(runner, "init_ray", lambda *a, **k: calls.append("init"))
    monkeypatch.setattr(ray, "nodes", lambda: NODES)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 20.0, "GPU": 1.0})
    monkeypatch.setattr(ray, "remote", lambda *a, **k: calls.append("task"))
    driver = runner._Runner.__new__(runner._Runner)  # only what start_ray reads
    driver.cfg = load_sweep(_sweep(tmp_path, extra="  num_cpus: 64"))
    driver.address, driver.cpus, driver.uri = "10.0.0.1:6379", None, ""
    with pytest.raises(SweepError, match="num_cpus: 64 per run, the cluster's largest node "
                                         "has 16 CPUs"):
        driver.start_ray()
    assert calls == ["init"]  # connected, nothing submitted


# --- scale: long lists refused fast ---------------------------------------------------------

def _with_train(folder: Path, train: str, tail: str = "", name: str = "big.yaml") -> Path:
    path = folder / name
    path.write_text(TINY.replace("  lr: 3.0e-3\n", f"  lr: 3.0e-3\n{train}") + tail)
    return path


def test_55k_seeds_are_refused_in_well_under_a_few_seconds(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seeds = ", ".join(str(i) for i in range(55_000))
    sweep = _with_train(folder, f"  seeds: [{seeds}]\n")
    t0 = time.process_time()  # CPU: a loaded machine stretches wall time
    _refused(sweep_main, [str(sweep), "--dry-run"], folder, capsys,
             f"{sweep}: train.seeds: a list of 55,000 items; at most 10,000")
    cpu = time.process_time() - t0
    assert cpu < 3, cpu  # 4.3-6.9 s before (PyYAML's pure-Python parser), ~0.2 s now


def test_lists_within_the_cap_are_checked_in_linear_time(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """9,000 train seeds and 9,000 replicate seeds: the replicate check was quadratic."""
    seeds = ", ".join(str(i) for i in range(9_000))
    more = ", ".join(str(i) for i in range(9_000, 18_000))
    sweep = _with_train(folder, f"  seeds: [{seeds}]\n",
                        f"  replicates:\n    budgets: [3e9]\n    seeds: [{more}]\n")
    t0 = time.process_time()  # CPU, not wall: a loaded CI machine stretched 1.5 s to 7 s
    _refused(sweep_main, [str(sweep), "--dry-run"], folder, capsys,
             "isoflop: plans 2 budgets x 2 sizes x 9000 seeds + 18000 replicate(s)")
    assert time.process_time() - t0 < 5  # quadratic, the replicate check alone took 35 s


def test_thousands_of_problems_are_counted_not_listed(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = _with_train(folder, "  seeds: [" + ", ".join(["0"] * 9_999) + "]\n")
    _refused(sweep_main, [str(sweep), "--dry-run"], folder, capsys,
             "train.seeds[1]: duplicate of seeds[0] (got 0)")
    # (_refused read stderr: run once more for its length)
    assert sweep_main([str(sweep), "--dry-run"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 21 and lines[-1] == f"{sweep}: ... and 9,978 more problem(s)"


@pytest.mark.parametrize("libyaml", [True, False])
def test_a_deep_or_wide_document_is_refused_with_or_without_libyaml(
        libyaml: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limits are checked on libyaml's events where PyYAML has libyaml, else by the
    pure-Python loader; 100,000 nested lists once crashed libyaml's recursive composer."""
    from pipeline.config import yaml_reader

    if not libyaml:
        monkeypatch.setattr(yaml_reader, "CParser", None)
    monkeypatch.setattr(yaml_reader, "MAX_ITEMS", 10)  # 10,000 in use: the same check, faster
    depth = 100_000 if libyaml else 100  # the pure-Python parser recurses: RecursionError
    deep = "name: t\nkind: runs\nruns: " + "[" * depth + "]" * depth + "\n"
    with pytest.raises(SweepError, match=r"x\.yaml:3:\d+: invalid YAML: nested too deep"):
        yaml_reader._read_yaml(deep, Path("x.yaml"))
    wide = "name: t\nkind: runs\ntrain: {" + ", ".join(f"k{i}: 1" for i in range(11)) + "}\n"
    with pytest.raises(SweepError, match="x.yaml: train: a mapping of 11 keys; at most 10"):
        yaml_reader._read_yaml(wide, Path("x.yaml"))
    long = "name: t\nkind: runs\nruns:\n- {depth: 2, tokens: [" + "1, " * 11 + "]}\n"
    with pytest.raises(SweepError, match=r"x.yaml: runs\[0\].tokens: a list of 11 items"):
        yaml_reader._read_yaml(long, Path("x.yaml"))
