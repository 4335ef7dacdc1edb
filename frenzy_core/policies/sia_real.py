"""`sia-real`: the Sia policy as published (Jayaram Subramanya et al., SOSP'23; artifact siasosp23/artifacts commit
aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70, `sia-simulator/sia.py` SiaPolicy.optimize_mip, run as in its
`run_experiment.sh`: p = -0.5, lambda_n = 1.1, 60 s rounds, --project_throughput --share_max_replicas).

Every round, for each job and each configuration c (GPU type, nodes, GPUs; 19 on the 64-GPU cluster: 1, 2, 4 GPUs on
one node, then whole nodes) Sia estimates the goodput G[j, c] from Pollux's throughput model fitted to the steps the
job has run on that type x its statistical efficiency, each at its best batch up to the user's (`GoodputModel`); a
type the job never ran on is projected from one it ran on by the ratio of their 1-GPU throughputs; a job never run
gets 1 on each type's 1-GPU configuration only (jobs start on one GPU). Configurations above twice the most replicas
it has run on (shared across types) are not offered (a job may at most double per round). Each row is normalised by
its smallest real value, every configuration except the job's current one is multiplied by the restart factor
r = max(age - restarts x penalty, 0) / (age + penalty) (1 while age < penalty; Pollux's re-allocation factor), and

    minimise   sum_jc x[j, c] round(G[j, c] ^ p, 2)  +  lambda_n (jobs - sum_jc x[j, c])
    subject to sum_c x[j, c] <= 1;  sum_j sum_{c of type t} gpus(c) x[j, c] <= C_t;  x binary;
               x[j, current] = 1 for a job still paying its restart (it cannot be moved).

With p < 0 a larger goodput costs less; lambda_n > 1 makes leaving a job out cost more than any allocation.
Solved with `scipy.optimize.milp` (HiGHS, relative gap 1e-4 as the artifact gives CBC); then each type's jobs are
placed largest first on nodes in order, whole nodes first (SiaPolicy.alloc_to_placement_fast).

On the LLM job model (`decide`) the same objective runs over the shared plan-table throughputs (goodput =
throughput, no statistical efficiency; no profiles, so no doubling limit), with the simulator's restart cost as
the penalty.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from frenzy_core.errors import SpecError
from frenzy_core.policies.base import class_key
from frenzy_core.policies.sia import SiaPolicy, SolverOptions

P_FAIRNESS = -0.5  # run_experiment.sh --policy_p_val
LAMBDA_N = 1.1  # --mip_lambda_n: cost of leaving a job without GPUs
ZERO_ALLOC_GAIN = 1e-4  # sia.py: goodput of a configuration the job may not take
GOODPUT_CLIP = 3000.0  # simulator_config.sia_goodput_clip_val
MIP_REL_GAP = 1e-4  # simulator_config.sia_solver_thresh
ROUND_S = 60.0  # --interval
MAX_REPLICAS = 64  # cluster.py get_sia_multi_job_info: "simulator can't handle more"
SCALE_UP = 2  # ... max_replicas = 2 x the most replicas profiled
# sia.py CONFIGS_4GPU / CONFIGS_8GPU: (nodes, GPUs) a job may be given, filtered to the type's node count
CONFIGS = {4: tuple(zip([1, 1, 1] + list(range(2, 17)), [1, 2, 4] + [4 * n for n in range(2, 17)], strict=True)),
           8: tuple(zip([1, 1, 1, 1] + list(range(2, 9)), [1, 2, 4, 8] + [8 * n for n in range(2, 9)], strict=True))}
COLOUR = "#9e9d24"
NOTE = ("Sia as published (SOSP'23, the authors' artifact). At most once a minute it re-solves the whole allocation: "
        "it estimates each job's speed on every GPU type and count (here the planner's throughput; on Sia's own "
        "applications a model fitted to the steps the job has run), favours the allocations that help slow jobs "
        "most (a fairness exponent), charges a restart for any move, and leaves no job without GPUs if it can. Jobs "
        "grow, shrink and move between types; it does not know job sizes.")


@dataclass(frozen=True)
class Options(SolverOptions):
    """sia-real's knobs on the LLM job model: the solver's and rounds' it shares with sia (`sia.SolverOptions`); the
    published objective's constants (P_FAIRNESS, LAMBDA_N, ...) are the artifact's and fixed. The round engine's
    version (`SiaRealRounds`) takes no knobs."""


def solve_stats(kind: str, times_s: Sequence[float]) -> dict[str, float]:
    """`Policy.stats()` of a round policy: how many solves and their mean wall time, e.g. {"mip_solves": 3.0, ...}."""
    s = np.array(times_s) if len(times_s) else np.zeros(1)
    return {f"{kind}_solves": float(len(times_s)), f"{kind}_solve_ms_mean": float(s.mean() * 1e3)}


def restart_factor(age_s: float, restarts: int, penalty_s: float) -> float:
    """Pollux's re-allocation factor: share of the job's age not lost to restarts, counting one more.

    >>> restart_factor(1000.0, 2, 50.0)  # (1000 - 100) / (1000 + 50)
    0.8571428571428571
    """
    if age_s < penalty_s:
        return 1.0
    return max(age_s - restarts * penalty_s, 0.0) / (age_s + penalty_s)


def sia_costs(goodput: np.ndarray, current: Sequence[int | None], factors: Sequence[float]) -> np.ndarray:
    """round(G^p, 2) of normalised goodputs after the restart factor (all but the current configuration)."""
    g = np.array(goodput, dtype=float)
    for r, (cur, f) in enumerate(zip(current, factors, strict=True)):
        if cur is not None:
            keep = g[r, cur]
            g[r] *= f
            g[r, cur] = keep
    a = np.round(np.power(np.maximum(g, 1e-300), P_FAIRNESS), 2)
    return np.minimum(a, GOODPUT_CLIP)


def solve_sia(costs: np.ndarray, config_type: Sequence[int], config_gpus: Sequence[int], capacity: Sequence[int],
              fixed: Sequence[int | None]) -> np.ndarray:
    """The MIP above over costs (jobs x configs); returns the chosen configuration per job (-1 = none).

    >>> sorted(solve_sia(np.array([[1.0, 0.5], [1.0, 0.5]]), [0, 0], [1, 2], [3], [None, None]).tolist())
    [0, 1]
    """
    n, m = costs.shape
    if n == 0:
        return np.zeros(0, dtype=int)
    c = (costs - LAMBDA_N).ravel()
    lower = np.zeros(n * m)
    for j, f in enumerate(fixed):
        if f is not None:
            lower[j * m + f] = 1.0
    a_one = np.kron(np.eye(n), np.ones((1, m)))
    a_cap = np.zeros((len(capacity), n * m))
    for k, (t, g) in enumerate(zip(config_type, config_gpus, strict=True)):
        a_cap[t, k::m] = g
    res = milp(c, integrality=np.ones(n * m), bounds=Bounds(lower, np.ones(n * m)),
               constraints=[LinearConstraint(a_one, -np.inf, np.ones(n)),
                            LinearConstraint(a_cap, -np.inf, np.asarray(capacity, dtype=float))],
               options={"disp": False, "mip_rel_gap": MIP_REL_GAP})
    if res.x is None:
        return np.full(n, -1)
    x = res.x.reshape(n, m) > 0.5
    return np.where(x.any(axis=1), x.argmax(axis=1), -1)


def place_fast(gpus_per_node: int, num_nodes: int, wants: Sequence[tuple[int, int]]) -> dict[int, tuple[int, ...]]:
    """Node index of every GPU for (job, GPUs) on one type, largest first (stable), whole nodes first, then
    round-robin from where the last job ended (sia.py alloc_to_placement_fast).

    >>> place_fast(4, 2, [(7, 1), (8, 4)])
    {8: (0, 0, 0, 0), 7: (1,)}
    """
    free = [gpus_per_node] * num_nodes
    out: dict[int, tuple[int, ...]] = {}
    cur = 0
    for job, n in sorted(wants, key=lambda w: -w[1]):
        node, got = cur, []
        full = n // gpus_per_node
        checked = 0
        while full > 0 and checked < num_nodes:
            if free[node] == gpus_per_node:
                free[node] = 0
                n -= gpus_per_node
                got += [node] * gpus_per_node
                full -= 1
            node = (node + 1) % num_nodes
            checked += 1
        while n > 0:
            if free[node]:
                k = min(n, free[node])
                n -= k
                free[node] -= k
                got += [node] * k
            node = (node + 1) % num_nodes
        out[job] = tuple(got)
        cur = node
    return out


class SiaRealRounds:
    """Sia on the sia-apps job model (`rounds.simulate_rounds`)."""

    round_s = ROUND_S
    tune_batch = True  # Sia's jobs re-pick their batch size for goodput

    def __init__(self, layouts):
        self.layouts = tuple(layouts)
        for lay in self.layouts:
            if lay.gpus_per_node not in CONFIGS:
                raise SpecError("cluster", f"Sia's configurations exist for nodes of 4 or 8 GPUs; {lay.gpu_type} nodes "
                                           f"have {lay.gpus_per_node}")
        self.configs = [(t, lay.suffix, nn, ng) for t, lay in enumerate(self.layouts)
                        for nn, ng in CONFIGS[lay.gpus_per_node] if nn <= lay.num_nodes]
        self.prev: dict[int, int | None] = {}  # job -> configuration it was given last round
        self.solve_s: list[float] = []

    def _goodput_row(self, st) -> np.ndarray:
        app, layouts = st.app, self.layouts
        max_r = max(min(max(SCALE_UP * st.max_observed_replicas(lay.suffix), 1), MAX_REPLICAS,
                        app.max_batch_size // app.profiles[lay.suffix].min_local_bsz) for lay in layouts)
        models = {lay.suffix: st.goodput_model(lay.suffix) for lay in layouts}
        have = [s for s in (lay.suffix for lay in layouts) if models[s] is not None]
        row = np.full(len(self.configs), ZERO_ALLOC_GAIN)
        unknown = set()
        xput1 = app.one_gpu_samples_per_s()
        for lay in layouts:
            idx = [k for k, c in enumerate(self.configs) if c[1] == lay.suffix and 1 <= c[3] <= max_r]
            if not have or not idx:
                unknown.add(lay.suffix)
                continue
            nn = np.array([self.configs[k][2] for k in idx], dtype=float)
            ng = np.array([self.configs[k][3] for k in idx], dtype=float)
            src, mult = lay.suffix, 1.0
            if models[lay.suffix] is None:  # project from the first type it ran on (_compute_goodputs_v2)
                src = have[0]
                mult = xput1[lay.suffix] / xput1[src]
                nn = np.ceil(ng / next(x.gpus_per_node for x in layouts if x.suffix == src))
            prof = app.profiles[src]
            gp, _, _ = models[src].optimize(nn, ng, st.job.batch_size, (prof.min_local_bsz, prof.max_local_bsz))
            row[idx] = gp * mult
        real = row[[k for k, c in enumerate(self.configs) if c[1] not in unknown]]
        real = real[real > ZERO_ALLOC_GAIN]
        row = row / (real.min() if real.size else 1.0)
        for k, c in enumerate(self.configs):
            if c[1] in unknown and c[3] == 1:
                row[k] = 1.0
        return np.maximum(row, ZERO_ALLOC_GAIN)

    def allocate(self, view) -> dict:
        jobs = list(view.active)
        self.prev = {j: self.prev.get(j) for j in jobs}
        goodput = np.array([self._goodput_row(view.jobs[j]) for j in jobs])
        current = [self.prev[j] for j in jobs]
        factors = []
        for j in jobs:
            st = view.jobs[j]
            factors.append(restart_factor(view.now_s - st.job.arrival_s, st.restarts or 0, st.app.policy_restart_s))
        fixed = [self.prev[j] if view.jobs[j].restart_left_s > 0 and self.prev[j] is not None else None for j in jobs]
        costs = sia_costs(goodput, current, factors)
        t0 = time.perf_counter()
        choice = solve_sia(costs, [c[0] for c in self.configs], [c[3] for c in self.configs],
                           [lay.total_gpus for lay in self.layouts], fixed)
        self.solve_s.append(time.perf_counter() - t0)
        out = {}
        for t, lay in enumerate(self.layouts):
            wants = [(j, self.configs[choice[r]][3]) for r, j in enumerate(jobs)
                     if choice[r] >= 0 and self.configs[choice[r]][0] == t]
            for j, nodes in place_fast(lay.gpus_per_node, lay.num_nodes, wants).items():
                out[j] = (lay.suffix, nodes)
        for r, j in enumerate(jobs):
            self.prev[j] = int(choice[r]) if choice[r] >= 0 else None
        return out

    def stats(self) -> dict[str, float]:
        return solve_stats("mip", self.solve_s)


class SiaRealPolicy(SiaPolicy):
    """Sia's published objective on the LLM job model (same rounds, solver and placement as `sia`)."""

    name = "sia-real"
    Options = Options
    colour = COLOUR
    note = NOTE
    round_allocator = SiaRealRounds

    def _restart_s(self, st) -> float:
        """The simulator's restart cost for this job: SimOptions.restart (one RestartModel for every policy)."""
        return float(self.ctx.options.restart.cost_s(st.job))

    def utilities(self, view, jobs: list[int]) -> np.ndarray:
        """Gains lambda_n - round(G^p, 2) (0 where the job does not fit): maximising them is Sia's minimisation."""
        keys = [class_key(view.jobs[j].job) for j in jobs]
        self._ensure_rows(keys)
        x = self._matrix.tokens_per_s[[self._rows[k] for k in keys]]
        fits = x > 0
        low = np.where(fits, x, np.inf).min(axis=1, keepdims=True)
        g = np.where(fits, x / np.where(np.isfinite(low), low, 1.0), ZERO_ALLOC_GAIN)
        current, factors = [], []
        for j in jobs:
            st = view.jobs[j]
            cur = self._current_option(st) if st.state == "running" else None
            current.append(cur)
            age = view.now_s - st.job.arrival_s
            factors.append(restart_factor(age, st.restarts, self._restart_s(st)))
        gain = LAMBDA_N - sia_costs(g, current, factors)
        return np.where(fits & (gain > 0), gain, 0.0)
