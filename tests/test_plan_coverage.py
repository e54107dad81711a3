"""IsoFLOP budgets the planner leaves with too few sizes to fit are warned about before
anything trains (pipeline.planner.coverage, issue 55): in the dry run and in the plan a real
sweep prints before its first run. No run is trained here."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.config import load_sweep
from pipeline.planner import expand, plan_warnings, thin_budgets, vocab_size_for
from pipeline.planner.coverage import MIN_BUDGETS, MIN_SIZES

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"
ISOFLOP_SWEEPS = [p for p in sorted((ROOT / "sweeps").glob("*.yaml"))
                  if yaml.safe_load(p.read_text()).get("kind") == "isoflop"]


def _quickstart(tmp_path: Path, **shape: object) -> Path:
    """sweeps/quickstart.yaml with family llama (and these shape settings), in tmp_path."""
    doc = yaml.safe_load(QUICKSTART.read_text())
    doc["family"] = "llama"
    doc["shape"] = {**doc["shape"], **shape}
    path = tmp_path / "quickstart_llama.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _dry_run(path: Path, capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, str]:
    """`python -m pipeline.sweep PATH --dry-run --no-estimate`, in this process."""
    from pipeline.sweep import main

    capsys.readouterr()
    code = main([str(path), "--dry-run", "--no-estimate", *extra])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("quiet", [False, True])
def test_llama_quickstart_dry_run_names_the_budgets_and_the_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture, quiet: bool) -> None:
    """The default gqa_ratio 2 drops the 1- and 3-head shapes at every budget: 2 sizes
    left, no parabola. A warning (the runs still plan, exit 0), kept by --quiet."""
    path = _quickstart(tmp_path)
    code, out = _dry_run(path, capsys, *(["--quiet"] if quiet else []))
    assert code == 0, out
    assert "Traceback" not in out
    assert (f"warning: {path}: IsoFLOP budgets 6e+10, 1.5e+11, 4e+11: 2 of the 4 sizes left; "
            "Approach 2 needs 3 at a budget") in out
    assert "shape n_layer=1 d_model=8: n_heads=1 is not a multiple of shape.gqa_ratio=2" in out
    assert "shape n_layer=2 d_model=24: n_heads=3 is not a multiple of shape.gqa_ratio=2" in out
    assert "fix: set shape.gqa_ratio: 1" in out
    assert (f"warning: {path}: 0 of the 3 budgets keep 3 sizes or more and Approach 2 needs 3 "
            "such budgets: the sweep trains, but fits no IsoFLOP law") in out


def test_llama_quickstart_with_gqa_ratio_1_plans_every_size_without_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _quickstart(tmp_path, gqa_ratio=1)
    code, out = _dry_run(path, capsys)
    assert code == 0, out
    assert "warning" not in out and "skipped" not in out
    assert "12 runs" in out  # 3 budgets x 4 sizes


def test_a_real_sweep_warns_before_its_first_run(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan printed at the start of a sweep carries the warning; the sweep goes on to
    train (stopped here, where the runs would start: nothing is trained or recorded)."""
    import pipeline.sweep

    printed: list[str] = []

    def stop_at_the_first_run(*_args, **_kwargs):
        out = capsys.readouterr()
        printed.append(out.out + out.err)
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline.sweep, "driver_problem", lambda *_a: "")  # no MLflow store
    monkeypatch.setattr(pipeline.sweep, "sigterm_as_interrupt", lambda: None)
    monkeypatch.setattr(pipeline.sweep, "run_sweep", stop_at_the_first_run)
    path = _quickstart(tmp_path)
    capsys.readouterr()
    code = pipeline.sweep.main([str(path), "--no-report", "--no-estimate", "--checkpoint-dir",
                                str(tmp_path / "checkpoints")])
    assert code == 130 and len(printed) == 1
    assert f"warning: {path}: IsoFLOP budgets 6e+10, 1.5e+11, 4e+11: 2 of the 4 sizes" in printed[0]


def _iso(tmp_path: Path, **changes: dict) -> Path:
    """A small count-sized isoflop sweep (the ladder of the width knob), with changes."""
    doc = {
        "name": "iso", "kind": "isoflop", "family": "gpt",
        "shape": {"knob": "width", "head_dim": 8, "aspect_ratio": 16},
        "data": {"corpus": "stdlib", "seq_len": 32},
        "train": {"batch_size": 4, "lr": 3e-3},
        "isoflop": {"budgets": [1e11, 3e11, 1e12],
                    "sizes": {"count": 5, "span": 10.0, "tokens_per_param": 20.0}},
    }
    for section, values in changes.items():
        doc[section] = {**doc[section], **values}
    doc["isoflop"]["budgets"] = [1e11, 3e11, 1e12]
    path = tmp_path / "iso.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _warnings(path: Path) -> list[str]:
    cfg = load_sweep(path)
    return plan_warnings(cfg, expand(cfg, path, vocab_size_for(cfg)), str(path))


def test_the_embedding_cap_that_thins_a_budget_is_named_with_its_value(tmp_path: Path) -> None:
    """Tiny models are mostly embeddings (widths 1-6 of this ladder: 72% down to 14%): a cap
    of 0.2 keeps 2 of its 6 sizes, where 5 are asked for, at every budget."""
    ladder_of_6 = {"knob": "width", "head_dim": 8, "aspect_ratio": 16, "max_width": 6}
    assert _warnings(_iso(tmp_path, shape=ladder_of_6)) == []
    path = _iso(tmp_path, shape=ladder_of_6, isoflop={"sizes": {
        "count": 5, "span": 10.0, "tokens_per_param": 20.0, "max_embedding_fraction": 0.2}})
    text = "\n".join(_warnings(path))
    assert (f"{path}: IsoFLOP budgets 1e+11, 3e+11, 1e+12: 2 of the 5 sizes left; Approach 2 "
            "needs 3 at a budget") in text
    assert ("\n  only 2 of the shape rule's 6 sizes are within "
            "sizes.max_embedding_fraction=0.2 at this budget") in text
    assert "fix: raise sizes.max_embedding_fraction (0.2)" in text


def test_min_steps_that_thins_a_budget_names_the_batch_and_min_steps(tmp_path: Path) -> None:
    """At the smallest budget the largest sizes get too few steps: that budget only."""
    path = _iso(tmp_path, train={"batch_size": 64, "min_steps": 200})
    cfg = load_sweep(path)
    thin = thin_budgets(cfg, expand(cfg, path, vocab_size_for(cfg)))
    assert [t.budget for t in thin] == [1e11] and thin[0].left < MIN_SIZES
    text = "\n".join(_warnings(path))
    assert f"warning: {path}" not in text  # the CLI adds "warning: "; the text names the file
    assert f"{path}: IsoFLOP budget 1e+11: {thin[0].left} of the 5 sizes left" in text
    assert "(< min_steps=200)" in text
    assert "fix: raise the budget, or lower train.batch_size (64) or train.min_steps (200)" in text
    assert f"{path}: Approach 2 fits N_opt = k C^a on the other 2 budgets" not in text
    assert f"{path}: 2 of the 3 budgets keep 3 sizes or more" in text


@pytest.mark.parametrize("path", ISOFLOP_SWEEPS, ids=lambda p: p.name)
def test_no_shipped_isoflop_sweep_has_a_budget_too_thin_to_fit(path: Path) -> None:
    """Every shipped IsoFLOP study keeps the sizes it asks for at each budget (or 3 at
    least). short_run_stability.yaml asks for 2 widths on purpose (a study of seed scatter,
    not a law) and loses none: not warned about."""
    cfg = load_sweep(path)
    plan = expand(cfg, path, vocab_size_for(cfg))
    assert thin_budgets(cfg, plan) == []
    assert plan_warnings(cfg, plan, str(path)) == []


def test_the_minima_are_the_analysis_ones() -> None:
    """The planner copies Approach 2's minima (it may not import the analysis)."""
    from analysis.fits import approach2

    assert (MIN_SIZES, MIN_BUDGETS) == (approach2.MIN_SIZES, approach2.MIN_BUDGETS)
