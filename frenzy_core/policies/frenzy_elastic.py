"""`frenzy-elastic` / `frenzy-elastic-srpt`: Frenzy made elastic on the sia-apps job model (`rounds.simulate_rounds`).

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
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from frenzy_core.errors import SpecError
from frenzy_core.policies.base import Decision, Policy, SchedulerView
from frenzy_core.policies.sia_real import CONFIGS, LAMBDA_N, MAX_REPLICAS, ROUND_S, SCALE_UP, solve_sia, solve_stats
from frenzy_core.sia_apps import EPS, GoodputModel, PerfParams, fit_perf_params

COLOR = "#0b7a75"


@dataclass(frozen=True)
class FrenzyElasticOptions:
    """The knobs of frenzy-elastic (defaults chosen on saturn-1 only, see bench/elastic.py)."""

    efficiency_floor: float = 0.05  # f: value speedup / (1 + f GPUs), a job's JCT + f GPU-hours (GPU-hours knob)
    srpt: bool = False  # order by the remaining-work estimate instead of attained service
    oracle: bool = False  # read the true profiles instead of each job's fitted model
    adapt_batch: bool = True  # Pollux-style batch adaptation (False: the user's batch, and only configs it fits)
    las_quantum_gpu_h: float = 1.0  # attained service at which a job's priority halves
    scale_up: int = SCALE_UP  # most a job may grow per round over the replicas it has run on (fitted mode)
    min_horizon_s: float = 600.0  # least expected remaining time a restart is weighed against
    move_margin: float = 0.3  # a running job moves only for this much more speedup (model noise), except to explore

    def __post_init__(self):
        if not 0.0 <= self.efficiency_floor < 1.0:
            raise SpecError("efficiency_floor", f"must be in [0, 1), got {self.efficiency_floor}")
        if not self.las_quantum_gpu_h > 0:
            raise SpecError("las_quantum_gpu_h", f"must be positive, got {self.las_quantum_gpu_h}")
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


def _round_only(name: str):
    def decide(self, view: SchedulerView) -> list[Decision]:
        raise SpecError("policy", f"{name} runs on the round engine only (--job-model sia-apps)")
    return decide


class FrenzyElasticPolicy(Policy):
    """`frenzy-elastic`: the registry entry; the policy is its round allocator (no LLM-job-model version yet)."""

    name = "frenzy-elastic"
    event_engine = False
    note = "elastic Frenzy: grows, shrinks, preempts every 60 s by least attained service; fitted goodput"
    color = COLOR
    round_options = tuple(f.name for f in dataclasses.fields(FrenzyElasticOptions))  # what the allocator takes
    decide = _round_only("frenzy-elastic")

    @staticmethod
    def round_allocator(layouts, **options):
        return FrenzyElasticRounds(layouts, **options)


class FrenzyElasticSrptPolicy(FrenzyElasticPolicy):
    """`frenzy-elastic-srpt`: the same, ordered by the remaining-work estimate."""

    name = "frenzy-elastic-srpt"
    note = "elastic Frenzy ordered by remaining work (SRPT); fitted goodput"
    decide = _round_only("frenzy-elastic-srpt")

    @staticmethod
    def round_allocator(layouts, **options):
        return FrenzyElasticRounds(layouts, **{"srpt": True, **options})
