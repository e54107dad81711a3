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
from analysis.documented import DOCUMENTED, ComparisonRow, Documented, compare
from analysis.envelope import Curve, Envelope, build_curves, envelope
from analysis.errors import AnalysisError, DataError, FitError
from analysis.extrapolation import ExtrapolationCheck, check_approach2, check_approach3
from analysis.kaplan import KaplanFit, KaplanJoint, bootstrap_kaplan, fit_kaplan, fit_kaplan_joint
from analysis.powerlaw import InversePowerLaw, PowerLaw, fit_inverse_power_law, fit_power_law

__all__ = [
    "DEFAULT_GRID", "DOCUMENTED", "Analysis", "AnalysisError", "Approach1Fit", "Approach2Fit",
    "Approach3Fit", "Bootstrap", "BudgetMinimum", "ComparisonRow", "Curve", "DataError",
    "Documented", "Envelope", "Estimate", "ExtrapolationCheck", "FitError", "Interval",
    "InversePowerLaw", "KaplanFit", "KaplanJoint", "PowerLaw", "Skipped", "StartGrid",
    "analyze", "bootstrap_approach1", "bootstrap_approach2", "bootstrap_approach3",
    "bootstrap_kaplan", "build_curves", "check_approach2", "check_approach3", "compare",
    "envelope", "fit_approach1", "fit_approach2", "fit_approach3", "fit_inverse_power_law",
    "fit_kaplan", "fit_kaplan_joint", "fit_power_law", "huber_objective", "run_bootstrap",
]
