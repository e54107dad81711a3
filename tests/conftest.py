"""Test-session environment: every scratch file goes to a temporary folder.

Ray's session files (RAY_TMPDIR, a short path because Ray's unix sockets must fit in 107
characters), the token cache, torch's inductor cache and the MLflow store never land in the
project, /tmp/ray or the home folder. Usage-stats reporting is off.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_SCRATCH = Path(tempfile.mkdtemp(prefix="sp-"))
_DEFAULTS = {
    "RAY_TMPDIR": str(_SCRATCH / "ray"),
    "SCALING_CACHE_DIR": str(_SCRATCH / "cache"),
    "TORCHINDUCTOR_CACHE_DIR": str(_SCRATCH / "inductor"),
    "MLFLOW_TRACKING_URI": f"sqlite:///{_SCRATCH / 'mlflow.db'}",
    "RAY_USAGE_STATS_ENABLED": "0",
}
for _key, _value in _DEFAULTS.items():
    os.environ[_key] = _value
for _key in ("RAY_TMPDIR", "SCALING_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
    Path(os.environ[_key]).mkdir(parents=True, exist_ok=True)
os.environ.pop("RAY_ADDRESS", None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_SCRATCH, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that share a module-scoped fixture of their own module (a sweep trained, a
    report made, a cluster started) are one xdist group, so one worker builds the fixture
    once (`--dist loadgroup` in pyproject.toml). Under `--dist load` the two workers each
    took part of such a module and each built its fixture."""
    for item in items:
        module = item.nodeid.split("::")[0]
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        for name in info.names_closure:
            defs = info.name2fixturedefs.get(name) or ()
            if defs and defs[-1].scope == "module" and defs[-1].baseid == module:
                item.add_marker(pytest.mark.xdist_group(module))
                break


@pytest.fixture(scope="session")
def scratch() -> Path:
    """The session's scratch folder (shared token cache lives under it)."""
    return _SCRATCH


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A token cache of the test module's own (the module asks for it, or for module_cache)."""
    return tmp_path_factory.mktemp("token-cache")


@pytest.fixture
def module_cache(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pipeline.data's cache folder ($SCALING_CACHE_DIR) set to the module's ``cache_dir``
    for one test: a module that builds tokens in a test and in its runs uses one cache."""
    from pipeline.data import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(cache_dir))
    return cache_dir


@pytest.fixture(scope="module")
def small_text(cache_dir: Path):
    """The stdlib corpus' first 300 kB as bytes tokens, in the module's cache: the tokens of
    the tests that train tiny models in-process."""
    from pipeline.data import load_data
    from pipeline.vocab.spec import DataSpec

    return load_data(DataSpec(max_bytes=300_000), cache_dir=str(cache_dir))
