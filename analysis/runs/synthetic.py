"""Synthetic runs drawn from known laws: to test that the fits recover what generated them.

Why in the package (not only in tests): anyone changing a fit can see, in a few lines, that
it still recovers known exponents; docs/analysis.md shows how. Noise is multiplicative
(lognormal), as the residuals of published fits are roughly constant in log L.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from analysis.runs.table import RunsTable, runs_from_arrays


@dataclass(frozen=True)
class ChinchillaLaw:
    """L = E + A/N^α + B/D^β. Defaults: Hoffmann et al. (2022) Approach 3 values."""

    E: float = 1.69
    A: float = 406.4
    B: float = 410.7
    alpha: float = 0.34
    beta: float = 0.28

    @property
    def a(self) -> float:
        return self.beta / (self.alpha + self.beta)

    def loss(self, n: np.ndarray, d: np.ndarray) -> np.ndarray:
        return self.E + self.A * np.power(n, -self.alpha) + self.B * np.power(d, -self.beta)

    def n_opt(self, flops: float | np.ndarray) -> float | np.ndarray:
        """Exact compute-optimal N for C = 6·N·D (Hoffmann et al. 2022, Eq. 4)."""
        g = (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))
        return g * np.power(np.asarray(flops, dtype=float) / 6.0, self.a)


def isoflop_runs(law: ChinchillaLaw, budgets: np.ndarray, *, sizes_per_budget: int = 9,
                 spread_dex: float = 0.6, noise: float = 0.005, seed: int = 0) -> RunsTable:
    """An IsoFLOP grid: per budget, sizes log-spaced ±spread_dex around the true N_opt."""
    rng = np.random.default_rng(seed)
    n, d, c = [], [], []
    for budget in np.asarray(budgets, dtype=float):
        sizes = law.n_opt(budget) * np.logspace(-spread_dex, spread_dex, sizes_per_budget)
        n.extend(sizes)
        d.extend(budget / (6.0 * sizes))
        c.extend([budget] * sizes_per_budget)
    n_arr, d_arr, c_arr = np.array(n), np.array(d), np.array(c)
    loss = law.loss(n_arr, d_arr) * np.exp(noise * rng.standard_normal(n_arr.size))
    return runs_from_arrays(n_arr, d_arr, loss, budget=c_arr, n_kaplan=n_arr,
                            source=f"synthetic IsoFLOP grid (seed {seed})")


def replicated_runs(law: ChinchillaLaw, budgets: np.ndarray, *, seeds: int = 3,
                    sizes_per_budget: int = 7, spread_dex: float = 0.6, noise: float = 0.005,
                    holdout_budgets: tuple[float, ...] = (), seed: int = 0) -> RunsTable:
    """An IsoFLOP grid with every cell trained under ``seeds`` seeds (independent lognormal
    noise per run), plus one compute-optimal run per ``holdout_budgets`` with role holdout:
    the shape of a sweep that measures its own noise and tests a prediction."""
    rng = np.random.default_rng(seed)
    grid = isoflop_runs(law, budgets, sizes_per_budget=sizes_per_budget,
                        spread_dex=spread_dex, noise=0.0)
    n = np.repeat(grid.column("N"), seeds)
    d = np.repeat(grid.column("D"), seeds)
    budget = np.repeat(grid.column("budget"), seeds)
    seed_col = np.tile(np.arange(seeds), len(grid))
    hold = np.asarray(holdout_budgets, dtype=float)
    n_hold = law.n_opt(hold)
    n, d = np.concatenate([n, n_hold]), np.concatenate([d, hold / (6.0 * n_hold)])
    loss = law.loss(n, d) * np.exp(noise * rng.standard_normal(n.size))
    role = ["main"] * budget.size + ["holdout"] * hold.size
    return runs_from_arrays(
        n, d, loss, budget=np.concatenate([budget, np.full(hold.size, np.nan)]),
        n_kaplan=n, run_ids=[f"run{i}" for i in range(n.size)],
        source=f"synthetic replicated IsoFLOP grid (seed {seed})",
        extra={"seed": np.concatenate([seed_col, np.zeros(hold.size, dtype=int)]),
               "role": role, "schedule": "cosine"})


class Law(Protocol):
    def loss(self, n: np.ndarray, d: np.ndarray) -> np.ndarray: ...


def training_curves(law: Law, sizes: np.ndarray, max_tokens: np.ndarray, *,
                    points: int = 40, noise: float = 0.002,
                    seed: int = 0) -> tuple[RunsTable, pd.DataFrame]:
    """One run per size, trained to ``max_tokens``; its curve is the law along the tokens.

    (A real curve also carries the learning-rate schedule; this one is the ideal envelope
    case of Hoffmann et al. 2022 Approach 1.)
    """
    rng = np.random.default_rng(seed)
    rows = []
    finals = []
    for i, (n, d_max) in enumerate(zip(sizes, max_tokens, strict=True)):
        tokens = np.logspace(np.log10(d_max) - 2.5, np.log10(d_max), points)
        loss = law.loss(np.full(points, n), tokens) * np.exp(noise * rng.standard_normal(points))
        rows.append(pd.DataFrame({"run_id": f"run{i}", "step": np.arange(1, points + 1),
                                  "tokens": tokens, "loss": loss}))
        finals.append((n, d_max, loss[-1]))
    n_arr, d_arr, l_arr = (np.array(v) for v in zip(*finals, strict=True))
    runs = runs_from_arrays(n_arr, d_arr, l_arr, run_ids=[f"run{i}" for i in range(len(sizes))],
                            n_kaplan=n_arr, source=f"synthetic curves (seed {seed})")
    return runs, pd.concat(rows, ignore_index=True)


@dataclass(frozen=True)
class KaplanLaw:
    """L(N, D) = [(N_c/N)^(α_N/α_D) + D_c/D]^α_D. Defaults: Kaplan et al. (2020)."""

    alpha_N: float = 0.076
    alpha_D: float = 0.095
    N_c: float = 8.8e13
    D_c: float = 5.4e13

    def loss(self, n: np.ndarray, d: np.ndarray) -> np.ndarray:
        ratio = self.alpha_N / self.alpha_D
        return np.power(np.power(self.N_c / n, ratio) + self.D_c / d, self.alpha_D)

    @property
    def alpha_C(self) -> float:
        """Frontier exponent of this law with C = 6ND: L_opt ∝ C^-(α_N·α_D/(α_N+α_D))."""
        return self.alpha_N * self.alpha_D / (self.alpha_N + self.alpha_D)

    @property
    def n_opt_exponent(self) -> float:
        """N_opt ∝ C^(α_D/(α_N+α_D)) for this law with C = 6ND."""
        return self.alpha_D / (self.alpha_N + self.alpha_D)


def kaplan_grid(law: KaplanLaw, sizes: np.ndarray, tokens: np.ndarray, *, noise: float = 0.003,
                seed: int = 0) -> RunsTable:
    """Every size trained on every token count (the full N x D grid of Kaplan's Fig. 9)."""
    rng = np.random.default_rng(seed)
    n, d = (g.ravel() for g in np.meshgrid(np.asarray(sizes, float), np.asarray(tokens, float)))
    loss = law.loss(n, d) * np.exp(noise * rng.standard_normal(n.size))
    return runs_from_arrays(n, d, loss, n_kaplan=n, source=f"synthetic Kaplan grid (seed {seed})")
