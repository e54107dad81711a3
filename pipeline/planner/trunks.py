"""WSD trunks (train.wsd_reuse): runs that differ only in length share the longest one's trunk.

A WSD schedule is constant until its decay, so the shorter runs of a group are the longest
run's trajectory up to where their own decay begins: the longest trains once and keeps its
state at those steps (exec.branch_steps), and each shorter run starts from there
(exec.branch_from, exec.branch_step) instead of training its constant phase again.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from pipeline.vocab.spec import RunSpec


def share_trunks(specs: list[RunSpec]) -> list[RunSpec]:
    """WSD reuse: in each group of wsd runs that differ only in length, the longest is the
    trunk and keeps its state where each shorter run's decay begins; those start there.

    A shorter run whose decay would begin at step 0 trains alone.
    """
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, s in enumerate(specs):
        if s.train.schedule == "wsd":
            # Evaluations never change the trajectory (eval_budget gives the lengths their
            # own counts), so runs that differ in them share a trunk too.
            groups[(s.model, s.data, replace(s.train, evals_per_run=0), s.role)].append(i)
    out = list(specs)
    for members in groups.values():
        trunk = max(members, key=lambda i: (specs[i].steps, i))
        points: list[int] = []
        for i in members:
            s = specs[i]
            start = s.train.decay_start(s.steps)
            if i == trunk or start <= 0:
                continue
            points.append(start)
            out[i] = replace(s, exec=replace(s.exec, branch_from=specs[trunk].run_id,
                                             branch_step=start))
        if points:
            t = specs[trunk]
            out[trunk] = replace(t, exec=replace(t.exec, branch_steps=tuple(sorted(set(points)))))
    return out
