"""The data-constrained law (Muennighoff et al. 2023; issue 52): ``law`` (the law and its fit)
and ``entry`` (the table entry, the loss owed to repetition, the optimum for a fixed corpus).
The names most callers need, from one place."""

from analysis.fits.data_constrained.entry import (
    CorpusOptimum,
    DataConstrainedFit,
    RepeatedRun,
    corpus_optimum,
    epochs_vanish,
    repeated_runs,
    returns_vanish_flops,
    run_data_constrained,
)
from analysis.fits.data_constrained.law import (
    FORMS,
    R_BOUNDS,
    REPEAT_RTOL,
    DataConstrainedLaw,
    fit_data_constrained,
    huber_objective,
    log_loss,
    minimize_from,
    points,
)

__all__ = ["FORMS", "R_BOUNDS", "REPEAT_RTOL", "CorpusOptimum", "DataConstrainedFit",
           "DataConstrainedLaw", "RepeatedRun", "corpus_optimum", "fit_data_constrained",
           "epochs_vanish", "huber_objective", "log_loss", "minimize_from", "points",
           "repeated_runs", "returns_vanish_flops", "run_data_constrained"]
