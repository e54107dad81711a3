"""The report's trust sections (noise, held-out budget, conventions, WSD vs cosine) on a CSV
that has seeds, a held-out run and WSD runs; their numbers agree with fit.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import report
from analysis.runs.synthetic import ChinchillaLaw, replicated_runs
from analysis.text import fmt

LAW = ChinchillaLaw()
BUDGETS = np.logspace(17, 19, 4)
WSD_PENALTY = 1.01


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    runs = replicated_runs(LAW, BUDGETS, seeds=2, sizes_per_budget=6, noise=0.004,
                           holdout_budgets=(1e20,), seed=3)
    frame = runs.frame.copy()
    frame["flops_exact"] = 6 * frame["N"] * frame["D"] * (1 + 2e3 / np.sqrt(frame["N"]))
    frame["N_kaplan"] = frame["N"] - 3e6
    frame["branch_of"] = ""
    # WSD runs of the largest budget's cells (seed 0), one branched from a trunk.
    wsd = frame[(frame["budget"] == BUDGETS[-1]) & (frame["seed"] == 0)].copy()
    wsd["loss"] *= WSD_PENALTY
    wsd["schedule"] = "wsd"
    wsd["branch_of"] = ["trunk"] + [""] * (len(wsd) - 1)
    path = tmp_path_factory.mktemp("csv") / "trust.csv"
    frame = pd.concat([frame, wsd], ignore_index=True)
    frame.drop(columns=["run_id", "C_kaplan", "family"]).to_csv(path, index=False)
    out = path.parent / "report"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report, "print", lambda *a, **k: None, raising=False)
        assert report.main(["--csv", str(path), "--budget-col", "budget", "--out", str(out),
                            "--bootstrap", "20"]) == 0
    return out


def _section(md: str, heading: str) -> str:
    return md.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_noise_section_quotes_sigma_and_the_residual_ratios(folder):
    md = (folder / "report.md").read_text()
    fit = json.loads((folder / "fit.json").read_text())
    noise = fit["noise"]
    # 24 cells x seeds 0 and 1: 24 degrees of freedom within cells, one to seed 1's offset
    assert noise["status"] == "ok" and noise["n_groups"] == 24 and noise["dof"] == 23
    assert noise["pooled_dof"] == 24 and noise["draw_effect_dof"] == 1 and noise["balanced"]
    section = _section(md, "Run-to-run noise")
    low, high = noise["sigma_ci"]
    assert f"σ = {fmt(noise['sigma'])} [{low:.4g}, {high:.4g}] nats/token" in section
    assert "from 24 replicate group(s) of 48 runs (23 degrees of freedom" in section
    assert f"within cells, offsets included: {fmt(noise['pooled_sigma'])}" in section
    three = fit["residuals"][0]
    assert three["what"] == "Approach 3" and three["n_points"] == 24
    assert (f"| Approach 3 | 24 | 5 | {fmt(three['rms'])} | {fmt(three['expected_rms'])} | "
            f"{fmt(three['ratio'])} |") in section
    assert "**Run-to-run noise** from 24 seed-replicate groups" in md


def test_held_out_section_and_summary_agree_with_fit_json(folder):
    md = (folder / "report.md").read_text()
    hold = json.loads((folder / "fit.json").read_text())["holdout"]
    (run,) = hold["runs"]
    section = _section(md, "Held-out budget")
    row = next(line for line in section.splitlines() if line.startswith(f"| {run['run']} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == f"{run['loss']:.4f}"
    low, high = run["approach3_ci"]
    assert cells[5] == f"{fmt(run['approach3'])} [{low:.4g}, {high:.4g}]"
    assert cells[6] == f"{run['approach3_error']:+.2%}"
    assert cells[7] == ("yes" if run["approach3_within_target"] else "no")
    assert cells[9] == f"{run['frontier_error']:+.2%}"
    assert abs(run["approach3_error"]) < 0.02
    worst = abs(run["approach3_error"])
    assert (f"**Held-out budget** (1 run(s), never fitted): Approach 3 max |error| "
            f"{worst:.2%} (within the 2% target)") in md


def test_conventions_table_has_every_convention(folder):
    md = (folder / "report.md").read_text()
    refits = json.loads((folder / "fit.json").read_text())["convention_refits"]
    assert refits["status"] == "ok" and refits["resamples"] == 20
    section = _section(md, "Conventions")
    for row in refits["rows"]:
        three = row["approaches"]["3"]
        assert three["status"] == "ok", row["label"]
        low, high = three["ci95"]["a"]
        assert f"| {row['label']} | {fmt(row['reference_flops'])} |" in section
        assert f"{fmt(three['a'])} [{low:.4g}, {high:.4g}]" in section
    assert re.search(r"Approach 3: a ranges over [0-9.]+–[0-9.]+ \(Δa = [0-9.e-]+\)", section)


def test_wsd_section_pairs_the_cells_and_fits_stay_on_cosine(folder):
    md = (folder / "report.md").read_text()
    fit = json.loads((folder / "fit.json").read_text())
    pairs = fit["schedules"]["pairs"]
    assert len(pairs) == 6 and sum(p["branched"] for p in pairs) == 1
    assert all(p["n_cosine"] == 2 and p["n_wsd"] == 1 for p in pairs)
    section = _section(md, "WSD branches vs cosine runs")
    assert f"Mean difference over 6 pair(s): {fit['schedules']['mean_difference']:+.4f}" in section
    assert fit["fitted"] == {"points": 24, "schedule": "cosine", "averaged_runs": 24,
                             "holdout_runs": 1, "holdout_above": None,
                             "left_out": fit["fitted"]["left_out"], "repeated_data": [],
                             "repeat_variants": 0}
    assert len(fit["fitted"]["left_out"]) == 7  # the held-out run and 6 WSD runs
    assert "the fits use 24 points (24 seed replicate(s) averaged into their cells; 1 held " \
           "out; 6 of another schedule left out)" in md
    runs = _section(md, "Runs")
    assert "finished, seed 1 |" in runs and "finished, seed 0, held out |" in runs
    assert "finished, seed 0, wsd, not fitted |" in runs
