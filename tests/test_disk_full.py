"""A full disk (issue 22), on a small file system of its own: a tmpfs with a size limit.

Three writers meet it: a checkpoint, the token store, a report. Each must fail with one clear
message naming the path and the bytes needed, keep what was there before (the previous
checkpoint, the previous report) and leave no partial file that a later reader could take
for a complete one. Mounting needs root (CI and these machines run as root); where mount is
refused the tests are skipped with mount's message, never counted as passing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from pipeline import checkpoint

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "sweeps" / "tiny.yaml"
EPOCH_ARGS = ["--csv", str(ROOT / "tests" / "data" / "chinchilla_epoch_fig4.csv"),
              "--n-col", "Model Size", "--c-col", "Training FLOP", "--loss-col", "loss",
              "--drop-highest-loss", "5", "--bootstrap", "0"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted at tmp_path/disk for the test, unmounted after it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def _fill(disk: Path, leave: int) -> None:
    """Write a filler file so that about `leave` bytes stay free."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(disk / "filler", "wb") as f:
        f.write(b"\0" * max(free - leave, 0))


def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_checkpoint_on_a_full_disk_fails_clearly_and_keeps_the_previous_one(
    small_disk: Path,
) -> None:
    folder = small_disk / "run"
    weights = torch.arange(150_000, dtype=torch.float32)  # 600 kB
    checkpoint.save(folder, 10, {"w": weights, "step": 10})
    before = _listing(folder)
    _fill(small_disk, leave=200_000)
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.save(folder, 20, {"w": weights + 1, "step": 20})
    message = str(err.value)
    assert "step 20" in message and str(folder / "step_00000020.pt") in message
    assert "no space left on the disk" in message and "bytes needed" in message
    assert "bytes free" in message
    assert _listing(folder) == before  # step 10 as it was, nothing of step 20, no temp file
    state = checkpoint.load_latest(folder)
    assert state["step"] == 10 and torch.equal(state["w"], weights)


def test_the_token_store_on_a_full_disk_is_one_error_and_no_partial_file(
    small_disk: Path, tmp_path: Path,
) -> None:
    cache = small_disk / "cache"
    cache.mkdir()
    _fill(small_disk, leave=100_000)  # the tiny sweep's tokens need about 400 kB
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(TINY.read_text())
    env = {**os.environ, "SCALING_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pipeline.sweep", str(sweep), "--dry-run",
                           "--no-estimate"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert str(sweep) in errors[0] and str(cache) in errors[0]
    assert "no space left on the disk" in errors[0] and "bytes needed" in errors[0]
    # Only the lock and the tokenizer (written before the tokens) may remain: no .bin, no
    # meta, no temp file; a later sweep with room builds the store afresh.
    bins = list(cache.rglob("*.bin"))
    files = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert not bins and not [f for f in files if ".tmp-" in f], files
    metas = [p for p in cache.rglob("*.json") if not p.name.endswith(".tokenizer.json")]
    assert not metas, files
    (small_disk / "filler").unlink()
    again = subprocess.run([sys.executable, "-m", "pipeline.sweep", str(sweep), "--dry-run",
                            "--no-estimate"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert len(list(cache.rglob("*.bin"))) == 1


def test_a_report_on_a_full_disk_fails_clearly_and_keeps_the_previous_report(
    small_disk: Path, tmp_path: Path,
) -> None:
    out = small_disk / "report"
    cmd = [sys.executable, "-m", "analysis.report", *EPOCH_ARGS, "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    before = _listing(out)
    _fill(small_disk, leave=50_000)
    again = subprocess.run([*cmd, "--force"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 2, again.stdout[-2000:] + again.stderr[-2000:]
    assert "Traceback" not in again.stderr
    errors = [line for line in again.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, again.stderr
    assert f"to write {out}" in errors[0] and "bytes needed" in errors[0]
    assert f"{out} is unchanged" in errors[0]
    assert _listing(out) == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "report"]  # no .partial
