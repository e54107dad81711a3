"""One spine (issue 50): the sweep records what it planned on its parent run, reading and
planning its file once (the layers themselves: tests/test_architecture.py).

The end-to-end counts (one YAML parse, one expand per launch) and the plan of a real sweep
are asserted on tests/test_sweep.py's tiny sweep (its fixture counts them): a sweep of its own
here would cost a minute of the suite. These are the pieces, against a sqlite store.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pipeline.config import load_sweep, load_sweep_and_sha256
from pipeline.driver.runner import record_plan
from pipeline.tracking import Ledger
from pipeline.vocab import keys
from pipeline.vocab.manifest import PlanManifest, PlannedRun

TINY = Path(__file__).parent / "data" / "sweeps" / "tiny.yaml"
SHA_A, SHA_B = "a" * 64, "b" * 64


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Ledger:
    folder = tmp_path_factory.mktemp("spine")
    return Ledger(f"sqlite:///{folder / 'mlflow.db'}", "spine")


def _plan(sha: str, *runs: tuple[str, str]) -> PlanManifest:
    return PlanManifest("spine", sha, "6nd", tuple(
        PlannedRun(run_id, role, 1e9, "gpt") for run_id, role in runs))


def _parent(ledger: Ledger) -> str:
    run = ledger.client.create_run(ledger.experiment_id, tags={keys.TAG_KIND: "other"})
    return run.info.run_id


def test_the_sweep_file_is_read_once_for_its_config_and_its_hash(tmp_path: Path,
                                                                   monkeypatch) -> None:
    sweep = tmp_path / "tiny.yaml"
    sweep.write_bytes(b"\xef\xbb\xbf" + TINY.read_bytes())  # a BOM: hashed, not parsed
    reads = []
    original = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda p: reads.append(p) or original(p))
    cfg, sha = load_sweep_and_sha256(sweep)
    assert reads == [sweep]
    assert sha == hashlib.sha256(sweep.read_bytes()).hexdigest()
    assert cfg == load_sweep(sweep)


def test_a_plan_written_is_read_back_and_none_before(ledger: Ledger) -> None:
    parent = _parent(ledger)
    assert ledger.read_plan(parent) is None
    plan = _plan(SHA_A, ("m1", keys.ROLE_MAIN), ("m2", keys.ROLE_MAIN))
    ledger.write_plan(parent, plan)
    assert ledger.read_plan(parent) == plan


@pytest.mark.parametrize("content", ["not json {", '{"format": "scaling-plan", "version": 1}',
                                     "[1, 2]"])
def test_a_plan_this_code_would_not_write_reads_as_none(ledger: Ledger, content: str) -> None:
    """A ledger may come from someone else: a broken or foreign plan.json is no plan."""
    parent = _parent(ledger)
    ledger.client.log_text(parent, content, keys.PLAN_ARTIFACT)
    assert ledger.read_plan(parent) is None


def test_a_relaunch_of_the_same_file_keeps_its_held_out_runs(ledger: Ledger) -> None:
    """Same sha256: the held-out runs planned by the last launch stay listed (a relaunch
    stopped before its held-out step); another file's held-out runs do not."""
    parent = _parent(ledger)
    main = _plan(SHA_A, ("m1", keys.ROLE_MAIN), ("m2", keys.ROLE_MAIN))
    record_plan(ledger, parent, main.with_runs(_plan(SHA_A, ("h1", keys.ROLE_HOLDOUT)).runs))
    record_plan(ledger, parent, main)  # the relaunch, before its held-out step
    again = ledger.read_plan(parent)
    assert again.run_ids == {"m1", "m2", "h1"} and [r.run_id for r in again.holdout()] == ["h1"]
    record_plan(ledger, parent, main)  # once more: listed once
    assert [r.run_id for r in ledger.read_plan(parent).runs] == ["m1", "m2", "h1"]
    edited = _plan(SHA_B, ("m3", keys.ROLE_MAIN))
    record_plan(ledger, parent, edited)  # the file changed: its plan alone
    assert ledger.read_plan(parent) == edited


def test_a_plan_that_cannot_be_written_never_fails_the_sweep(
        ledger: Ledger, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    parent = _parent(ledger)

    def broken(*_a: object) -> None:
        raise OSError("[disk] full")

    monkeypatch.setattr(ledger, "write_plan", broken)
    record_plan(ledger, parent, _plan(SHA_A, ("m1", keys.ROLE_MAIN)))
    out = " ".join(capsys.readouterr().out.split())
    assert f"warning: the sweep's plan ({keys.PLAN_ARTIFACT}) was not recorded" in out
    assert "OSError: [disk] full" in out



def test_a_linked_plan_is_neither_read_nor_written_through(ledger: Ledger,
                                                           tmp_path: Path) -> None:
    """A plan.json that is a link (someone else's ledger) is no plan, and the next write
    replaces the link, never the file it points to."""
    parent = _parent(ledger)
    target = tmp_path / "elsewhere.json"
    plan = _plan(SHA_A, ("m1", keys.ROLE_MAIN))
    target.write_text(__import__("json").dumps(plan.to_dict()))
    local = ledger._local_plan(parent)
    local.parent.mkdir(parents=True, exist_ok=True)
    local.symlink_to(target)
    assert ledger.read_plan(parent) is None
    before = target.read_bytes()
    ledger.write_plan(parent, _plan(SHA_B, ("m2", keys.ROLE_MAIN)))
    assert target.read_bytes() == before and not local.is_symlink()
    assert ledger.read_plan(parent).run_ids == {"m2"}
