"""A sweep file's view of its ledger: the runs the file plans now, as a plan manifest.

Why a module of its own: the analysis reads what a sweep planned from its ledger (the plan
manifest the driver records, pipeline.vocab.manifest) and imports no planner. A command's
``--sweep-file`` asks for another view, "the runs this file plans now" (not those of the
sweep's last launch): only the planner can answer it, so the entry points (analysis.fit,
.report, .predict, .compare) pass this module's ``SWEEP_FILE_VIEW`` to analysis.cli, which
calls it without importing the planner (tests/test_architecture.py).

A held-out run is planned from a fit, not by the file alone: it is in the view when the
file's held-out section, had the fit put the optimum at that run's own size, would plan it
(same recipe and seed; pipeline.planner.planned_specs), so a held-out run of an earlier recipe
is not. Errors: pipeline.config.SweepError naming the file, field and value.

The planner (pipeline.config, pipeline.planner: pydantic, ~0.5 s) is imported when a file is
read, not with this module: a command given no sweep file does not pay for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pipeline.vocab.manifest import PlanManifest, plan_manifest


def sweep_file_manifest(sweep_file: str | Path, held_out_cells: Iterable[tuple[float, float]],
                        sha256: str) -> PlanManifest | None:
    """The manifest of the runs ``sweep_file`` plans now (``held_out_cells``: the (N, budget)
    of a ledger's held-out runs, analysis.runs.planned.held_out_cells; ``sha256``: of the
    file's bytes). None when the vocabulary depends on the corpus (the chars tokenizer): the
    plan cannot be known without reading it. SweepError on a file that is not a sweep.

    The runs are pipeline.planner.planned_specs' (on a CPU sweep with precision auto, those of
    both kinds of CPU), each with its role, budget and family."""
    from pipeline.config import load_sweep
    from pipeline.planner import planned_specs, vocab_size_for

    cfg = load_sweep(sweep_file)
    vocab = vocab_size_for(cfg)
    if vocab is None:
        return None
    specs = planned_specs(cfg, held_out_cells, sweep_file, vocab)
    return plan_manifest(cfg.name, sha256, cfg.flops_convention, specs)


def sweep_file_convention(sweep_file: str | Path) -> str:
    """The FLOP convention of ``sweep_file`` (its budgets, hence the C its fits read)."""
    from pipeline.config import load_sweep

    return str(load_sweep(sweep_file).flops_convention)


def sweep_file_corpus(sweep_file: str | Path) -> str | None:
    """The corpus ``sweep_file`` names, spelled as its runs record it (a relative path made
    absolute against the file), or None where the file cannot be read as a sweep. The report
    passes it to `pipeline.sample --corpus`: a sample reads a corpus that a ledger names only
    when the user's own sweep file names it too (pipeline/sample.py, docs/untrusted.md)."""
    from pipeline.config import SweepError, load_sweep
    from pipeline.planner import data_spec_for

    try:
        return data_spec_for(load_sweep(sweep_file), sweep_file).corpus
    except SweepError:
        return None


class SweepFileView:
    """The planner's answers that analysis.cli asks about a ``--sweep-file`` (its protocol
    analysis.cli.SweepFileView). Each method looks up this module's sweep_file_* function
    when called, so a test may replace one."""

    @property
    def error(self) -> type[Exception]:
        """What the methods raise on a file that is not a sweep (the analysis says it as a
        DataError)."""
        from pipeline.config import SweepError

        return SweepError

    def convention(self, sweep_file: str) -> str:
        return sweep_file_convention(sweep_file)

    def manifest(self, sweep_file: str, held_out_cells: list[tuple[float, float]],
                 sha256: str) -> PlanManifest | None:
        return sweep_file_manifest(sweep_file, held_out_cells, sha256)

    def corpus(self, sweep_file: str) -> str | None:
        return sweep_file_corpus(sweep_file)


SWEEP_FILE_VIEW = SweepFileView()
