"""pipeline.ledger.archive: a ledger packed in one folder resumes in another, paths rewritten."""

from __future__ import annotations

import json
import sqlite3
import tarfile
import urllib.parse
from contextlib import closing
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline.ledger.archive import PLACEHOLDER, LedgerArchiveError, main, pack, unpack
from pipeline.tracking import prepare_store
from pipeline.vocab import keys


def _ledger(folder: Path) -> None:
    """A real MLflow store in FOLDER: a finished run and a stopped one, each with checkpoints."""
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    experiment = prepare_store(uri, "tiny")
    client = MlflowClient(tracking_uri=uri)
    for run_id, status in (("aaaa", keys.STATUS_FINISHED), ("bbbb", keys.STATUS_KILLED)):
        ckpt = folder / "checkpoints" / "tiny" / run_id
        ckpt.mkdir(parents=True)
        (ckpt / "step_00000010.pt").write_bytes(b"weights")
        (ckpt / "step_00000010.pt.sha256").write_text("digest")
        (ckpt / ".step_00000020.pt.x.tmp").write_bytes(b"half-written")
        if status == keys.STATUS_FINISHED:  # a WSD trunk: its branches start from this state
            (ckpt / "branch_00000008").mkdir()
            (ckpt / "branch_00000008" / "state.pt").write_bytes(b"trunk state")
        run = client.create_run(experiment, tags={keys.TAG_RUN_ID: run_id,
                                                  keys.TAG_STATUS: status,
                                                  "checkpoint_dir": str(ckpt)})
        client.log_dict(run.info.run_id, {"run_id": run_id}, keys.SPEC_ARTIFACT)


def test_pack_then_unpack_elsewhere_points_every_path_at_the_new_folder(tmp_path: Path) -> None:
    # Spaces: MLflow's artifact URIs percent-encode them (file:///.../old%20dir/...).
    old, new = tmp_path / "old dir", tmp_path / "new dir"
    old.mkdir()
    _ledger(old)
    packed = pack(old, tmp_path / "ledger.tar.gz")
    assert packed.runs == {keys.STATUS_FINISHED: 1, keys.STATUS_KILLED: 1}
    # The stopped run's checkpoints; of the finished run only its branch state.
    assert packed.checkpoint_runs == ("aaaa", "bbbb")
    with tarfile.open(packed.archive) as tar:
        names = sorted(tar.getnames())
        db = tar.extractfile("mlflow.db").read()
    assert "checkpoints/tiny/bbbb/step_00000010.pt" in names
    assert "checkpoints/tiny/aaaa/branch_00000008/state.pt" in names
    assert not any("aaaa/step_" in n or n.endswith(".tmp") for n in names)
    assert str(old).encode() not in db and PLACEHOLDER.encode() in db
    assert urllib.parse.quote(str(old)).encode() not in db

    assert unpack(packed.archive, new) == 2
    client = MlflowClient(tracking_uri=f"sqlite:///{new / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert len(runs) == 2
    for run in runs:
        assert run.info.artifact_uri.startswith((new / "mlartifacts").as_uri())
        spec = Path(urllib.parse.unquote(urllib.parse.urlparse(run.info.artifact_uri).path))
        spec = spec / keys.SPEC_ARTIFACT
        assert json.loads(spec.read_text()) == {"run_id": run.data.tags[keys.TAG_RUN_ID]}
        assert run.data.tags["checkpoint_dir"].startswith(str(new / "checkpoints"))
    assert (new / "checkpoints/tiny/bbbb/step_00000010.pt").read_bytes() == b"weights"
    with closing(sqlite3.connect(new / "mlflow.db")) as c:
        assert c.execute("select count(*) from tags where instr(value, ?) > 0",
                         (str(old),)).fetchone()[0] == 0


def test_unpack_refuses_a_folder_that_holds_a_ledger_and_changes_nothing(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    _ledger(old)
    archive = pack(old, tmp_path / "ledger.tar.gz", checkpoints=False).archive
    before = (old / "mlflow.db").read_bytes()
    with pytest.raises(LedgerArchiveError, match="already holds mlflow.db"):
        unpack(archive, old)
    assert (old / "mlflow.db").read_bytes() == before


def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path: Path, capsys) -> None:
    assert main(["pack", str(tmp_path / "out.tar.gz"), "--folder", str(tmp_path)]) == 2
    assert "no mlflow.db here" in capsys.readouterr().err
    assert not (tmp_path / "out.tar.gz").exists()

    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar")
    assert main(["unpack", str(junk), "--folder", str(tmp_path / "f")]) == 2
    assert "cannot be read as a gzipped tar" in capsys.readouterr().err

    other = tmp_path / "other.tar.gz"
    with tarfile.open(other, "w:gz") as tar:
        tar.add(junk, arcname="notes.txt")
    with pytest.raises(LedgerArchiveError, match="not a ledger archive"):
        unpack(other, tmp_path / "g")
    assert not (tmp_path / "f").exists() and not (tmp_path / "g").exists()
