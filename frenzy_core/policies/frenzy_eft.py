"""frenzy-eft: Frenzy that picks the plan with the earliest predicted *finish*, waiting for fast GPUs when that pays.

Beyond the paper. HAS (arXiv 2412.14479, Algorithm 1) takes the first ranked plan that fits *now*, so a job that
arrives while the fast GPUs are busy takes a small plan on a slow type and keeps it for hours, even when the fast
GPUs free up minutes later (golden trace g03 under frenzy-share: 2 x T4 for 13.9 h instead of waiting 12 min for
the A100s). A scheduler with a performance model knows when the running jobs will end (their `run_end_s` in the
view), so for each queued job, FCFS over the first `backfill_window`, it estimates for every candidate plan

    start  = now                                   if HAS places the plan now
           = the first predicted release time at which the plan's type has >= its GPUs free, otherwise
    finish = start + the plan's run time (performance model, tokens left)

and takes the plan with the earliest finish (ties: start now). If that plan fits now, the job starts on it (placed
by HAS); otherwise the job waits, and is looked at again when GPUs are released. Candidates are frenzy-share's: MARP
plans ranked by time, capped at the job's fair share of the GPUs it can use (without the cap, greedy EFT gives the
first job every fast GPU, as objective "time" does, and queues the rest; docs/results.md).

Release times come from one per-type sorted list of (predicted end, GPUs freed) of the running jobs, built once per
decision and kept with cumulative counts, so a plan's earliest start is one bisect; the starts of this decision are
added to it. GPU counts only: a plan that needs whole tensor-parallel groups per node may find the freed GPUs
fragmented, in which case it is estimated again at the next release.

Waiting jobs do not reserve GPUs (`Options.reserve` False): a later job may take the GPUs an earlier one waits for,
and the earlier one then re-plans at the next release (it never waits on a job that is not running, so it cannot
wait forever while GPUs are idle: with nothing running, only plans that fit now have a finite start). `reserve=True`
gives the first job that waits for a GPU type an EASY-backfilling reservation on it: later jobs of the same decision
may start on that type now only if they finish before the reserved start or leave enough GPUs for it, and plan
their own waits around the reserved GPUs. Measured on the main settings, see docs/results.md for which is the
default and why.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from itertools import islice
from math import inf
from typing import ClassVar

from frenzy_core.packing import FreeGPUs
from frenzy_core.policies.base import Decision, Reject, SchedulerView, Start
from frenzy_core.policies.frenzy import Chooser, FrenzyPolicy, all_plans, fair_share
from frenzy_core.policies.frenzy_apps import FrenzyEftAppsRounds
from frenzy_core.workload import scale_plan

COLOUR = "#6a1b9a"
NOTE = ("Frenzy that looks ahead. Like frenzy-share it ranks plans by training time within each job's fair share, "
        "but it picks the plan with the earliest predicted finish: when the fast GPUs are busy and will be free "
        "soon (it knows when the running jobs should end), a job waits for them instead of starting now on slow "
        "ones it would keep for hours. A job keeps its first allocation to the end.")


@dataclass(frozen=True)
class Options:
    """frenzy-eft's knobs (docs/results.md has the measurements behind the defaults)."""

    share_cap: bool = True  # candidates capped at the fair share (frenzy-share's); False: every plan ranked by time
    reserve: bool = False  # EASY-style reservation of the GPUs the first waiting job per type waits for

    legacy_keys: ClassVar[dict[str, str]] = {}


class _Releases:
    """Per GPU type: predicted (end time, GPUs freed) of the running jobs, sorted, with cumulative counts.

    One decision's working copy (built from the view, never written back). `start(t, need)` is the earliest end time
    by which `need` GPUs of type t have been freed: one bisect on the cumulative counts.
    """

    __slots__ = ("ends", "_times", "_cum")

    def __init__(self, view: SchedulerView, type_pos: dict[str, int]):
        self.ends: list[list[tuple[float, int]]] = [[] for _ in type_pos]
        jobs = view.jobs
        for j in view.running:
            st = jobs[j]
            self.ends[type_pos[st.plan.gpu_type]].append((st.believed_end_s(), st.plan.num_gpus))
        for e in self.ends:
            e.sort()
        self._times: list[list[float] | None] = [None] * len(type_pos)
        self._cum: list[list[int] | None] = [None] * len(type_pos)

    def add(self, t: int, end_s: float, gpus: int) -> None:
        insort(self.ends[t], (end_s, gpus))
        self._times[t] = self._cum[t] = None

    def _index(self, t: int) -> tuple[list[float], list[int]]:
        times, cum, acc = [], [], 0
        for end, n in self.ends[t]:
            acc += n
            times.append(end)
            cum.append(acc)
        self._times[t], self._cum[t] = times, cum
        return times, cum

    def start(self, t: int, need: int) -> float:
        """Earliest predicted time by which `need` (> 0) GPUs of type t are released; inf if never."""
        times, cum = (self._times[t], self._cum[t]) if self._times[t] is not None else self._index(t)
        k = bisect_left(cum, need)
        return times[k] if k < len(times) else inf

    def freed_by(self, t: int, when_s: float) -> int:
        """GPUs of type t released at or before when_s."""
        times, cum = (self._times[t], self._cum[t]) if self._times[t] is not None else self._index(t)
        k = bisect_left(times, when_s + 1e-9)
        return cum[k - 1] if k else 0

    def next_end(self, t: int, after_s: float) -> float:
        times = self._times[t] if self._times[t] is not None else self._index(t)[0]
        k = bisect_left(times, after_s + 1e-9)
        return times[k] if k < len(times) else inf


class EarliestFinish(Chooser):
    """The chooser: each job's candidate with the earliest predicted finish, waiting when that pays (module
    docstring)."""

    def __init__(self, policy: FrenzyPolicy):
        super().__init__(policy)
        self.reserve = policy.options.reserve
        self._type_pos = {t: i for i, t in enumerate(policy.ctx.index.type_names)}
        # job -> (release epoch, type position, GPUs, predicted start) of the plan it last decided to wait for
        self._waiting: dict[int, tuple[int, int, int, float]] = {}

    def _run_s(self, st, plan) -> float:
        """Predicted run time of this plan for what is left of the job (what the simulator will charge)."""
        left = st.believed_left_share(st.done_fraction)
        extra = self.policy.ctx.options.restart.cost_s(st.job) if st.done_fraction > 0 else 0.0
        return st.job.tokens / plan.tokens_per_s * left + extra

    def decide(self, view: SchedulerView) -> list[Decision]:
        policy = self.policy
        now, jobs, epoch = view.now_s, view.jobs, view.release_epoch
        free: FreeGPUs | None = None
        rel: _Releases | None = None
        out: list[Decision] = []
        waiting = self._waiting
        # reservations of this decision, per type position: (reserved start, GPUs held, spare GPUs at that start)
        res: dict[int, list] = {}
        for j in islice(view.queue, policy.ctx.options.backfill_window):
            st = jobs[j]
            w = waiting.get(j)
            if w is not None and w[0] == epoch:
                # nothing was released since it chose to wait, and starts only take GPUs away: same choice
                if self.reserve and w[1] not in res:
                    if free is None:
                        free = FreeGPUs(view.index, view.free, view.free_by_type)
                    if rel is None:
                        rel = _Releases(view, self._type_pos)
                    self._reserve(res, free, rel, w[1], w[2], w[3])
                continue
            plans, _mins = policy.ranked(st)
            if not plans:
                out.append(Reject(j, "no plan fits this cluster's GPUs"))
                continue
            if free is None:
                free = FreeGPUs(view.index, view.free, view.free_by_type)
            if rel is None:
                rel = _Releases(view, self._type_pos)
            cands = policy.learned(st, policy.candidates(view, st, plans))
            if not cands:
                out.append(Reject(j, "every plan predicted to fit ran out of memory"))
                continue
            # 1. the fastest candidate HAS can place now (and that keeps this decision's reservations)
            best_now = None
            best_finish = inf
            for c in cands:
                r = self._run_s(st, c[3])
                hold = res.get(c[0])
                if hold is not None and now + r > hold[0] and c[1] > hold[2]:
                    continue  # would still hold GPUs a reservation needs at its start
                got = free.first_plan((c,))
                if got is not None:
                    best_now, best_finish = (c, got[1], r), now + r
                    break
            # 2. a plan that does not fit now but finishes earlier after waiting for predicted releases
            best_wait = None
            seen: set[tuple[int, int]] = set()
            for c in cands:
                t, n = c[0], c[1]
                r = self._run_s(st, c[3])
                if now + r >= best_finish:
                    continue  # even starting now it would not finish earlier
                if (t, n) in seen:
                    continue  # a faster plan of the same type and size was already estimated
                seen.add((t, n))
                hold = res.get(t)
                need = n - free.by_type[t] + (hold[1] if hold is not None else 0)
                start = rel.start(t, need) if need > 0 else rel.next_end(t, now)  # > 0: fragmented, next release
                if start + r < best_finish:
                    best_wait, best_finish = (t, n, start), start + r
            if best_wait is None and best_now is not None:
                c, placement, r = best_now
                hold = res.get(c[0])
                if hold is not None and now + r > hold[0]:
                    hold[2] -= c[1]  # uses spare GPUs of the reserved type past the reserved start
                free.take(placement)
                rel.add(c[0], now + r, c[1])
                waiting.pop(j, None)
                out.append(Start(j, scale_plan(c[3], st.job.tokens), placement))
                continue
            # 3. wait (for the chosen plan, or for anything when nothing has a finite start)
            if best_wait is None:
                waiting[j] = (epoch, -1, 0, inf)
                continue
            t, n, start = best_wait
            waiting[j] = (epoch, t, n, start)
            if self.reserve and t not in res:
                self._reserve(res, free, rel, t, n, start)
        return out

    @staticmethod
    def _reserve(res: dict, free: FreeGPUs, rel: _Releases, t: int, n: int, start: float) -> None:
        """Hold n GPUs of type t from `start` on; later jobs may use the spare GPUs then, or finish before it."""
        if t < 0:
            return
        spare = max(free.by_type[t] + rel.freed_by(t, start) - n, 0)
        res[t] = [start, n, spare]


class FrenzyEftPolicy(FrenzyPolicy):
    """frenzy-share's candidates, chosen by earliest predicted finish (see the module docstring)."""

    name = "frenzy-eft"
    Options = Options
    colour = COLOUR
    note = NOTE
    round_allocator = FrenzyEftAppsRounds  # the same policy on the sia-apps job model
    ranking = "time"
    candidate_rule = staticmethod(fair_share)
    chooser = EarliestFinish

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        if not self.options.share_cap:
            self.candidate_rule = all_plans  # every plan ranked by time (an instance attribute: not bound)
