"""Atomic, checksummed checkpoints: a killed writer or a corrupt file is never trusted.

Layout in a run's folder:
  step_00000120.pt        torch.save of the trainer's payload (model, optimizer, rng, step, ...)
  step_00000120.pt.sha256 hex digest of the .pt file, written after it (its presence = complete)
Each file is written to a temporary name in the same folder, fsynced, then os.replace'd, so a
reader sees either the old state or the new one. The two newest good checkpoints are kept:
if the newest is corrupt, the run restarts from the previous one (with a warning). A full disk
fails the run with the bytes the checkpoint needed (pipeline.data.files.DiskFullError) and
leaves the earlier checkpoints as they were.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import warnings
from pathlib import Path

import torch

from pipeline.data.files import _atomic_write

KEEP = 2
_NAME = re.compile(r"^step_(\d{8})\.pt$")


class CheckpointError(RuntimeError):
    """The checkpoint folder cannot be written (read-only, disk full, ...)."""


def save(folder: str | Path, step: int, payload: dict) -> Path:
    """Write payload as the checkpoint of `step`; prune all but the KEEP newest up to it."""
    folder = Path(folder)
    path = folder / f"step_{step:08d}.pt"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        torch.save(payload, buf)
        data = buf.getvalue()
        _atomic_write(path, data)
        _atomic_write(path.with_name(path.name + ".sha256"), hashlib.sha256(data).hexdigest().encode())
    except OSError as e:
        with contextlib.suppress(OSError):  # without its checksum it is never read: free it
            path.unlink(missing_ok=True)
        raise CheckpointError(f"cannot write checkpoint for step {step} in {folder}: {e}") from e
    # Keep the KEEP newest up to this step. Later ones are from an abandoned timeline (skipped
    # as corrupt, or a run restarted from scratch): kept, they would make this save prune the
    # file it has just written, and a resume jump back to them.
    listed = _listed(folder)
    stale = [p for p in listed if _step_of(p) > step]
    for old in stale + [p for p in listed if _step_of(p) <= step][KEEP:]:
        old.unlink(missing_ok=True)
        old.with_name(old.name + ".sha256").unlink(missing_ok=True)
    return path


def _step_of(path: Path) -> int:
    return int(_NAME.match(path.name).group(1))


def _listed(folder: Path) -> list[Path]:
    """Checkpoint files, newest first."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if _NAME.match(p.name)]
    return sorted(found, key=lambda p: p.name, reverse=True)


def load_latest(folder: str | Path, map_location: str | torch.device = "cpu") -> dict | None:
    """The newest checkpoint whose checksum matches and that loads; None if there is none.

    Corrupt or incomplete files are reported with a warning and skipped (not deleted: they
    are evidence), so the run restarts from the previous good one or from scratch.
    """
    for path in _listed(Path(folder)):
        digest_file = path.with_name(path.name + ".sha256")
        data = path.read_bytes()
        if not digest_file.exists():
            warnings.warn(f"checkpoint {path} has no checksum file (interrupted write); skipped",
                          stacklevel=2)
            continue
        # Bytes, not text: a damaged digest file must not raise UnicodeDecodeError.
        if hashlib.sha256(data).hexdigest().encode() != digest_file.read_bytes().strip():
            warnings.warn(f"checkpoint {path} fails its sha256 check (corrupt); skipped",
                          stacklevel=2)
            continue
        try:
            # weights_only: a checkpoint is data, never code (no arbitrary unpickling).
            return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
        except Exception as e:  # noqa: BLE001 - any load failure means "not usable"
            warnings.warn(f"checkpoint {path} does not load ({e}); skipped", stacklevel=2)
    return None
