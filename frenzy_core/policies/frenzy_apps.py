"""Frenzy on the sia-apps job model: MARP's plans come from Sia's measured profiles, HAS places them, no preemption.

A plan of a job is (GPU type, GPUs, placement shape) with the user's batch B split as the job will run it
(`sia_apps.split_batch`): it *fits* when the per-GPU batch ceil(B / GPUs) is within the batches profiled for that
placement on that type (the profiles stop where memory does), and its predicted run time is the application's
remaining epochs at their goodput, sum_e (progress of epoch e) / (gain(B, e) / iteration time / slowdown), plus
the restart time. GPU counts are Sia's configurations (1, 2, 4 GPUs on one node, then whole nodes). What Frenzy
knows: the profiles and the application's epoch curve at the user's batch (an oracle of job size, like Gavel's
throughputs); it never changes a job's batch or allocation once started (the paper's Frenzy is not elastic).

Every 60 s round (Sia's cadence, for a like-for-like comparison) the queued jobs are walked in arrival order, as
the LLM versions do: `frenzy` ranks plans by GPU-hours (`frenzy.Options.objective`'s default) and starts the
first one HAS can place now; `frenzy-share` ranks by time and skips plans above the job's fair share (capacity of
the types it fits on / (running + waiting jobs), never below its smallest plan); `frenzy-eft` takes frenzy-share's
candidates and the earliest predicted finish, waiting for a type's predicted releases when that finishes earlier.
HAS: a plan within one node goes to the fullest node that has room (best fit), a multi-node plan takes whole
free nodes, lowest index first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from frenzy_core.sia_apps import split_batch

ROUND_S = 60.0
BACKFILL_WINDOW = 64  # SimOptions.backfill_window


@dataclass(frozen=True)
class AppPlan:
    """One way to run a job: GPUs on one type, how its batch is split, and the resulting iteration time."""

    type_pos: int
    gpus: int
    shape: tuple[int, ...]  # replicas per node
    atomic_bsz: int
    accum_steps: int
    iter_s: float  # one optimizer step, accumulation included, before the application's slowdown


def sizes(gpus_per_node: int, num_nodes: int) -> list[int]:
    """Sia's configuration sizes on one type: 1, 2, 4, ... up to a node, then whole nodes.

    >>> sizes(4, 3)
    [1, 2, 4, 8, 12]
    """
    out, n = [], 1
    while n < gpus_per_node:
        out.append(n)
        n *= 2
    return out + [gpus_per_node * k for k in range(1, num_nodes + 1)]


def job_plans(app, batch_size: int, layouts) -> list[AppPlan]:
    """Every plan of this application at this batch that fits on the cluster's types."""
    out = []
    for t, lay in enumerate(layouts):
        prof = app.profiles[lay.suffix]
        for n in sizes(lay.gpus_per_node, lay.num_nodes):
            shape = (n,) if n <= lay.gpus_per_node else (lay.gpus_per_node,) * (n // lay.gpus_per_node)
            local = math.ceil(batch_size / n - 1e-8)
            max_local = prof.max_local_bsz_for(shape)
            if not prof.min_local_bsz <= local <= max_local or batch_size > app.max_batch_size:
                continue
            atomic, accum = split_batch(local, max_local, n, app.init_batch_size)
            st = prof.step_time(shape, atomic)
            if st is None:
                continue
            out.append(AppPlan(t, n, shape, atomic, accum, st[0] + (st[0] - st[1]) * accum))
    return out


def epoch_iterations(app, batch_size: int) -> np.ndarray:
    """Iterations (x slowdown) each epoch takes at this batch: its progress / gain(B, e)."""
    return np.array([(app.progress_at(e + 1) - app.progress_at(e)) * app.slowdown / app.gain(batch_size, e)
                     for e in range(app.max_epochs)])


def remaining_s(per_epoch: np.ndarray, app, epoch: int, progress: float, iter_s: float) -> float:
    """Predicted training time left: the rest of this epoch and every later one, at iter_s per iteration."""
    if epoch >= len(per_epoch):
        return 0.0
    left = (app.progress_at(epoch + 1) - progress) / (app.progress_at(epoch + 1) - app.progress_at(epoch))
    return float(iter_s * (left * per_epoch[epoch] + per_epoch[epoch + 1:].sum()))


class FrenzyAppsRounds:
    """`frenzy`: plans ranked by GPU-hours, the first HAS can place now."""

    round_s = ROUND_S
    tune_batch = False  # Frenzy runs the user's batch
    by_time = False  # rank by predicted time instead of GPU-hours
    share_cap = False
    eft = False

    def __init__(self, layouts):
        self.layouts = tuple(layouts)
        self._plans: dict[tuple[str, int], tuple[list[AppPlan], np.ndarray, dict[AppPlan, float]]] = {}

    def plans(self, st) -> tuple[list[AppPlan], np.ndarray, dict[AppPlan, float]]:
        """The job's plans, iterations per epoch, and each plan's predicted run time from the start."""
        key = (st.app.name, st.job.batch_size)
        if key not in self._plans:
            plans = job_plans(st.app, st.job.batch_size, self.layouts)
            per_epoch = epoch_iterations(st.app, st.job.batch_size)
            run = {p: remaining_s(per_epoch, st.app, 0, 0.0, p.iter_s) + st.app.restart_s for p in plans}
            self._plans[key] = (plans, per_epoch, run)
        return self._plans[key]

    def _free(self, view) -> list[list[int]]:
        free = [[lay.gpus_per_node] * lay.num_nodes for lay in self.layouts]
        pos = {lay.suffix: t for t, lay in enumerate(self.layouts)}
        for suffix, nodes in view.current.values():
            if suffix is not None:
                for n in nodes:
                    free[pos[suffix]][n] -= 1
        return free

    def _place(self, free: list[list[int]], plan: AppPlan) -> tuple[int, ...] | None:
        f, gpn = free[plan.type_pos], self.layouts[plan.type_pos].gpus_per_node
        if plan.gpus <= gpn:
            fits = [i for i, x in enumerate(f) if x >= plan.gpus]
            if not fits:
                return None
            i = min(fits, key=lambda i: (f[i], i))  # best fit: the fullest node with room
            return (i,) * plan.gpus
        whole = [i for i, x in enumerate(f) if x == gpn][: plan.gpus // gpn]
        if len(whole) < plan.gpus // gpn:
            return None
        return tuple(i for i in whole for _ in range(gpn))

    def _releases(self, view, now_s: float) -> list[list[tuple[float, int]]]:
        """Per type, (predicted end, GPUs) of the running jobs."""
        out: list[list[tuple[float, int]]] = [[] for _ in self.layouts]
        pos = {lay.suffix: t for t, lay in enumerate(self.layouts)}
        for j, (suffix, nodes) in view.current.items():
            if suffix is None:
                continue
            st = view.jobs[j]
            ps = st.app.profiles[suffix].step_time(st.placement, st.atomic_bsz)
            it = ps[0] + (ps[0] - ps[1]) * st.accum_steps if ps is not None else math.inf
            per_epoch = self.plans(st)[1]
            end = now_s + st.restart_left_s + remaining_s(per_epoch, st.app, st.epoch, st.progress, it)
            out[pos[suffix]].append((end, len(nodes)))
        for r in out:
            r.sort()
        return out

    def allocate(self, view) -> dict:
        out = {j: a for j, a in view.current.items() if a[0] is not None}
        free = self._free(view)
        queued = [j for j in view.active if j not in out]
        running = len(out)
        releases = self._releases(view, view.now_s) if self.eft else None
        for j in queued[:BACKFILL_WINDOW]:
            st = view.jobs[j]
            plans, _, run = self.plans(st)
            if not plans:
                continue  # fits nowhere: waits (the engine reports it unfinished)
            if self.by_time:
                cands = sorted(plans, key=lambda p, run=run: (run[p], p.gpus))
            else:
                cands = sorted(plans, key=lambda p, run=run: (run[p] * p.gpus, run[p]))
            if self.share_cap:
                usable = sum(self.layouts[t].total_gpus for t in {p.type_pos for p in plans})
                cap = max(usable / (running + len(queued)), min(p.gpus for p in plans))
                cands = [p for p in cands if p.gpus <= cap]
            chosen = None
            for p in cands:
                nodes = self._place(free, p)
                if nodes is not None:
                    chosen = (p, nodes)
                    break
            if self.eft and chosen is not None:
                best = view.now_s + run[chosen[0]]
                for p in cands:
                    need = p.gpus - sum(free[p.type_pos])
                    if need <= 0:
                        continue
                    got, start = 0, math.inf
                    for end, n in releases[p.type_pos]:
                        got += n
                        if got >= need:
                            start = end
                            break
                    if start + run[p] < best:
                        chosen = None  # waiting for this type finishes earlier
                        break
            if chosen is None:
                continue
            p, nodes = chosen
            for n in nodes:
                free[p.type_pos][n] -= 1
            out[j] = (self.layouts[p.type_pos].suffix, nodes)
            running += 1
            if self.eft:
                releases[p.type_pos].append((view.now_s + run[p], p.gpus))
                releases[p.type_pos].sort()
        return out

    def stats(self) -> dict[str, float]:
        return {}


class FrenzyShareAppsRounds(FrenzyAppsRounds):
    """`frenzy-share`: ranked by time, capped at the fair share."""

    by_time = True
    share_cap = True


class FrenzyEftAppsRounds(FrenzyShareAppsRounds):
    """`frenzy-eft`: frenzy-share's candidates, earliest predicted finish (may wait for a faster type)."""

    eft = True
