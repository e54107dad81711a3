"""pipeline.ledger unpack/pack given what a hostile collaborator would send or type.

Every archive here is made by the test: the CVE-2025-4517 symlink chain, links, devices, names
out of the ledger, gzip bombs, stores with SQL of their own or paths outside the folder. Each
refusal must be exit status 2 with one `error:` line naming the culprit, a canary file outside
the target untouched, nothing created anywhere, and the target as it was (absent if it was).
On the code before this file (tarfile's filter="data", Python 3.11.7) the CVE archive
overwrote the canary and created a file beside it, with exit status 0.
"""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline.ledger import archive as ledger_archive
from pipeline.ledger import untrusted_store, untrusted_tar
from pipeline.ledger.archive import PLACEHOLDER, main
from pipeline.tracking import prepare_store
from pipeline.vocab import keys

ROOT = Path(__file__).resolve().parents[1]
CANARY = b"the canary's own words"
# (name, kind, payload): kind "file" (payload: bytes), "dir", "sym" or "hard" (payload: the
# link's target), "chr", "fifo"
Member = tuple[str, str, "bytes | str | None"]


def _tar(path: Path, members: list[Member]) -> Path:
    """A gzipped tar of MEMBERS, written member by member as given (any name, any type)."""
    kinds = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE,
             "hard": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE, "fifo": tarfile.FIFOTYPE,
             "sparse": tarfile.GNUTYPE_SPARSE}
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            info.type = kinds[kind]
            info.mode = 0o777 if kind == "dir" else 0o644
            if kind in ("sym", "hard"):
                info.linkname = payload
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            else:
                tar.addfile(info)
    return path


def _store(db: bytes, tmp: Path, *sql: str) -> bytes:
    """The store DB with SQL run on it (the hostile collaborator's own sqlite3)."""
    path = tmp / "hostile.db"
    path.write_bytes(db)
    with sqlite3.connect(path) as conn:
        for statement in sql:
            conn.execute(statement)
    conn.close()
    out = path.read_bytes()
    path.unlink()
    return out


def cve_2025_4517(tmp: Path, target: Path, db: bytes) -> Path:
    """CPython's own reproducer of CVE-2025-4517 (Lib/test/test_tarfile.py,
    test_realpath_limit_attack), put under checkpoints/ so that every member passes the ledger's
    name check. Symlinks a..p each expand to a long folder name; the resolved path of the link
    after them exceeds PATH_MAX, so os.path.realpath (which filter="data" relies on) stops
    resolving there and judges the rest by its text: `escape` looks inside and is the target's
    parent. A hard link through it to the canary, then a file of that name, overwrites the
    canary; a file under escape/ is created beside it."""
    # unpack extracts into TARGET/.ledger-unpack-XXXXXXXX (tempfile.mkdtemp: 8 characters)
    dest_len = len(str(target.resolve())) + len("/.ledger-unpack-") + 8 + len("/checkpoints") + 1
    steps = "abcdefghijklmnop"
    component = "d" * ((os.pathconf(tmp, "PC_PATH_MAX") - dest_len) // (len(steps) + 1))
    members: list[Member] = [("mlflow.db", "file", db)]
    path = "checkpoints"
    for step in steps:
        members += [(f"{path}/{component}", "dir", None), (f"{path}/{step}", "sym", component)]
        path = f"{path}/{component}"
    link = "/".join(steps) + "/" + "l" * 254
    members += [(f"checkpoints/{link}", "sym", "/".join([".."] * len(steps))),
                ("checkpoints/escape", "sym", f"{link}/../../.."),  # checkpoints/../../..
                ("checkpoints/flaglink", "hard", "checkpoints/escape/outside/canary.txt"),
                ("checkpoints/flaglink", "file", b"overwritten by the archive"),
                ("checkpoints/escape/outside/created.txt", "file", b"created by the archive")]
    return _tar(tmp / "cve.tar.gz", members)


def _simple(members: Callable[[Path, bytes], list[Member]]) -> Callable[[Path, Path, bytes], Path]:
    return lambda tmp, target, db: _tar(tmp / "hostile.tar.gz", members(tmp, db))


def _with_store(*sql: str) -> Callable[[Path, Path, bytes], Path]:
    return lambda tmp, target, db: _tar(tmp / "hostile.tar.gz",
                                        [("mlflow.db", "file", _store(db, tmp, *sql))])


def _corrupt(tmp: Path, target: Path, db: bytes) -> Path:
    """The store with the first page of table tags overwritten (a b-tree page of garbage)."""
    path = tmp / "corrupt.db"
    path.write_bytes(db)
    with sqlite3.connect(path) as conn:
        page_size = conn.execute("pragma page_size").fetchone()[0]
        root = conn.execute("select rootpage from sqlite_master where name = 'tags'").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    garbage = (b"\x0d\xff\xfe" * page_size)[:page_size]  # a leaf page type, then nonsense
    data[(root - 1) * page_size:root * page_size] = garbage
    return _tar(tmp / "hostile.tar.gz", [("mlflow.db", "file", bytes(data))])


# A trigger that never ends (a recursive CTE without a bound): on the code before, unpack's path
# rewrite fired it on the first tags row and hung.
_HANG = ("create trigger hang after update on tags begin with recursive c(x) as (select 1 union "
         "all select x + 1 from c) select count(*) from c; end")

# name -> (archive builder, what the error line must name)
CASES: dict[str, tuple[Callable[[Path, Path, bytes], Path], str]] = {
    "cve_2025_4517_symlink_chain": (cve_2025_4517, "'checkpoints/a': a symbolic link"),
    "nested_dotdot": (_simple(lambda tmp, db: [
        ("mlflow.db", "file", db), ("checkpoints/x/../../../outside/new.txt", "file", b"x")]),
        "'checkpoints/x/../../../outside/new.txt'"),
    "absolute_name": (_simple(lambda tmp, db: [
        ("mlflow.db", "file", db), (f"{tmp}/outside/new.txt", "file", b"x")]),
        "an empty or absolute name"),
    "symlink": (_simple(lambda tmp, db: [
        ("mlflow.db", "file", db), ("checkpoints/link", "sym", f"{tmp}/outside/canary.txt")]),
        "'checkpoints/link': a symbolic link"),
    "hardlink": (_simple(lambda tmp, db: [
        ("mlflow.db", "file", db), ("checkpoints/hard", "hard", f"{tmp}/outside/canary.txt")]),
        "'checkpoints/hard': a hard link"),
    "char_device": (_simple(lambda tmp, db: [
        ("mlflow.db", "file", db), ("checkpoints/null", "chr", None)]),
        "'checkpoints/null': a character device"),
    "fifo": (_simple(lambda tmp, db: [("mlflow.db", "file", db), ("mlartifacts/f", "fifo", None)]),
             "'mlartifacts/f': a FIFO"),
    "outside_the_ledger_names": (_simple(lambda tmp, db: [
        ("mlflow.db", "file", db), ("mlruns/x.txt", "file", b"x")]),
        "member 'mlruns/x.txt' is outside mlflow.db"),
    "db_as_a_folder": (_simple(lambda tmp, db: [("mlflow.db/x", "file", db)]),
                       "mlflow.db must be a file at the top"),
    "backslash": (_simple(lambda tmp, db: [
        ("mlflow.db", "file", db), ("checkpoints\\..\\..\\x", "file", b"x")]), "backslash"),
    "duplicate_name": (_simple(lambda tmp, db: [
        ("mlflow.db", "file", db), ("mlflow.db", "file", b"second copy")]),
        "member 'mlflow.db': twice in the archive"),
    "store_with_a_hanging_trigger": (_with_store(_HANG), "trigger 'hang' on table 'tags'"),
    "store_with_a_view": (_with_store("create view v as select * from tags"), "view 'v'"),
    "store_with_an_extra_table": (_with_store("create table notes (x)"), "table 'notes'"),
    "store_with_an_expression_index": (_with_store("create index e on tags (length(value))"),
                                       "index 'e' on 'tags'"),
    "corrupt_store": (_corrupt, "mlflow.db: "),
    "not_sqlite": (_simple(lambda tmp, db: [("mlflow.db", "file", b"PK\x03\x04 a zip")]),
                   "mlflow.db: not an SQLite database"),
    "not_mlflow": (_simple(lambda tmp, db: [("mlflow.db", "file", _store(
        b"", tmp, "create table runs (x)"))]), "not an MLflow store"),
    "unknown_alembic_revision": (_with_store("update alembic_version set version_num = 'ffff'"),
                                 "schema revision 'ffff' is not one MLflow"),
    "artifact_location_outside": (_with_store(
        "update experiments set artifact_location = 'file:///LEDGER_ROOT/../outside' "
        "where experiment_id != 0"), "experiments.artifact_location of experiment_id"),
    "artifact_uri_outside": (_with_store(
        "update runs set artifact_uri = 'file:///LEDGER_ROOT/%2E%2E/outside'"),
        "runs.artifact_uri of run_uuid"),
    "artifact_uri_elsewhere": (_with_store("update runs set artifact_uri = 's3://bucket/x'"),
                               "'s3://bucket/x', not a path inside"),
    "checkpoint_dir_outside": (_with_store(
        "update tags set value = '/LEDGER_ROOT/checkpoints/../../outside' "
        "where key = 'checkpoint_dir'"), "tags 'checkpoint_dir' of run_uuid"),
    # Found by review: the rewrite passes over a path column declared BLOB, so the store
    # kept file:///LEDGER_ROOT/...; the stored paths are now read back after the rewrite.
    "artifact_uri_in_a_blob_column": (_with_store(
        "pragma writable_schema = on",
        "update sqlite_master set sql = replace(sql, 'artifact_uri VARCHAR(200)', "
        "'artifact_uri BLOB') where name = 'runs'"), "after the rewrite, not a path inside"),
    "checkpoint_dir_not_a_uri": (_with_store(
        "update tags set value = 'file://[x' where key = 'checkpoint_dir'"),
        "tags 'checkpoint_dir' of run_uuid"),
    "sparse_member": (_simple(lambda tmp, db: [("mlflow.db", "file", db),
                                               ("checkpoints/s", "sparse", None)]),
                      "'checkpoints/s': a sparse file"),
    "param_path_outside": (_with_store(
        "insert into params select 'data_dir', '/etc', run_uuid from runs limit 1"),
        "params 'data_dir'"),
}


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A real ledger folder (an MLflow store with a finished and a stopped run, checkpoints,
    artifacts) and its packed store: the store every hostile archive starts from."""
    folder = tmp_path_factory.mktemp("ledger") / "source dir"
    folder.mkdir()
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = prepare_store(uri, "tiny")
    for run_id, status in (("aaaa", keys.STATUS_FINISHED), ("bbbb", keys.STATUS_KILLED)):
        ckpt = folder / "checkpoints" / "tiny" / run_id
        ckpt.mkdir(parents=True)
        (ckpt / "step_00000010.pt").write_bytes(b"weights")
        run = client.create_run(experiment, tags={keys.TAG_RUN_ID: run_id,
                                                  keys.TAG_STATUS: status,
                                                  "checkpoint_dir": str(ckpt)})
        client.log_dict(run.info.run_id, {"run_id": run_id}, keys.SPEC_ARTIFACT)
    packed = ledger_archive.pack(folder, folder.parent / "ledger.tar.gz")
    with tarfile.open(packed.archive) as tar:
        db = tar.extractfile("mlflow.db").read()  # type: ignore[union-attr]
    return folder, db


def _state(root: Path) -> dict[str, tuple]:
    """Every path under ROOT with its kind, size and mtime: what must not change."""
    out: dict[str, tuple] = {}
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(here) / name
            st = path.lstat()
            out[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def _refused(capsys: pytest.CaptureFixture[str], tmp: Path, argv: list[str]) -> str:
    """Run main(ARGV) with a canary in TMP/outside; assert a clean refusal and return its line."""
    canary = tmp / "outside" / "canary.txt"
    canary.parent.mkdir(exist_ok=True)
    canary.write_bytes(CANARY)
    os.utime(canary, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    before = _state(tmp)
    started = time.process_time()  # CPU: a loaded machine stretches wall time
    assert main(argv) == 2
    elapsed = time.process_time() - started
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert canary.read_bytes() == CANARY
    assert canary.stat().st_mtime_ns == 1_000_000_000_000_000_000
    assert _state(tmp) == before  # nothing created, changed or left behind, target included
    assert elapsed < 1.0, f"{elapsed:.2f} s of CPU for a refusal"
    return lines[0]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("target_exists", [False, True], ids=["new_target", "empty_target"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_unpack_refuses_and_leaves_nothing(case: str, target_exists: bool, tmp_path: Path,
                                           ledger: tuple[Path, bytes], capsys) -> None:
    build, named = CASES[case]
    target = tmp_path / "target"
    if target_exists:
        target.mkdir()
    archive = build(tmp_path, target, ledger[1])
    line = _refused(capsys, tmp_path, ["unpack", str(archive), "--folder", str(target)])
    assert str(archive) in line and named in line, line
    assert target.exists() == target_exists


def test_the_cve_archive_escapes_tarfiles_own_filter(tmp_path: Path, ledger: tuple[Path, bytes]
                                                    ) -> None:
    """The archive of the CVE case is a real exploit on this Python: extracted as the code
    before did (tarfile, filter="data") into a folder laid out as unpack's staging folder, it
    overwrites the canary outside. A Python with the fix refuses it: nothing to show then."""
    target = tmp_path / "target"
    stage = target / ".ledger-unpack-12345678"
    stage.mkdir(parents=True)
    canary = tmp_path / "outside" / "canary.txt"
    canary.parent.mkdir()
    canary.write_bytes(CANARY)
    archive = cve_2025_4517(tmp_path, target, ledger[1])
    with tarfile.open(archive) as tar:
        try:
            tar.extractall(stage, filter="data")
        except tarfile.FilterError:
            pytest.skip("this Python's tarfile has the fix of CVE-2025-4517")
    assert canary.read_bytes() == b"overwritten by the archive"
    assert (tmp_path / "outside" / "created.txt").exists()


@pytest.mark.parametrize("limits", [
    {"MAX_MEMBER_BYTES": 4 * 2**20}, {"MAX_TOTAL_BYTES": 4 * 2**20},
    {"RATIO_FREE_BYTES": 4 * 2**20, "MAX_RATIO": 10}], ids=["member", "total", "ratio"])
def test_a_gzip_bomb_stops_at_the_limit(limits: dict[str, int], tmp_path: Path,
                                        ledger: tuple[Path, bytes], capsys, monkeypatch) -> None:
    """16 MiB of zeros in a few kB of gzip, each limit patched down to 4 MiB (or 10 times the
    archive's size): refused, and at most the limit was ever written (the staging folder
    measured just before it is removed)."""
    for name, value in limits.items():
        monkeypatch.setattr(untrusted_tar, name, value)
    written: list[int] = []

    def measured(archive: Path, stage: Path) -> None:
        try:
            untrusted_tar.extract(archive, stage)
        finally:
            written.append(sum(f.stat().st_size for f in stage.rglob("*") if f.is_file()))

    monkeypatch.setattr(ledger_archive, "extract", measured)
    members: list[Member] = [("mlflow.db", "file", ledger[1])]
    members += [(f"checkpoints/zeros_{i}", "file", bytes(8 * 2**20)) for i in range(2)]
    archive = _tar(tmp_path / "bomb.tar.gz", members)
    assert archive.stat().st_size < 2**20
    line = _refused(capsys, tmp_path, ["unpack", str(archive), "--folder",
                                       str(tmp_path / "t")])
    assert "checkpoints/zeros_0" in line and str(4 * 2**20) in line
    assert written and written[0] <= 4 * 2**20


def test_too_many_members(tmp_path: Path, ledger: tuple[Path, bytes], capsys,
                          monkeypatch) -> None:
    monkeypatch.setattr(untrusted_tar, "MAX_MEMBERS", 10)
    members: list[Member] = [("mlflow.db", "file", ledger[1])]
    members += [(f"mlartifacts/{i}", "file", b"") for i in range(20)]
    archive = _tar(tmp_path / "many.tar.gz", members)
    line = _refused(capsys, tmp_path, ["unpack", str(archive), "--folder", str(tmp_path / "t")])
    assert "more than 10 members" in line


def test_an_oversized_pax_header_is_refused_before_it_is_read(tmp_path: Path, capsys) -> None:
    archive = tmp_path / "pax.tar.gz"
    with tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("mlflow.db")
        info.pax_headers = {"comment": "x" * (untrusted_tar.MAX_HEADER_BYTES + 1)}
        tar.addfile(info, io.BytesIO(b""))
    line = _refused(capsys, tmp_path, ["unpack", str(archive), "--folder", str(tmp_path / "t")])
    assert "extended tar header" in line


@pytest.mark.parametrize("stop", [KeyboardInterrupt, "SIGTERM"])
def test_an_interrupted_unpack_leaves_nothing(stop: object, tmp_path: Path,
                                              ledger: tuple[Path, bytes], monkeypatch) -> None:
    """Interrupted mid-way (staging folder written, store being checked): no trace left."""
    if stop == "SIGTERM" and threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGTERM is caught only in the main thread; here it would end the process")
    def interrupt(*_: object) -> None:
        if stop == "SIGTERM":
            os.kill(os.getpid(), signal.SIGTERM)  # main turns it into SystemExit(143)
            time.sleep(5)
        raise stop  # type: ignore[misc]

    monkeypatch.setattr(ledger_archive, "check_store", interrupt)
    archive = _tar(tmp_path / "ok.tar.gz", [("mlflow.db", "file", ledger[1]),
                                            ("checkpoints/x/step_1.pt", "file", b"w")])
    before, handler = _state(tmp_path), signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt if stop is KeyboardInterrupt else SystemExit) as e:
        main(["unpack", str(archive), "--folder", str(tmp_path / "new" / "target")])
    if stop == "SIGTERM":
        assert e.value.code == 128 + signal.SIGTERM
    assert _state(tmp_path) == before
    assert signal.getsignal(signal.SIGTERM) == handler  # main put it back


def test_pack_refuses_an_existing_file_and_its_own_inputs(tmp_path: Path, capsys,
                                                         ledger: tuple[Path, bytes]) -> None:
    folder = ledger[0]
    existing = tmp_path / "existing.tar.gz"
    existing.write_bytes(b"someone's archive")
    line = _refused(capsys, tmp_path, ["pack", str(existing), "--folder", str(folder)])
    assert str(existing) in line and "exists; pack replaces a file only with --force" in line
    store = _state(folder)
    for own in (folder / "mlflow.db", folder / "mlartifacts" / "x.tar.gz",
                folder / "checkpoints" / "tiny" / "bbbb" / "step_00000010.pt"):
        for force in ([], ["--force"]):
            line = _refused(capsys, tmp_path, ["pack", str(own), "--folder", str(folder), *force])
            assert str(own) in line and "never writes onto what it packs" in line
    assert _state(folder) == store
    # --force replaces an unrelated file
    assert main(["pack", str(existing), "--folder", str(folder), "--force"]) == 0
    assert tarfile.is_tarfile(existing)


def test_a_real_ledger_round_trips(tmp_path: Path, ledger: tuple[Path, bytes], capsys) -> None:
    """What pack writes unpacks: every path in the new folder (MLflow's Default experiment,
    made with its artifacts in the working folder of the process that made the store, too)."""
    archive = tmp_path / "ledger.tar.gz"
    assert main(["pack", str(archive), "--folder", str(ledger[0])]) == 0
    new = tmp_path / "new folder"
    assert main(["unpack", str(archive), "--folder", str(new)]) == 0
    assert "unpacked 2 run(s)" in capsys.readouterr().out
    assert sorted(p.name for p in new.iterdir()) == ["checkpoints", "mlartifacts", "mlflow.db"]
    assert (new / "checkpoints/tiny/bbbb/step_00000010.pt").read_bytes() == b"weights"
    client = MlflowClient(tracking_uri=f"sqlite:///{new / 'mlflow.db'}")
    experiments = client.search_experiments()
    assert {e.name for e in experiments} == {"Default", "tiny"}
    for e in experiments:
        assert untrusted_store._inside(e.artifact_location, new.resolve()), e.artifact_location
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert len(runs) == 2
    for run in runs:
        assert run.info.artifact_uri.startswith((new / "mlartifacts").as_uri())
        assert run.data.tags["checkpoint_dir"].startswith(str(new / "checkpoints"))
    with sqlite3.connect(new / "mlflow.db") as db:
        assert db.execute("select count(*) from tags where instr(value, ?) > 0",
                          (PLACEHOLDER,)).fetchone()[0] == 0
    db.close()


def test_the_schema_lists_match_the_installed_mlflow(ledger: tuple[Path, bytes]) -> None:
    """MLFLOW_TABLES, MLFLOW_TRIGGERS and the plain-index rule are those of a store that the
    installed MLflow made (the fixture's); its revision is a known one. Fails after an MLflow
    upgrade that changes the schema: update the lists in pipeline/ledger/untrusted_store.py."""
    with sqlite3.connect(ledger[0] / "mlflow.db") as db:
        rows = db.execute("select type, name, sql from sqlite_master").fetchall()
        (revision,) = db.execute("select version_num from alembic_version").fetchone()
    db.close()
    assert {n for t, n, _ in rows if t == "table"} == untrusted_store.MLFLOW_TABLES
    triggers = {n: untrusted_store._folded(s) for t, n, s in rows if t == "trigger"}
    assert triggers == {n: untrusted_store._folded(s)
                        for n, s in untrusted_store.MLFLOW_TRIGGERS.items()}
    assert not [n for t, n, _ in rows if t == "view"]
    assert all(untrusted_store._PLAIN_INDEX.fullmatch(s) for t, _, s in rows if t == "index" and s)
    assert revision in untrusted_store.known_revisions()


def test_the_command_line_refuses_without_a_traceback(tmp_path: Path,
                                                      ledger: tuple[Path, bytes]) -> None:
    archive = cve_2025_4517(tmp_path, tmp_path / "target", ledger[1])
    done = subprocess.run([sys.executable, "-m", "pipeline.ledger", "unpack", str(archive),
                           "--folder", str(tmp_path / "target")],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")
    assert not (tmp_path / "target").exists()


def test_the_copy_counts_the_bytes_it_reads(tmp_path: Path, monkeypatch) -> None:
    """Whatever a member's header says, no more than the limit reaches the disk."""
    monkeypatch.setattr(untrusted_tar, "_CHUNK", 2**20)
    with pytest.raises(untrusted_tar.LedgerArchiveError, match="unpacks to more than 3145728"):
        untrusted_tar._copy(io.BytesIO(bytes(10 * 2**20)), tmp_path / "f", "f", 0, 3 * 2**20)
    assert (tmp_path / "f").stat().st_size <= 3 * 2**20


def test_sql_of_the_stores_making_is_interrupted_at_the_deadline(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """A generated column or any other SQL of the store's that runs for ever inside one
    statement (out of SIGTERM's reach) is interrupted by the connection's deadline."""
    monkeypatch.setattr(untrusted_store, "SQL_DEADLINE_S", 0.3)
    sqlite3.connect(tmp_path / "s.db").close()
    with closing(untrusted_store.connect(tmp_path / "s.db", read_only=True)) as db:
        t0 = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="interrupted"):
            db.execute("with recursive c(x) as (select 1 union all select x + 1 from c) "
                       "select count(*) from c").fetchone()
        assert time.monotonic() - t0 < 5
