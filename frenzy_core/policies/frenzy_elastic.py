"""`frenzy-elastic` / `frenzy-elastic-srpt`: Frenzy made elastic, on both engines.

On the sia-apps job model (`rounds.simulate_rounds`, `FrenzyElasticRounds`, this part) and on the LLM job model (the
event engine, `simulate.simulate`: `FrenzyElasticPolicy` itself, "The event engine" at the end).

Every 60 s round (Sia's cadence) the whole allocation is redone: a job may grow, shrink, change GPU type, be
preempted or resumed. Only memory-feasible configurations are offered: a configuration is (GPU type, GPUs, placement
shape: 1, 2, 4 GPUs within one node, then whole nodes, as Sia's) and it fits when some total batch the job may run
gives a per-GPU batch inside what was measured for that shape (the profiles stop where GPU memory does,
`StepProfile.max_local_bsz_for`). The simulator charges the one restart model of every round policy (a new type or
shape costs the application's `restart_s`, `AppJobState.move`).

What the policy knows (the default, "only what Sia knows"): each job's goodput model is Pollux's, fitted from the
job's own observed steps (`AppJobState.goodput_model`: the PerfParams fit to the (nodes, replicas, atomic batch) ->
step time points it has run, times the statistical efficiency at the gradient noise it last measured); a type it
never ran on is projected from one it ran on by the ratio of the types' 1-GPU throughputs, as Sia does; a job may
at most double the most replicas it has run on per round (the fit knows nothing beyond), and a job never run is
offered 1 GPU. `oracle=True` reads the true profiles instead (the throughput model fitted to every measured row of
the type, the gradient statistics of the validation curves) and is named "... (oracle)" in its note.

The round, for the active jobs and each configuration c with estimated goodput G[j, c] (at its best batch, or at
the user's batch when `adapt_batch=False`; configurations above `scale_up` x the most replicas the job has run on,
over all types, are not offered in fitted mode):

    speedup  s[j, c] = G[j, c] / (the job's best 1-GPU goodput over types)
    priority w[j]    = 1 / (1 + attained GPU-hours / las_quantum_gpu_h)          (least attained service; no sizes)
                     = 1 / (1 + remaining 1-GPU hours estimate)                   (`-srpt`: the remaining epochs)
    value    V[j, c] = w[j] s'[j, c] / (1 + efficiency_floor x GPUs(c))

and a MIP (the solver and shared capacity rows of `sia_real.solve_sia`) picks at most one configuration per job
maximising sum V over the chosen ones, GPUs per type within capacity; a job with no positive value, or that loses the
competition, gets nothing (it is preempted, its progress kept). Dividing by 1 + f GPUs is the GPU-hours knob: alone,
a job so maximises speed / (1 + f GPUs), i.e. minimises its time x (1 + f GPUs) = JCT + f GPU-hours, and takes an
extra GPU only if it adds at least f / (1 + f GPUs) of its current speed (f = 0: any gain; larger f keeps big
allocations small). s' is s with the restart charged: for a running job every configuration but its current one is
s' = s / (1 + restart_s s / (T s_current)), over the time T the new allocation is expected to last: the job's
expected remaining time (its run age under least attained service, the Pareto tail's "as long again"; its remaining
work under SRPT), capped by how long its allocations have lasted so far (age / starts, so a job moved often becomes
costly to move again), at least `min_horizon_s`; and divided by 1 + `move_margin` (model noise) except growth on its
type to sizes it never ran. Jobs still paying a restart keep what they have (fixed in the MIP). The jobs of each type
are then placed largest first, best fit (powers of two within a node and whole nodes pack without splitting), so a
job keeping its type and shape never restarts.

The event engine (the LLM job model: pages, what-ifs, scenarios, bench/jct.py). The same value over `sia`'s
machinery (`SiaPolicy`, subclassed), solved at every arrival and release and, while jobs wait, on the
`Options.round_s` grid (60 s; `next_wake_s`, from the first time a running job is past its guard) for the
running jobs and the first `Options.max_jobs` queued ones, over the options o = (GPU type, power-of-two size) of the
shared ThroughputMatrix (tokens/s x[j, o] of MARP's best memory-feasible split with the safety margin; nothing that
does not fit is offered, and after an out-of-memory crash only plans predicted to need less):

    reference  ref[j]   = max_o x[j, o] / GPUs(o)        (per-GPU speed of the leanest plan, fewest GPU-hours: the
                                                          best 1-GPU speed over types when one GPU fits the job)
    speedup    s[j, o]  = x[j, o] / ref[j]               (in GPU-equivalents, as the round version's)
    priority   w[j]     = 1 / (1 + attained GPU-hours / las_quantum_gpu_h)     (`JobStatus.attained_gpu_s`; no size)
                        = 1 / (1 + tokens left / ref[j] / 3600)                (`-srpt`: remaining GPU-hours at the
                                                                                leanest plan, of the believed size)
    restart    s'[j, o] = s / (1 + R s / (T s[j, o0])) / (1 + move_margin)    (running on o0: every o != o0)
                        = s / (1 + R / T)                                      (preempted before: every o)
                        = s                                                    (its current o0; never started)
    value      V[j, o]  = w[j] s'[j, o] / (1 + efficiency_floor x GPUs(o))

with R = `SimOptions.restart.cost_s(job)` (the restart every policy pays) and T = max(min_horizon_s, age / (restarts
+ 1)), age = now - first start (under SRPT the age term is at most the predicted remaining time on o0, as above).
Sia's grouped ILP (`sia.solve_counts`: shared capacity rows, node and gap limits) picks at most one option per job
maximising sum V. Adapted to this engine: a running job still paying its restart, or while jobs wait started less
than `Options.preempt_min_run_s` ago (600 s, frenzy-srpt's and frenzy-las's thrash guard), keeps its allocation
(out of the ILP, its GPUs out of the capacity); `move_margin` (0.3), model noise in the round version, is here the
hysteresis that keeps the continuously changing LAS priorities from re-ranking jobs across types every round, and
applies to every move (there is no fitted model to explore); a job the ILP gives nothing is preempted only if a new
allocation takes some of its GPUs (else it keeps running on GPUs nobody wants). New allocations are placed as
`SiaPolicy._place` places them (largest first, HAS's node choice on the chosen type; a move that cannot be placed is dropped and
the job keeps its GPUs).

Chosen on bench/jct.py's tuning settings only (sia-64 with Philly and Saturn, modern-mixed with Saturn; the held-out
settings were never used): f = `EVENT_EFFICIENCY_FLOOR` = 0.1 for both policies, by the rule "the lowest mean, over
settings and seeds, of frenzy-elastic's average JCT / sia's (paired by seed), among the floors whose mean GPU-hours /
sia's is <= 1", over 0, 0.025, 0.05, 0.1 (3 seeds; JCT / sia's 1.09, 0.93, 0.93, 0.89 at GPU-hours / sia's 1.27,
1.03, 0.92, 0.73; frenzy-elastic-srpt 1.03, 0.91, 0.88, 0.86 at 1.20, 0.97, 0.88, 0.70). At the grid's edge, 0.2
against 0.1 run again in one batch gave 0.90 vs 0.91 (GPU-hours 0.66 vs 0.81), less than the two runs of 0.1 differ
(0.89, 0.91), so the grid's choice stands. Also on the tuning settings: without `move_margin` (0 instead of 0.3, f =
0.05) JCT / sia's was 1.02 instead of 0.93; and, on 2 seeds of an earlier version solved on Sia's 60 s rounds, the
guard and the margin were needed (without one or both JCT was 10-28% above sia's: jobs re-ranked onto other types at
nearly every round), and the per-GPU reference, the round version's, did better than Sia's s = x / max_o x (0.995
vs 1.028). The event-driven calls and grid wake-ups (`next_wake_s`) replaced those rounds because a round-based
policy is not called again when nothing changes, so a job waiting on a guard would wait for the next event.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from frenzy_core.errors import SpecError
from frenzy_core.policies.base import Decision, Preempt, Reject, SchedulerView, Start, class_key
from frenzy_core.policies.sia import SiaPolicy, SolverOptions
from frenzy_core.policies.sia_real import CONFIGS, LAMBDA_N, MAX_REPLICAS, ROUND_S, SCALE_UP, solve_sia, solve_stats
from frenzy_core.sia_apps import EPS, GoodputModel, PerfParams, fit_perf_params

COLOUR = "#0b7a75"
NOTE = ("Frenzy made elastic. Every job may grow, shrink, change GPU type or be paused at any arrival or completion "
        "(and every minute while jobs wait), but only onto plans that fit in memory. Without knowing job sizes, it "
        "favours the jobs that have had the least GPU-time so far, weighs each extra GPU against the speed it adds "
        "(a GPU-hours knob), and charges every move its restart, so running jobs move only for a clear gain.")
# f of the event version, chosen on bench/jct.py's tuning settings only (see the module docstring)
EVENT_EFFICIENCY_FLOOR = 0.1


def _check_value_knobs(o) -> None:
    """SpecError naming the field when a knob of the value (both engines') is out of range."""
    if not 0.0 <= o.efficiency_floor < 1.0:
        raise SpecError("efficiency_floor", f"must be in [0, 1), got {o.efficiency_floor}")
    if not o.las_quantum_gpu_h > 0:
        raise SpecError("las_quantum_gpu_h", f"must be positive, got {o.las_quantum_gpu_h}")


@dataclass(frozen=True)
class FrenzyElasticOptions:
    """The knobs of frenzy-elastic's round version, `FrenzyElasticRounds` (defaults chosen on saturn-1 only, see
    bench/elastic.py); the event version's are `Options`."""

    efficiency_floor: float = 0.05  # f: value speedup / (1 + f GPUs), a job's JCT + f GPU-hours (GPU-hours knob)
    srpt: bool = False  # order by the remaining-work estimate instead of attained service
    oracle: bool = False  # read the true profiles instead of each job's fitted model
    adapt_batch: bool = True  # Pollux-style batch adaptation (False: the user's batch, and only configs it fits)
    las_quantum_gpu_h: float = 1.0  # attained service at which a job's priority halves
    scale_up: int = SCALE_UP  # most a job may grow per round over the replicas it has run on (fitted mode)
    min_horizon_s: float = 600.0  # least expected remaining time a restart is weighed against
    move_margin: float = 0.3  # a running job moves only for this much more speedup (model noise), except to explore

    def __post_init__(self):
        _check_value_knobs(self)
        if self.scale_up < 1:
            raise SpecError("scale_up", f"must be at least 1, got {self.scale_up}")


@dataclass(frozen=True)
class Config:
    """One allocation a job may get: GPUs of one type in a shape Sia also offers."""

    type_pos: int
    suffix: str
    num_nodes: int
    gpus: int
    shape: tuple[int, ...]  # replicas per node


def configs_of(layouts) -> tuple[Config, ...]:
    """Sia's configurations per type (1, 2, 4 GPUs on a node, then whole nodes), with their placement shape."""
    out = []
    for t, lay in enumerate(layouts):
        if lay.gpus_per_node not in CONFIGS:
            raise SpecError("cluster", f"frenzy-elastic uses Sia's configurations, for nodes of 4 or 8 GPUs; "
                                       f"{lay.gpu_type} nodes have {lay.gpus_per_node}")
        for nn, ng in CONFIGS[lay.gpus_per_node]:
            if nn <= lay.num_nodes:
                shape = (ng,) if nn == 1 else (lay.gpus_per_node,) * nn
                out.append(Config(t, lay.suffix, nn, ng, shape))
    return tuple(out)


def fits_in_memory(app, cfg: Config, batch_size: int | None) -> bool:
    """Whether the job can run this configuration inside its measured profile (= memory): with the user's batch
    (`batch_size`) its per-GPU batch after accumulation must be within the profiled range; with batch adaptation
    (None) some batch between the initial and the largest validated one must be."""
    prof = app.profiles[cfg.suffix]
    lo, hi = prof.min_local_bsz, min(prof.max_local_bsz_for(cfg.shape),
                                     prof.max_local_bsz_by_replicas.get(cfg.gpus, 1 << 30))
    if hi < lo:
        return False
    if batch_size is None:
        if lo * cfg.gpus > app.max_batch_size:
            return False
        return prof.step_time(cfg.shape, lo) is not None and prof.step_time(cfg.shape, hi) is not None
    if not app.init_batch_size <= batch_size <= app.max_batch_size:
        return False
    local = math.ceil(batch_size / cfg.gpus - EPS)
    accum = math.ceil(local / hi - EPS) - 1
    if cfg.gpus == 1 and local > app.init_batch_size + EPS:
        accum = max(1, accum)
    atomic = math.ceil(local / (accum + 1) - EPS)
    atomic = min(atomic, hi, int(app.max_batch_size / (cfg.gpus * (accum + 1))))
    return atomic >= lo and prof.step_time(cfg.shape, atomic) is not None


def oracle_perf(app, suffix: str) -> PerfParams:
    """Pollux's throughput model fitted to every measured row of this type (what an oracle of the profiles knows)."""
    prof = app.profiles[suffix]
    p, v = prof.points, prof.values
    return fit_perf_params(p[:, 0], p[:, 1], p[:, 2], v[:, 0] - v[:, 1], v[:, 0])


def place_packed(gpus_per_node: int, num_nodes: int, wants) -> dict[int, tuple[int, ...]] | None:
    """Node index of every GPU for (job, GPUs) on one type: largest first, whole nodes for multi-node jobs, else
    the fullest node with room (best fit). Powers of two up to a node never split; None if they do not fit.

    >>> place_packed(4, 2, [(7, 1), (8, 4), (9, 2)])
    {8: (0, 0, 0, 0), 9: (1, 1), 7: (1,)}
    """
    free = [gpus_per_node] * num_nodes
    out: dict[int, tuple[int, ...]] = {}
    for job, n in sorted(wants, key=lambda w: (-w[1], w[0])):
        if n >= gpus_per_node:
            whole = [i for i, f in enumerate(free) if f == gpus_per_node][: n // gpus_per_node]
            if len(whole) * gpus_per_node < n:
                return None
            for i in whole:
                free[i] = 0
            out[job] = tuple(i for i in whole for _ in range(gpus_per_node))
            continue
        room = [i for i, f in enumerate(free) if f >= n]
        if not room:
            return None
        i = min(room, key=lambda i: (free[i], i))
        free[i] -= n
        out[job] = (i,) * n
    return out


class FrenzyElasticRounds:
    """The round allocator (see the module docstring)."""

    round_s = ROUND_S

    def __init__(self, layouts, options: FrenzyElasticOptions | None = None, **overrides):
        self.options = dataclasses.replace(options or FrenzyElasticOptions(), **overrides)
        self.tune_batch = self.options.adapt_batch  # read by the engine: jobs re-pick their batch for goodput
        self.layouts = tuple(layouts)
        self.configs = configs_of(self.layouts)
        self._fits: dict[tuple[str, int | None], np.ndarray] = {}
        self._oracle: dict[tuple[str, str], PerfParams] = {}
        self.moves = 0
        self.solve_s: list[float] = []

    @property
    def note(self) -> str:
        o = self.options
        know = "oracle: true profiles" if o.oracle else "goodput fitted from each job's own steps"
        order = "remaining work (SRPT)" if o.srpt else "least attained service"
        return (f"frenzy-elastic{' (oracle)' if o.oracle else ''}: {order}, {know}, efficiency floor "
                f"{o.efficiency_floor:g}, batch adaptation {'on' if o.adapt_batch else 'off'}")

    # --- what the policy estimates ------------------------------------------------------------------------------
    def _feasible(self, st) -> np.ndarray:
        batch = None if self.options.adapt_batch else st.job.batch_size
        key = (st.app.name, batch)
        if key not in self._fits:
            self._fits[key] = np.array([fits_in_memory(st.app, c, batch) for c in self.configs])
        return self._fits[key]

    def _model(self, st, suffix: str) -> GoodputModel | None:
        if not self.options.oracle:
            return st.goodput_model(suffix)
        key = (st.app.name, suffix)
        if key not in self._oracle:
            self._oracle[key] = oracle_perf(st.app, suffix)
        sqr, var = st.app.grad_stats(st.app.init_batch_size, min(st.epoch, st.app.max_epochs - 1))
        return GoodputModel(self._oracle[key], sqr, var, st.app.init_batch_size)

    def goodputs(self, st) -> np.ndarray:
        """Estimated progress per second of the job on every configuration; 0 where it is not offered."""
        app, cfgs = st.app, self.configs
        feasible = self._feasible(st)
        g = np.zeros(len(cfgs))
        models = {lay.suffix: self._model(st, lay.suffix) for lay in self.layouts}
        have = [lay.suffix for lay in self.layouts if models[lay.suffix] is not None]
        xput1 = app.one_gpu_samples_per_s()
        if not have:  # never run: 1 GPU of each type, in the ratio of the types' 1-GPU throughputs
            best = max(xput1.values())
            for k, c in enumerate(cfgs):
                if c.gpus == 1 and feasible[k]:
                    g[k] = xput1[c.suffix] / best
            return g
        if self.options.oracle:
            max_r = MAX_REPLICAS
        else:
            max_r = max(min(max(self.options.scale_up * st.max_observed_replicas(lay.suffix), 1), MAX_REPLICAS)
                        for lay in self.layouts)
        batch_cap = app.max_batch_size if self.options.adapt_batch else st.job.batch_size
        for t, lay in enumerate(self.layouts):
            idx = [k for k, c in enumerate(cfgs) if c.type_pos == t and feasible[k] and c.gpus <= max_r]
            if not idx:
                continue
            src, mult = lay.suffix, 1.0
            if models[src] is None:
                src = have[0]
                mult = xput1[lay.suffix] / xput1[src]
            prof = app.profiles[lay.suffix]
            nn = np.array([cfgs[k].num_nodes for k in idx], dtype=float)
            ng = np.array([cfgs[k].gpus for k in idx], dtype=float)
            his = np.array([prof.max_local_bsz_for(cfgs[k].shape) for k in idx])
            gp = np.zeros(len(idx))
            for h in np.unique(his):  # the largest per-GPU batch depends on the shape (memory)
                sel = his == h
                out, _, _ = models[src].optimize(nn[sel], ng[sel], batch_cap, (prof.min_local_bsz, int(h)),
                                                 tune_bsz=self.options.adapt_batch)
                gp[sel] = out
            g[idx] = gp * mult
        return g

    def priority(self, st, g: np.ndarray, ref: float) -> float:
        if self.options.srpt:
            left = st.app.progress_at(st.app.max_epochs) - st.progress
            return 1.0 / (1.0 + left / max(ref, 1e-12) / 3600.0)
        return 1.0 / (1.0 + st.attained_gpu_s / 3600.0 / self.options.las_quantum_gpu_h)

    # --- the round ------------------------------------------------------------------------------------------------
    def values(self, view, jobs) -> tuple[np.ndarray, list[int | None], list[int | None]]:
        """V[j, c] = w[j] s'[j, c] / (1 + efficiency_floor x GPUs(c)) with s' the restart-discounted speedup (0 where
        c is not offered); the current configuration of each job; the one each job must keep (paying its restart)."""
        opts, cfgs = self.options, self.configs
        gpus = np.array([c.gpus for c in cfgs], dtype=float)
        v = np.zeros((len(jobs), len(cfgs)))
        current: list[int | None] = []
        fixed: list[int | None] = []
        for r, j in enumerate(jobs):
            st = view.jobs[j]
            sfx = view.current.get(j, (None, ()))[0]
            k0 = next((k for k, c in enumerate(cfgs) if c.suffix == sfx and c.shape == st.placement), None) \
                if sfx is not None and st.placement else None
            current.append(k0)
            fixed.append(k0 if k0 is not None and st.restart_left_s > 0 else None)
            g = self.goodputs(st)
            ones = g[(gpus == 1) & (g > 0)]
            ref = float(ones.max()) if ones.size else float(g.max()) if g.max() > 0 else 1.0
            sp = g / ref
            if k0 is not None:
                if sp[k0] <= 0:  # its configuration is no longer offered (beyond what may be explored): keep it
                    sp[k0] = max(float(sp[gpus <= gpus[k0]].max(initial=0.0)), 1e-6)
                age = view.now_s - (st.first_start_s if st.first_start_s is not None else view.now_s)
                if opts.srpt:
                    life = (st.app.progress_at(st.app.max_epochs) - st.progress) / max(g[k0], 1e-12)
                else:  # least attained service: expect it to run as long again as it has (a Pareto tail)
                    life = age
                # a new allocation lasts until the next change, not the rest of the job's life: as long as its
                # allocations have lasted so far (age / starts), so a job moved often becomes costly to move again
                hold = age / ((st.restarts or 0) + 1)
                horizon = max(min(life, hold), opts.min_horizon_s)
                others = np.arange(len(cfgs)) != k0
                sp[others] = sp[others] / (1.0 + st.app.restart_s * sp[others] / (horizon * sp[k0]))
                seen = max(st.max_observed_replicas(lay.suffix) for lay in self.layouts)
                explore = np.array([c.type_pos == cfgs[k0].type_pos and c.gpus > max(cfgs[k0].gpus, seen)
                                    for c in cfgs])
                sp[others & ~explore] /= 1.0 + opts.move_margin  # only growth into sizes never run is exempt
            val = self.priority(st, g, ref) * sp / (1.0 + opts.efficiency_floor * gpus)
            v[r] = np.where(sp > 0, val, 0.0)
        return v, current, fixed

    def allocate(self, view) -> dict:
        jobs = list(view.active)
        cfgs = self.configs
        v, current, fixed = self.values(view, jobs)
        scale = float(np.abs(v).max()) or 1.0
        t0 = time.perf_counter()
        # solve_sia minimises sum x (cost - LAMBDA_N): cost = LAMBDA_N - V / scale maximises sum x V; a job whose
        # every value is <= 0 gets nothing; the capacity rows are the shared ones
        choice = solve_sia(LAMBDA_N - v / scale, [c.type_pos for c in cfgs], [c.gpus for c in cfgs],
                           [lay.total_gpus for lay in self.layouts], fixed)
        self.solve_s.append(time.perf_counter() - t0)
        out = {}
        for t, lay in enumerate(self.layouts):
            wants = [(j, cfgs[choice[r]].gpus) for r, j in enumerate(jobs)
                     if choice[r] >= 0 and cfgs[choice[r]].type_pos == t]
            placed = place_packed(lay.gpus_per_node, lay.num_nodes, wants)
            if placed is None:  # cannot happen: Sia's shapes pack whole within each type's capacity
                raise SpecError("policy", f"frenzy-elastic could not pack its {lay.gpu_type} allocation")
            for j, nodes in placed.items():
                out[j] = (lay.suffix, nodes)
        self.moves += sum(1 for r in range(len(jobs)) if current[r] is not None and choice[r] != current[r])
        return out

    def stats(self) -> dict[str, float]:
        return {"elastic_moves": float(self.moves), **solve_stats("mip", self.solve_s)}


# --- the event engine (the LLM job model, `simulate.simulate`) ------------------------------------------------------
@dataclass(frozen=True)
class Options(SolverOptions):
    """frenzy-elastic's (and frenzy-elastic-srpt's) knobs on the event engine: Sia's solver and rounds
    (`sia.SolverOptions`: round_s is the wake-up grid here), the value's (as `FrenzyElasticOptions`, with the event
    version's floor; oracle, adapt_batch and scale_up belong to the round version's fitted model) and the guard."""

    efficiency_floor: float = EVENT_EFFICIENCY_FLOOR  # f: value speedup / (1 + f GPUs) (the GPU-hours knob)
    srpt: bool = False  # order by the remaining-work estimate instead of attained service (frenzy-elastic-srpt)
    las_quantum_gpu_h: float = 1.0  # attained service at which a job's priority halves
    min_horizon_s: float = 600.0  # least expected remaining time a restart is weighed against
    move_margin: float = 0.3  # hysteresis: a running job moves only for this much more speedup
    # while jobs wait, a running job keeps its allocation this long after its start (frenzy-srpt's thrash guard)
    preempt_min_run_s: float = 600.0

    legacy_keys: ClassVar[dict[str, str]] = {**SolverOptions.legacy_keys, "preempt_min_run_s": "preempt_min_run_s"}

    def __post_init__(self):
        super().__post_init__()
        _check_value_knobs(self)


class FrenzyElasticPolicy(SiaPolicy):
    """`frenzy-elastic`: on the event engine the value above over Sia's ILP and placement (module docstring, "The
    event engine"); on the round engine (`--job-model sia-apps`) its `round_allocator`."""

    name = "frenzy-elastic"
    Options = Options
    colour = COLOUR
    note = NOTE
    srpt: ClassVar[bool] = False
    # the value's defaults on the event engine (efficiency_floor, las_quantum_gpu_h, min_horizon_s, move_margin; srpt
    # comes from the class): `default_options` builds `Options` from them, so a variant may be a subclass with other
    # event_options; SimOptions.policy_options overrides either
    event_options: ClassVar[FrenzyElasticOptions] = FrenzyElasticOptions(efficiency_floor=EVENT_EFFICIENCY_FLOOR)
    round_options = tuple(f.name for f in dataclasses.fields(FrenzyElasticOptions))  # what the allocator takes

    preemptive = True  # the simulator also calls it after a release with nothing queued (running jobs may grow)

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        # event-driven: called at every arrival and release, and at the wake-ups it asks for (`next_wake_s`: the
        # Options.round_s grid while jobs wait), since its value changes with time (attained service, ages, the guard)
        self.round_s = None
        self._restart_cost: dict = {}  # class key -> SimOptions.restart.cost_s, a function of the class alone
        self.moves = 0  # running jobs given another (type, size)
        self.stops = 0  # running jobs preempted with nothing in their place

    @classmethod
    def default_options(cls) -> Options:
        e = cls.event_options
        return Options(efficiency_floor=e.efficiency_floor, srpt=cls.srpt, las_quantum_gpu_h=e.las_quantum_gpu_h,
                       min_horizon_s=e.min_horizon_s, move_margin=e.move_margin)

    @staticmethod
    def round_allocator(layouts, **options):
        return FrenzyElasticRounds(layouts, **options)

    # --- what the policy estimates ------------------------------------------------------------------------------
    def restart_s(self, job) -> float:
        """The restart the simulator charges this job (`SimOptions.restart`, the one model every policy pays)."""
        key = class_key(job)
        if key not in self._restart_cost:
            self._restart_cost[key] = self.ctx.options.restart.cost_s(job)
        return self._restart_cost[key]

    def priority(self, view: SchedulerView, st, ref: float) -> float:
        """w: least attained service (no size knowledge), or under -srpt the predicted remaining GPU-hours at the
        job's leanest plan (tokens left / its per-GPU speed `ref`)."""
        if self.options.srpt:  # the believed size (`JobStatus.believed_left_share`: exact unless size noise)
            left = st.believed_left_share(st.done_share_at(view.now_s)) * st.job.tokens
            return 1.0 / (1.0 + left / max(ref, 1e-12) / 3600.0)
        return 1.0 / (1.0 + st.attained_gpu_s(view.now_s) / 3600.0 / self.options.las_quantum_gpu_h)

    def horizon_s(self, view: SchedulerView, st, x_now: float | None) -> float:
        """T: how long a new allocation is expected to last, over which a restart is weighed. As long as the job's
        allocations have lasted so far (age / starts: a job moved often becomes costly to move again), under SRPT
        at most its predicted remaining time on its current option; at least `min_horizon_s`."""
        age = view.now_s - st.first_start_s if st.first_start_s is not None else 0.0
        hold = age / (st.restarts + 1)
        if self.options.srpt and x_now:
            hold = min(hold, st.believed_left_share(st.done_share_at(view.now_s)) * st.job.tokens / x_now)
        return max(hold, self.options.min_horizon_s)

    def guard_end_s(self, view: SchedulerView, st) -> float:
        """Until when a running job keeps its allocation: while it pays its restart, and while jobs wait also
        until `Options.preempt_min_run_s` after its start (frenzy-srpt / frenzy-las's thrash guard; with no
        job waiting nothing competes for its GPUs, and growing into idle ones is priced by its restart alone)."""
        guard_s = st.startup_s
        if len(view.queue):
            guard_s = max(guard_s, self.options.preempt_min_run_s)
        return st.run_start_s + guard_s

    def next_wake_s(self, view: SchedulerView) -> float | None:
        """While jobs wait (the simulator asks only then): the next point of the `Options.round_s` grid at which some
        running job is past its guard, so waiting jobs are weighed again as priorities move (a round, as Sia's)."""
        r_s = float(self.options.round_s)
        movable = min((max(view.now_s, self.guard_end_s(view, view.jobs[j])) for j in view.running),
                      default=view.now_s)
        return r_s * max(math.floor(view.now_s / r_s) + 1, math.ceil(movable / r_s))

    def values(self, view: SchedulerView, jobs: list[int]):
        """V[j, o] (jobs x options, 0 where o does not fit), tokens/s per option, each job's current option
        (None when not running) and the option it must keep (its current one while the guard holds, else None)."""
        opts = self.options
        x = self.tokens_per_s(view, jobs)
        gpus = np.array([s for _t, s in self._matrix.options], dtype=float)
        ref = (x / gpus).max(axis=1, keepdims=True)  # per-GPU speed of the leanest plan (fewest GPU-hours)
        sp = np.divide(x, ref, out=np.zeros_like(x), where=ref > 0)  # s: speedup in GPU-equivalents
        v = np.zeros_like(x)
        current: list[int | None] = []
        fixed: list[int | None] = []
        for r, j in enumerate(jobs):
            st = view.jobs[j]
            s = sp[r].copy()
            k0 = self._current_option(st) if st.state == "running" else None
            current.append(k0)
            young = st.state == "running" and view.now_s < self.guard_end_s(view, st)
            fixed.append(k0 if k0 is not None and young else None)
            restart = self.restart_s(st.job)
            if k0 is not None:
                s[k0] = max(s[k0], 1e-6)  # the option it runs on stays on offer
                t_s = self.horizon_s(view, st, x[r, k0])
                others = np.arange(len(s)) != k0
                s[others] = s[others] / (1.0 + restart * s[others] / (t_s * s[k0])) / (1.0 + opts.move_margin)
            elif st.done_fraction > 0:  # a preempted job pays its restart on any option (s_current = s)
                s = s / (1.0 + restart / self.horizon_s(view, st, None))
            v[r] = self.priority(view, st, float(ref[r, 0])) * s / (1.0 + opts.efficiency_floor * gpus)
        return np.where(x > 0, v, 0.0), x, current, fixed

    # --- the round ------------------------------------------------------------------------------------------------
    def decide(self, view: SchedulerView) -> list[Decision]:
        running = list(view.running)
        queued = list(view.queue)[: self.options.max_jobs]
        jobs = running + queued
        if not jobs:
            return []
        v, x, current, fixed = self.values(view, jobs)
        out: list[Decision] = [Reject(jobs[r], "no allocation of this cluster fits it in memory")
                               for r in range(len(running), len(jobs)) if not x[r].any()]
        # jobs still paying their restart keep their allocation: out of the ILP, their GPUs out of its capacity
        cap = [int(c) for c in self.ctx.index.capacity_by_type()]
        choice = np.full(len(jobs), -1)
        for r, k in enumerate(fixed):
            if k is not None:
                t, size = self._matrix.options[k]
                cap[t] -= size
                choice[r] = k
        free_rows = [r for r in range(len(jobs)) if fixed[r] is None]
        t0 = time.perf_counter()
        if free_rows:
            choice[free_rows] = self._solve(v[free_rows], [current[r] for r in free_rows], cap)
        self.solve_times_s.append(time.perf_counter() - t0)
        n_run = len(running)
        moved = {j: r for r, j in enumerate(running) if choice[r] >= 0 and choice[r] != current[r]}
        stopped = [j for r, j in enumerate(running) if choice[r] < 0]
        starts, preempted = self._place_elastic(view, jobs, n_run, choice, moved, stopped)
        self.moves += len(moved)
        self.stops += len(preempted) - len(moved)
        out.extend(Preempt(j) for j in preempted)
        out.extend(starts.values())
        return out

    def _place_elastic(self, view: SchedulerView, jobs: list[int], n_running: int, choice, moved: dict,
                       stopped: list[int]) -> tuple[dict[int, Start], list[int]]:
        """Sia's placement (`SiaPolicy._place`: largest first, HAS's node choice on the chosen type, a move that
        cannot be placed is dropped and the rest redone) in the free GPUs plus those of the moved and the stopped
        jobs; then a stopped job (the ILP gave it nothing) is preempted only if a new allocation took some of its
        GPUs, else it keeps running on them (they would stay idle). Shrinks `moved`; returns (starts, preempted)."""
        starts, work = self._place_in(view, jobs, n_running, choice, moved, also_free=stopped)
        preempted = list(moved)
        for j in stopped:
            nodes = view.jobs[j].placement.nodes
            if all(work[node] >= n for node, n in nodes):  # nothing new needs its GPUs: it keeps them
                for node, n in nodes:
                    work[node] -= n
            else:
                preempted.append(j)
        return starts, preempted

    def stats(self) -> dict[str, float]:
        return {**super().stats(), "elastic_moves": float(self.moves), "elastic_preemptions": float(self.stops)}


SRPT_COLOUR = "#7b1fa2"
SRPT_NOTE = ("frenzy-elastic ordered by remaining work instead: it knows each job's size (its token budget) and "
             "favours the jobs with the fewest GPU-hours left, so short jobs finish first; otherwise the same elastic "
             "scheduler (grows, shrinks, moves and pauses jobs on plans that fit in memory, charging each move its "
             "restart).")


class FrenzyElasticSrptPolicy(FrenzyElasticPolicy):
    """`frenzy-elastic-srpt`: the same, ordered by the remaining-work estimate."""

    name = "frenzy-elastic-srpt"
    colour = SRPT_COLOUR
    note = SRPT_NOTE
    srpt = True

    @staticmethod
    def round_allocator(layouts, **options):
        return FrenzyElasticRounds(layouts, **{"srpt": True, **options})
