"""The fits, in one import: every function returns a frozen dataclass (a typed result).

One concern per module, gathered here so callers need not know the layout:

  Kaplan et al. 2020        analysis.kaplan       fit_kaplan, fit_kaplan_joint -> KaplanFit,
                                                  KaplanJoint; InversePowerLaw for each law
  Chinchilla Approach 1     analysis.approach1    fit_approach1 -> Approach1Fit
  Chinchilla Approach 2     analysis.approach2    fit_approach2 -> Approach2Fit (+ flagged
                                                  BudgetMinimum rows)
  Chinchilla Approach 3     analysis.approach3    fit_approach3 -> Approach3Fit
  bootstrap                 analysis.bootstrap    Bootstrap, Interval; bootstrap_<approach>
  documented values         analysis.documented   DOCUMENTED, ComparisonRow, compare
  extrapolation check       analysis.extrapolation  ExtrapolationCheck
  which runs are fitted     analysis.selection    select_runs -> FitSelection
  run-to-run noise          analysis.noise        estimate_noise -> NoiseEstimate,
                                                  collapse_replicates (one point per cell)
  residuals against noise   analysis.residuals    ResidualCheck
  held-out runs             analysis.holdout      check_holdout -> HoldoutCheck
  N/C conventions           analysis.conventions  compare_conventions -> ConventionTable
  WSD vs cosine             analysis.schedules    compare_schedules -> ScheduleComparison
  everything at once        analysis.analyze      analyze -> Analysis

Degenerate input raises analysis.errors.FitError (a ValueError) with the reason.
"""

from analysis.analyze import Analysis, Estimate, Skipped, analyze
from analysis.approach1 import Approach1Fit, bootstrap_approach1, fit_approach1
from analysis.approach2 import Approach2Fit, BudgetMinimum, bootstrap_approach2, fit_approach2
from analysis.approach3 import (
    DEFAULT_GRID,
    Approach3Fit,
    StartGrid,
    bootstrap_approach3,
    fit_approach3,
    huber_objective,
)
from analysis.bootstrap import Bootstrap, Interval, run_bootstrap
from analysis.conventions import ConventionRow, ConventionTable, compare_conventions
from analysis.documented import DOCUMENTED, ComparisonRow, Documented, compare
from analysis.envelope import Curve, Envelope, build_curves, envelope
from analysis.errors import AnalysisError, DataError, FitError
from analysis.extrapolation import ExtrapolationCheck, check_approach2, check_approach3
from analysis.holdout import FrontierLaw, HoldoutCheck, HoldoutRow, check_holdout
from analysis.kaplan import KaplanFit, KaplanJoint, bootstrap_kaplan, fit_kaplan, fit_kaplan_joint
from analysis.noise import NoiseEstimate, NoiseGroup, collapse_replicates, estimate_noise
from analysis.powerlaw import InversePowerLaw, PowerLaw, fit_inverse_power_law, fit_power_law
from analysis.residuals import ResidualCheck
from analysis.schedules import ScheduleComparison, SchedulePair, compare_schedules
from analysis.selection import FitSelection, select_runs

__all__ = [
    "DEFAULT_GRID", "DOCUMENTED", "Analysis", "AnalysisError", "Approach1Fit", "Approach2Fit",
    "Approach3Fit", "Bootstrap", "BudgetMinimum", "ComparisonRow", "ConventionRow",
    "ConventionTable", "Curve", "DataError", "Documented", "Envelope", "Estimate",
    "ExtrapolationCheck", "FitError", "FitSelection", "FrontierLaw", "HoldoutCheck",
    "HoldoutRow", "Interval", "InversePowerLaw", "KaplanFit", "KaplanJoint", "NoiseEstimate",
    "NoiseGroup", "PowerLaw", "ResidualCheck", "ScheduleComparison", "SchedulePair", "Skipped",
    "StartGrid", "analyze", "bootstrap_approach1", "bootstrap_approach2",
    "bootstrap_approach3", "bootstrap_kaplan", "build_curves", "check_approach2",
    "check_approach3", "check_holdout", "collapse_replicates", "compare", "compare_conventions",
    "compare_schedules", "envelope", "estimate_noise", "fit_approach1", "fit_approach2",
    "fit_approach3", "fit_inverse_power_law", "fit_kaplan", "fit_kaplan_joint",
    "fit_power_law", "huber_objective", "run_bootstrap", "select_runs",
]
