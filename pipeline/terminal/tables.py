"""The sweep's tables and progress lines: the plan (with the time estimate), a line per
finished run with the best loss per budget so far, and the summary table of the runs."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from rich.markup import escape
from rich.table import Table

from pipeline.config import SweepConfig
from pipeline.planner import Plan, plan_warnings
from pipeline.terminal import console, say
from pipeline.vocab import flops, keys
from pipeline.vocab.families import data_unit
from pipeline.vocab.recipe import precision_label
from pipeline.vocab.spec import RunSpec


def fmt(x: float) -> str:
    return f"{x:.3g}"


def dur(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def trained_flops(spec: RunSpec) -> float:
    """Exact FLOPs a run trains itself: a WSD branch only from its branch step (the steps
    before are its trunk's)."""
    c = flops.training_flops(spec.model, spec.tokens, "exact")
    return c * (1 - spec.exec.branch_step / spec.steps)


def print_plan(cfg: SweepConfig, plan: Plan, estimate: dict[str, float] | None,
               slots: int, est=None, sweep_file: str | None = None) -> None:
    """The plan's table; est (pipeline.estimate.plan.PlanEstimate) adds each run's peak
    memory and says how its times were obtained. Budgets left with too few sizes to fit are
    warned about (planner.coverage) in every mode: --quiet keeps warnings."""
    table = Table(title=f"sweep {cfg.name!r}: {len(plan.specs)} runs ({cfg.kind}, "
                        f"{cfg.family}, C under {cfg.flops_convention!r})")
    for col in ("run_id", "budget C", "shape (L/d/H/kv)", "N total", "N non-emb",
                f"{data_unit(cfg.family)} D",
                "D/N", "steps", "FLOPs (exact)", "est. time", "peak mem", "notes"):
        table.add_column(col, justify="left" if col in ("run_id", "notes") else "right")
    total_flops = total_time = trained_total = 0.0
    kind = "cuda" if cfg.resources.num_gpus > 0 else "cpu"
    precisions = {precision_label(s.train.precision, s.train.head_precision, kind)
                  for s in plan.specs}
    for s in plan.specs:
        m, n = s.model, flops.params_total(s.model)
        c = flops.training_flops(m, s.tokens, "exact")
        trained = trained_flops(s)
        total_flops += c
        trained_total += trained
        est_s = planned_seconds(s, estimate)
        est_s = math.nan if est_s is None else est_s
        total_time += est_s
        notes = [f"seed {s.train.seed}"] if s.train.seed else []
        if s.train.batch_seed != s.train.seed:
            notes.append(f"batches of seed {s.train.batch_seed}")
        if s.data.train_fraction < 1:  # isoflop.repeats: same N and D, fewer unique tokens
            notes.append(f"train_fraction {s.data.train_fraction:g}")
        if len(cfg.train.schedule_list()) > 1:
            notes.append(s.train.schedule)
        if cfg.train.variants or cfg.train.batch_rule_steps:  # the recipe values that vary
            t = s.train
            notes.append(f"batch {t.batch_size}, lr {t.lr:.3g}, warmup {t.warmup_steps}, "
                         f"wd {t.weight_decay:g}")
        if len(precisions) > 1:
            notes.append(precision_label(s.train.precision, s.train.head_precision, kind))
        if s.train.evals_per_run < cfg.train.evals_per_run:  # eval_budget binds
            notes.append(f"evals {s.train.evals_per_run}")
        if s.role != keys.ROLE_MAIN:
            notes.append(s.role)
        if s.exec.branch_from:
            notes.append(f"from {s.exec.branch_from[:6]} at step {s.exec.branch_step}")
        rows = s.train.batch_size // s.exec.workers  # each worker's share of the batch
        if s.exec.workers > 1:
            notes.append(f"{s.exec.workers} workers x {rows} sequences"
                         + (", fsdp" if s.exec.sharding == "fsdp" else ""))
        if s.exec.micro_batch_size:
            notes.append(f"{rows // s.exec.micro_batch_size} passes of "
                         f"{s.exec.micro_batch_size}")
        memory = "-" if est is None else _bytes(est.memory[s.run_id].total)
        table.add_row(
            s.run_id, fmt(s.budget) if s.budget else "-",
            f"{m.n_layer}/{m.d_model}/{m.n_heads}/{m.n_kv_heads}", f"{n:,}",
            f"{flops.params_non_embedding(m):,}", f"{s.tokens:,}", f"{s.tokens / n:.1f}",
            str(s.steps), fmt(c), dur(est_s), memory, ", ".join(notes),
        )
    console.print(table)
    for sk in plan.skipped:
        console.print(f"[yellow]skipped[/] {sk.label}: {sk.reason}")
    # Right under the skipped lines they explain: six of those read as routine, while a
    # budget they leave unfittable makes the whole study worthless (issue 55).
    for warning in plan_warnings(cfg, plan, sweep_file or f"sweep {cfg.name!r}"):
        say(f"[yellow]warning[/]: {escape(warning)}")
    line = f"total: {len(plan.specs)} runs, {fmt(total_flops)} FLOPs (exact)"
    if trained_total < total_flops:
        line += (f", of which {fmt(trained_total)} trained (WSD branches start from their "
                 f"trunk: {1 - trained_total / total_flops:.0%} saved)")
    if estimate:
        line += (f", {dur(total_time)} of run time, about {dur(total_time / slots)} wall "
                 f"with {slots} run(s) at a time")
    console.print(line)
    if len(precisions) == 1:
        console.print(f"precision: {precisions.pop()} on the {kind} "
                      f"(train.precision {cfg.train.precision!r}; pipeline/vocab/recipe.py)")
    if est is not None:
        t = est.target
        where = (f"checked against {_bytes(t.memory)} ({t.memory_source}; a run fits under "
                 "90%)" if t.memory is not None else "not checked: no "
                 "resources.device_memory_gb and the runs' device is not here")
        console.print(f"estimates: {est.how}. Peak memory of a training step (weights, "
                      "gradients, AdamW, activations, logits at the run's micro-batch and "
                      f"precision): {where}", soft_wrap=True)
    holdout = cfg.isoflop.holdout if cfg.isoflop is not None else None
    if holdout is not None and all(s.role == keys.ROLE_MAIN for s in plan.specs):
        console.print(f"then held-out budget(s) {', '.join(fmt(b) for b in holdout.budgets)}: "
                      f"{holdout.count} size(s) each at the N_opt that Approach 2 predicts from "
                      "the runs above, planned once they are done")


def _bytes(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def planned_seconds(spec: RunSpec, seconds: dict[str, float] | None) -> float | None:
    """The plan's estimate of the seconds a run trains itself (as print_plan shows it: a WSD
    branch from its branch step); None without one."""
    est = (seconds or {}).get(spec.run_id)
    if est is None or not math.isfinite(est):
        return None
    return est * (1 - spec.exec.branch_step / spec.steps)


PRIOR_RUNS = 1.0
"""How much the plan's estimates weigh against the runs measured so far, in runs of the
plan's mean estimated time: one small run finished early moves the pace little."""


def pace(measured: float, estimated: float, mean_estimate: float) -> float:
    """Measured over estimated seconds of the finished runs, pulled towards 1 (the estimate
    as it is) by PRIOR_RUNS runs of the mean estimate: 1 before any run is measured."""
    prior = PRIOR_RUNS * mean_estimate
    if estimated + prior <= 0:
        return 1.0
    return (measured + prior) / (estimated + prior)


def time_left(estimates: list[float], running_for: list[float], slots: int,
              factor: float = 1.0) -> float:
    """Wall seconds until the runs not finished are: their estimates (in the order they take
    a slot), scaled by factor, less the seconds each has been training (running_for, 0 for
    one waiting; missing at the end: waiting), spread over the slots as the dry run's
    wall estimate is (and never less than the longest run left)."""
    left = [max(0.0, factor * e - (running_for[i] if i < len(running_for) else 0.0))
            for i, e in enumerate(estimates)]
    return max(sum(left) / max(slots, 1), max(left, default=0.0))


@dataclass
class Progress:
    """Counts and the best loss per budget, printed as runs finish, and the time left: from
    the plan's estimates of the runs not finished (expect), corrected by the pace of the runs
    finished so far; from the FLOP rate of the finished runs where a run has no estimate."""

    total: int
    skipped: int = 0
    done: int = 0
    failed: int = 0
    diverged: int = 0
    running: int = 0
    started: float = field(default_factory=time.monotonic)
    flops_done: float = 0.0
    flops_left: float = 0.0
    best: dict[str, float] = field(default_factory=dict)
    slots: int = 1
    left: dict[str, float | None] = field(default_factory=dict)
    """run_id -> the plan's estimate (seconds) of the runs this driver trains and has not
    finished, in the order they were submitted (the order they take a slot)."""
    since: dict[str, float] = field(default_factory=dict)  # run_id -> when it took a slot
    measured: float = 0.0  # wall seconds of the finished runs with an estimate
    estimated: float = 0.0  # and their estimates
    estimates: list[float] = field(default_factory=list)  # of every run expected

    def expect(self, run_id: str, seconds: float | None) -> None:
        """A run to train, with the plan's estimate of its seconds (None: none)."""
        self.left[run_id] = seconds
        if seconds is not None:
            self.estimates.append(seconds)

    def finish(self, run_id: str, wall_s: float | None = None,
               now: float | None = None) -> None:
        """A run ended; wall_s (the seconds it trained, as it reports them) when it finished,
        None when it failed or diverged (no measure of the pace). The next run in line takes
        its slot.

        The pace is read from wall_s, not from the time the run held its slot as the driver
        sees it: that includes the start of its Ray worker (torch imported, once per worker),
        which made the first two runs of a quickstart look 2x slower than their training and
        the time left 2-5 minutes too long for most of the sweep (replayed from its log:
        mean error 188 s against 122 s; 2-core machine under load, 2026-12-07)."""
        now = time.monotonic() if now is None else now
        est = self.left.pop(run_id, None)
        self.since.pop(run_id, None)
        if est is not None and isinstance(wall_s, (int, float)) and math.isfinite(wall_s):
            self.measured += wall_s
            self.estimated += est
        self._take_slots(now)

    def _take_slots(self, now: float) -> None:
        for run_id in list(self.left)[:self.slots]:
            self.since.setdefault(run_id, now)

    def eta(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        if self.left and None not in self.left.values():
            self._take_slots(now)
            mean = sum(self.estimates) / len(self.estimates)
            return time_left([e for e in self.left.values() if e is not None],
                             [now - self.since[r] if r in self.since else 0.0 for r in self.left],
                             self.slots, pace(self.measured, self.estimated, mean))
        elapsed = now - self.started
        if self.flops_done <= 0:
            return math.nan
        return self.flops_left * elapsed / self.flops_done

    def line(self, now: float | None = None) -> str:
        # Budgets in FLOPs, "-" for runs of a grid or runs sweep (no budget): those last.
        best = ", ".join(f"C={b}: {v:.3f}" for b, v in sorted(
            self.best.items(), key=lambda kv: math.inf if kv[0] == "-" else float(kv[0])))
        return (f"[{self.done + self.failed + self.diverged}/{self.total}] done {self.done}, "
                f"running {self.running}, failed {self.failed}, diverged {self.diverged}, "
                f"skipped {self.skipped}; time left ~{dur(self.eta(now))}"
                + (f"; best val loss {best}" if best else ""))


def report_one(spec: RunSpec, out: dict, progress: Progress,
                by_budget: dict[str, list[float]]) -> None:
    m = spec.model
    shape = f"{m.family} L{m.n_layer} d{m.d_model} N={flops.params_total(m):,} D={spec.tokens:,}"
    status = out.get("status")
    progress.finish(spec.run_id, out.get("wall_s") if status == keys.STATUS_FINISHED else None)
    if status == keys.STATUS_FINISHED:
        progress.done += 1
        loss = out["final_val_loss"]
        progress.flops_done += trained_flops(spec)
        budget = fmt(spec.budget) if spec.budget else "-"
        progress.best[budget] = min(progress.best.get(budget, math.inf), loss)
        by_budget[budget].append(loss)
        rate = "images/s" if m.is_image else "tok/s"
        accuracy = out.get("final_val_accuracy")
        acc = (f", accuracy {accuracy:.1%}" if isinstance(accuracy, float)
               and math.isfinite(accuracy) else "")
        console.print(f"[green]finished[/] {spec.run_id} {shape}: val loss {loss:.4f}{acc} in "
                      f"{out['wall_s']:.1f}s ({out['tokens_per_s']:,.0f} {rate}, attempt "
                      f"{out.get('attempts', 1)})")
    elif status == keys.STATUS_DIVERGED:
        progress.diverged += 1
        say(f"[yellow]diverged[/] {spec.run_id} {shape} at step "
                      f"{out.get('diverged_step')}")
    else:
        progress.failed += 1
        say(f"[red]failed[/] {spec.run_id} {shape}: {out.get('error')}")


def summary(results: dict[str, dict], plan: Plan) -> None:
    table = Table(title="runs")
    for col in ("run_id", "budget", "shape", "N", "D", "status", "val loss"):
        table.add_column(col)
    for s in plan.specs:
        out = results.get(s.run_id, {})
        loss = out.get("final_val_loss")
        table.add_row(s.run_id, fmt(s.budget) if s.budget else "-",
                      f"L{s.model.n_layer} d{s.model.d_model}", f"{flops.params_total(s.model):,}",
                      f"{s.tokens:,}", str(out.get("status", "?"))
                      + (" (already done)" if out.get("skipped") else ""),
                      f"{loss:.4f}" if isinstance(loss, float) else "-")
    console.print(table)
