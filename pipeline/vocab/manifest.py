"""The plan manifest: what a sweep planned, recorded in its ledger so readers need not re-plan.

Why: a ledger holds every run a sweep's MLflow experiment ever had, including those of an
earlier version of its file (run ids hash what is trained, so a new recipe plans new ids). To
tell which runs belong to the sweep as it is now, and in which FLOP convention its budgets are,
the analysis used to import the planner and re-expand the sweep file; a plan read back from
the ledger needs neither, and cannot disagree with what was trained. The sweep driver writes it
at launch (the main runs) and again once the held-out runs are planned (pipeline.sweep); the
analysis reads it from the sweep's parent run (``keys.PLAN_ARTIFACT``) or from a report's
runs_export.json ("plan").

Format (JSON, one object; a ledger may come from someone else, so ``from_dict`` checks every
field and names the one that is wrong):
  format, version   "scaling-plan", 1
  sweep             the sweep's name (its MLflow experiment)
  sweep_sha256      sha256 of the sweep file's bytes when it was planned
  flops_convention  the convention of every budget and of the C its fits read (pipeline.vocab.flops)
  runs              [{"run_id", "role", "budget", "family"}, ...]: every run planned, main
                    (fitted) and held-out (predicted, never fitted); budget null outside IsoFLOP
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.vocab import keys
from pipeline.vocab.flops import CONVENTIONS

FORMAT = "scaling-plan"
VERSION = 1
MAX_RUNS = 100_000
"""More runs than any sweep plans (the YAML list cap is 10,000 cells): a bound on what an
untrusted manifest may make a reader hold."""
MAX_BYTES = 64 * 2**20
"""The largest plan.json read back: a plan of MAX_RUNS runs is ~15 MB."""
_SHA256 = re.compile(r"[0-9a-f]{64}")
_RUN_ID = re.compile(r"[0-9A-Za-z_.-]{1,128}")


class ManifestError(ValueError):
    """A manifest that is not one this code writes; the message names the field and value."""


@dataclass(frozen=True)
class PlannedRun:
    """One planned run as the manifest records it."""

    run_id: str
    """The RunSpec's hash (pipeline.vocab.spec.RunSpec.run_id), the ledger's TAG_RUN_ID."""
    role: str
    """keys.ROLE_MAIN (fitted) or keys.ROLE_HOLDOUT (predicted, never fitted)."""
    budget: float | None
    """The IsoFLOP budget C (FLOPs, in the manifest's convention); None outside IsoFLOP."""
    family: str
    """The model family (pipeline.vocab.families)."""


@dataclass(frozen=True)
class PlanManifest:
    """What one launch of a sweep planned (see the module docstring)."""

    sweep: str
    sweep_sha256: str
    flops_convention: str
    runs: tuple[PlannedRun, ...]

    @property
    def run_ids(self) -> frozenset[str]:
        return frozenset(r.run_id for r in self.runs)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted({r.family for r in self.runs}))

    def role_of(self, run_id: str) -> str | None:
        return next((r.role for r in self.runs if r.run_id == run_id), None)

    def with_runs(self, more: Iterable[PlannedRun]) -> PlanManifest:
        """This plan and ``more`` (the held-out runs, planned after the main ones); a run
        already listed is kept once."""
        known = self.run_ids
        extra = tuple(r for r in more if r.run_id not in known)
        return PlanManifest(self.sweep, self.sweep_sha256, self.flops_convention,
                            self.runs + extra)

    def holdout(self) -> tuple[PlannedRun, ...]:
        return tuple(r for r in self.runs if r.role == keys.ROLE_HOLDOUT)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "sweep": self.sweep,
                "sweep_sha256": self.sweep_sha256, "flops_convention": self.flops_convention,
                "runs": [{"run_id": r.run_id, "role": r.role, "budget": r.budget,
                          "family": r.family} for r in self.runs]}


def plan_manifest(sweep: str, sweep_sha256: str, flops_convention: str,
                  specs: Iterable[object]) -> PlanManifest:
    """The manifest of ``specs`` (RunSpecs: run_id, role, budget, model.family)."""
    runs = tuple(PlannedRun(s.run_id, s.role, None if s.budget is None else float(s.budget),
                            s.model.family) for s in specs)
    return PlanManifest(sweep, sweep_sha256, flops_convention, runs)


def _field(obj: dict, name: str, where: str, kind: type | tuple[type, ...]) -> object:
    if name not in obj:
        raise ManifestError(f"{where}: no field {name!r}")
    value = obj[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ManifestError(f"{where}: field {name!r} is {value!r:.80}, not a "
                            f"{getattr(kind, '__name__', 'number')}")
    return value


def _planned_run(obj: object, where: str) -> PlannedRun:
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: {obj!r:.80} is not an object")
    run_id = _field(obj, "run_id", where, str)
    if not _RUN_ID.fullmatch(run_id):
        raise ManifestError(f"{where}: field 'run_id' is {run_id!r:.80}, not a run id")
    role = _field(obj, "role", where, str)
    if role not in keys.ROLES:
        raise ManifestError(f"{where}: field 'role' is {role!r:.80}, not one of {keys.ROLES}")
    budget = obj.get("budget")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int | float)
                               or not math.isfinite(budget) or budget <= 0):
        raise ManifestError(f"{where}: field 'budget' is {budget!r:.80}, not a positive "
                            "number or null")
    family = _field(obj, "family", where, str)
    return PlannedRun(run_id, role, None if budget is None else float(budget), family[:200])


def manifest_from_dict(obj: object, where: str) -> PlanManifest:
    """The manifest ``obj`` (parsed JSON) holds; ManifestError naming ``where`` and the field
    when it is not one this code writes."""
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: the plan is not a JSON object")
    if obj.get("format") != FORMAT or obj.get("version") != VERSION:
        raise ManifestError(f"{where}: not a {FORMAT} version {VERSION} plan (format "
                            f"{obj.get('format')!r:.80}, version {obj.get('version')!r:.20})")
    sweep = _field(obj, "sweep", where, str)
    sha = _field(obj, "sweep_sha256", where, str)
    if not _SHA256.fullmatch(sha):
        raise ManifestError(f"{where}: field 'sweep_sha256' is {sha!r:.80}, not a sha256")
    convention = _field(obj, "flops_convention", where, str)
    if convention not in CONVENTIONS:
        raise ManifestError(f"{where}: field 'flops_convention' is {convention!r:.80}, not one "
                            f"of {', '.join(CONVENTIONS)}")
    runs = _field(obj, "runs", where, list)
    if len(runs) > MAX_RUNS:
        raise ManifestError(f"{where}: {len(runs)} runs, more than {MAX_RUNS:,}")
    planned = tuple(_planned_run(r, f"{where}: runs[{i}]") for i, r in enumerate(runs))
    if len({r.run_id for r in planned}) != len(planned):
        raise ManifestError(f"{where}: a run_id is listed twice")
    return PlanManifest(sweep[:200], sha, convention, planned)


def manifest_from_json(data: bytes, where: str) -> PlanManifest:
    """The manifest in ``data`` (a plan.json's bytes, at most MAX_BYTES); ManifestError naming
    ``where`` when it is not JSON or not a plan this code writes."""
    if len(data) > MAX_BYTES:
        raise ManifestError(f"{where}: over {MAX_BYTES:,} bytes")
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ManifestError(f"{where}: not a JSON plan ({' '.join(str(e).split())[:200]})") \
            from e
    return manifest_from_dict(obj, where)
